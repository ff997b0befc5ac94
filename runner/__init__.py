"""The real batched GEPA runner: gepa 0.1.4 + litellm, every rollout and reflection timed."""
