"""WallClock: a run folder's wall-clock seconds summed over the invocations that --resume joins, kept through a kill."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gflownet_measure.experiments.common import WallClock

ROOT = Path(__file__).resolve().parents[2]

SLEEPER = """
import sys, time
from pathlib import Path
from gflownet_measure.experiments.common import WallClock
with WallClock(Path(sys.argv[1]), resume=False, every=0.05):
    time.sleep(60)
"""


def _saved(out: Path) -> float:
    return json.loads((out / WallClock.FILE).read_text())["seconds"]


def test_resume_adds_to_the_saved_count_and_a_fresh_run_starts_at_zero(tmp_path):
    (tmp_path / WallClock.FILE).write_text(json.dumps({"seconds": 100.0}))
    with WallClock(tmp_path, resume=True) as clock:
        time.sleep(0.05)
    assert 100.05 <= clock.seconds() and 100.05 <= _saved(tmp_path) < 110
    with WallClock(tmp_path, resume=False) as clock:
        pass
    assert _saved(tmp_path) < 10  # a run started afresh in the folder does not inherit the old count


@pytest.mark.slow
def test_a_killed_invocation_keeps_its_count_up_to_the_last_tick(tmp_path):
    """SIGKILL runs no clean-up: what survives is the daemon thread's last write, at most ``every`` (0.05 s) old."""
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, str(tmp_path)], env=os.environ | {"PYTHONPATH": str(ROOT)})
    try:
        end = time.monotonic() + 60
        while time.monotonic() < end and not ((tmp_path / WallClock.FILE).exists() and _saved(tmp_path) >= 0.5):
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    first = _saved(tmp_path)
    assert first >= 0.5
    with WallClock(tmp_path, resume=True):
        pass
    assert _saved(tmp_path) >= first
