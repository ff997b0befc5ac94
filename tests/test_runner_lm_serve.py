"""`pxn lm serve` runs a standalone pool that answers; `pxn lm stop` ends it from elsewhere."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from pathlib import Path

import pytest
from conftest import PXN

from pxn.runner.lm_pool import running_pool

pytestmark = pytest.mark.lm


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "Z" not in Path(f"/proc/{pid}/stat").read_text()


def test_serve_then_stop(tmp_path):
    env = {**os.environ, "PXN_STATE_DIR": str(tmp_path)}
    serve = subprocess.Popen(
        [str(PXN), "lm", "serve", "--servers", "1"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        bases = []
        for line in serve.stdout:  # blocks until the pool reports itself ready
            if "api_base:" in line:
                bases.append(line.split("api_base:")[1].split()[0])
            if "stops the pool" in line:
                break
        assert len(bases) == 1
        with urllib.request.urlopen(f"{bases[0]}/models", timeout=10) as resp:
            assert resp.status == 200
        pids = [s["pid"] for s in json.loads((tmp_path / "lm_pool.json").read_text())["servers"]]
        # `pxn run` would use this pool rather than start its own.
        found = running_pool(tmp_path / "lm_pool.json")
        assert found is not None and [s.api_base for s in found.servers] == bases
        stop = subprocess.run([str(PXN), "lm", "stop"], env=env, capture_output=True, text=True)
        assert stop.returncode == 0 and "stopped 1 server(s)" in stop.stdout
        assert not any(_alive(pid) for pid in pids)
        assert not (tmp_path / "lm_pool.json").exists()
        assert serve.wait(timeout=30) == 0  # the serving process ended too
        assert running_pool(tmp_path / "lm_pool.json") is None
        # A second stop finds nothing to stop: one clear line, exit 2.
        again = subprocess.run([str(PXN), "lm", "stop"], env=env, capture_output=True, text=True)
        assert again.returncode == 2 and "nothing to stop" in again.stderr
    finally:
        serve.terminate()
        serve.wait(timeout=30)
