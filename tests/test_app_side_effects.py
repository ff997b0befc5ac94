"""The app changes nothing it does not own: no matplotlib backend switch, no pyplot, no
litellm import for prices, and the SIGTERM handler of `pxn lm serve` put back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from pxn.app.commands.lm import wait_for_stop

ROOT = Path(__file__).resolve().parents[1]
PRICED = ROOT / "experiments" / "advise_example" / "livebench-math-api.toml"


def python(code: str, env: dict[str, str] | None = None) -> str:
    """Run `code` in a fresh interpreter; its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_drawing_a_figure_keeps_the_backend_and_never_loads_pyplot(tmp_path: Path) -> None:
    code = f"""
import sys, matplotlib
from pxn.api.plots import save_figure, sweep_figure
from pxn.shape import Shape
from pxn.sim.predict import sweep
from pxn.sim.presets import load_scenario
scenario = load_scenario("hover")
figure = sweep_figure(scenario, sweep(scenario, [Shape(1, 1), Shape(2, 2)], 2))
save_figure(figure, {str(tmp_path)!r} + "/s.png")
print(matplotlib.rcParams["backend"], "matplotlib.pyplot" in sys.modules)
"""
    assert python(code, env={"MPLBACKEND": "svg"}).split() == ["svg", "False"]
    assert (tmp_path / "s.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_priced_prediction_does_not_import_litellm() -> None:
    code = f"""
import sys
from pxn.app.cli import main
try:
    main(["sweep", {str(PRICED)!r}, "--budget", "600", "--shapes", "single", "--reps", "2",
          "--format", "json"])
except SystemExit as exc:
    assert not exc.code, exc.code
print("litellm" in sys.modules, file=sys.stderr)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert '"dollars": {' in done.stdout  # it was priced
    assert done.stderr.split()[-1] == "False"


def test_waiting_for_sigterm_restores_the_handler_it_replaced() -> None:
    def before(*_: object) -> None:
        raise AssertionError("the replaced handler ran")

    saved = signal.signal(signal.SIGTERM, before)
    try:

        def terminate_once_waiting() -> None:
            # Poll (no sleep) until wait_for_stop has installed its handler.
            while signal.getsignal(signal.SIGTERM) is before:
                pass
            signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)

        sender = threading.Thread(target=terminate_once_waiting)
        sender.start()
        wait_for_stop()  # returns: SIGTERM ends the wait, as `pxn lm stop` does
        sender.join()
        assert signal.getsignal(signal.SIGTERM) is before
    finally:
        signal.signal(signal.SIGTERM, saved)
