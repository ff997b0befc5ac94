"""Small parts of the runner: redaction, retries, shapes, the topics metric, task loading."""

from __future__ import annotations

import random

import litellm
import pytest

from pxn.errors import PxnError
from pxn.runner.config import RunConfig, plan
from pxn.runner.recording.totals import max_concurrency
from pxn.runner.redact import describe_error, redact
from pxn.runner.retry import CallFailed, RetryPolicy, call_with_retries, is_transient
from pxn.runner.tasks import load_task
from pxn.runner.topic_task import make_topic_task, metric
from pxn.trace import Rollout


def test_redact_hides_keys_headers_and_env_secrets(monkeypatch):
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-very-secret-123")
    text = (
        "Authorization: Bearer abc.def-123 api_key='sk-live-XYZ123456' "
        '{"api_key": "plainsecret99"} sk-proj-ABCDEF123456 tok-very-secret-123'
    )
    out = redact(text)
    for secret in ("abc.def-123", "sk-live-XYZ123456", "plainsecret99", "sk-proj-ABCDEF123456"):
        assert secret not in out
    assert "tok-very-secret-123" not in out
    assert describe_error(ValueError("x" * 1000)).endswith("...")


def test_retries_are_bounded_and_each_failure_reported():
    failures = []
    calls = {"n": 0}

    def flaky():
        calls["n"] += 1
        if calls["n"] < 3:
            raise litellm.exceptions.RateLimitError("slow down", "openai", "m")
        return "ok"

    policy = RetryPolicy(max_attempts=4, base_delay=0.001, max_delay=0.002)
    result, attempts = call_with_retries(flaky, policy, lambda: 0.0, failures.append)
    assert (result, attempts) == ("ok", 3)
    assert [f.attempt for f in failures] == [1, 2]

    failures.clear()

    def always():
        raise litellm.exceptions.InternalServerError("down", "openai", "m")

    with pytest.raises(CallFailed) as info:
        call_with_retries(always, policy, lambda: 0.0, failures.append)
    assert info.value.attempts == 4 and len(failures) == 4


def test_permanent_errors_are_not_retried():
    auth = litellm.exceptions.AuthenticationError("bad key", "openai", "m")
    assert not is_transient(auth)
    assert is_transient(litellm.exceptions.Timeout("t", "m", "openai"))
    rng = random.Random(0)
    policy = RetryPolicy(base_delay=0.25, max_delay=4.0)
    assert all(policy.delay(k, rng) <= 4.0 for k in range(1, 20))


def test_topics_metric_gives_partial_credit():
    ex = make_topic_task().val[1]  # a food sentence
    assert ex.topic == "food"
    assert metric(ex, "Food.").score == 1.0
    assert metric(ex, "The topic is food, clearly.").score == 0.6
    assert metric(ex, "sports or maybe food").score == 0.3
    wrong = metric(ex, "music")
    assert wrong.score == 0.0 and "food" in wrong.feedback
    assert metric(ex, "I cannot tell").score == 0.0


def test_task_loading():
    task = load_task(None)
    assert task.name == "topics"
    assert task.splits() == {"train": 24, "val": 8, "test": 16}
    assert load_task("plugin_task:make_task").name == "topics"
    for spec, needle in [
        ("nope", "unknown task"),
        ("no_such_module_xyz:make", "cannot import"),
        ("plugin_task:missing", "has no function"),
    ]:
        with pytest.raises(PxnError, match=needle):
            load_task(spec)


def test_max_concurrency_counts_touching_intervals_once():
    def r(start, end):
        return Rollout(
            start=start, end=end, iteration=1, phase="parent_minibatch", worker=0,
            candidate="0", example="train/0",
        )  # fmt: skip

    assert max_concurrency([r(0, 1), r(1, 2), r(2, 3)]) == 1
    assert max_concurrency([r(0, 2), r(1, 3), r(1.5, 1.6)]) == 3


def test_minibatch_flag_replaces_the_tasks_own():
    assert plan(RunConfig(out="x", task="topics")).task.minibatch == 3
    assert plan(RunConfig(out="x", task="topics", minibatch=1)).task.minibatch == 1
    with pytest.raises(PxnError, match=r"^minibatch must be between 1 and the trainset's"):
        plan(RunConfig(out="x", task="topics", minibatch=0))
