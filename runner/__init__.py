"""The real batched GEPA runner: gepa 0.1.4 + litellm, every rollout and reflection timed."""

import os

# Before anything imports litellm: otherwise its import tries to download a price
# list, retries and warns (no network here), costing seconds inside the first call.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
