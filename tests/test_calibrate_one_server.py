"""One server, many workers: every rollout waits, and calibration still finds its latency.

gepa's default adapter sends its 10 rollouts at once to one endpoint; a local
server answers them one at a time, so no rollout ever starts alone. The time
the server spent on a call is its end less the later of its start and the end
of the call served before it: calibration fits that, and the simulator adds
the queueing itself. (The simulator's own traces never show this: it starts a
call when a server is free. The study experiments/optimize_anything records it
for real.)
"""

from __future__ import annotations

import numpy as np

from pxn.calibrate.traces.slowdown import served_alone
from pxn.calibrate.traces.units import Calls, one_server_waits
from pxn.trace import Rollout


def rollout(start: float, end: float) -> Rollout:
    return Rollout(
        start=start, end=end, iteration=1, phase="full_val", worker=0, candidate="0", example="e"
    )


def test_a_call_waits_for_the_end_of_the_one_before_it() -> None:
    # Three calls sent at 0 and served 1 s each one after the other; a fourth sent at 5 s,
    # when the server is idle, waits for nothing.
    calls = [rollout(0, 1), rollout(0, 3), rollout(0, 2), rollout(5, 6)]
    assert one_server_waits(calls).tolist() == [0.0, 2.0, 1.0, 0.0]


def calls_of(rollouts: list[Rollout], load: float) -> Calls:
    n = len(rollouts)
    return Calls(
        kind=np.full(n, "rollout"),
        phase=np.full(n, "full_val"),
        load=np.full(n, load),
        latency=np.array([r.duration for r in rollouts]),
        minibatch=np.full(n, 3),
        censored=np.zeros(n, bool),
        event=np.array(rollouts, dtype=object),
        tokens_in=np.full(n, np.nan),
        tokens_out=np.full(n, np.nan),
        run=np.zeros(n, int),
        wait=one_server_waits(rollouts),
    )


def test_when_every_call_queued_for_one_server_each_is_fitted_as_served() -> None:
    """Ten calls sent at once to one server taking 0.5 s each: each served 0.5 s, though
    their latencies run from 0.5 to 5 s. A slowdown fitted elsewhere does not apply: the
    server served each alone."""
    rollouts = [rollout(0, 0.5 * (k + 1)) for k in range(10)]
    served, waited = served_alone(calls_of(rollouts, 10), {"task": 0.3}, 1, None)
    assert waited == ["rollout"]
    assert np.allclose(served.latency, 0.5)
    # On two servers the same calls keep their waits in (an overestimate the caller reports).
    served, waited = served_alone(calls_of(rollouts, 10), {}, 2, None)
    assert waited == ["rollout"] and served.latency.max() == 5.0


def test_calls_that_started_alone_are_not_changed() -> None:
    """A call at load 1 is kept as measured, and queued ones beside it are set aside."""
    rollouts = [rollout(0, 1), rollout(2, 3)]
    served, waited = served_alone(calls_of(rollouts, 1), {}, 1, None)
    assert waited == [] and served.latency.tolist() == [1.0, 1.0]
