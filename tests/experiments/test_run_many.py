"""run_many's worker processes: they end with their parent, and an error stops the jobs not yet started."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # worker processes started and killed: about 40 s in all

ROOT = Path(__file__).resolve().parents[2]

PARENT = """
import os, sys, time
from dataclasses import dataclass
from pathlib import Path
from gflownet_measure.experiments.common import SubRun, run_many

@dataclass(frozen=True)
class Job:
    fail: bool = False
    sleep: float = 0.0

def run(settings, context):
    (context.out / "started").write_text(str(os.getpid()))
    if settings.fail:
        raise RuntimeError("job failed on purpose")
    time.sleep(settings.sleep)
    return {}

if __name__ == "__main__":
    root, n, fail, sleep = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "fail", float(sys.argv[4])
    run_many(run, [SubRun(root / f"job{k}", k, {"fail": fail and k == 0, "sleep": sleep}, Job) for k in range(n)], resume=False, workers=2)
"""


def _parent(tmp_path: Path, n: int, fail: bool, sleep: float) -> subprocess.Popen:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "runs"), str(n), "fail" if fail else "ok", str(sleep)], env=env, stderr=subprocess.PIPE, text=True)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped by its new parent, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_for(condition, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if condition():
            return True
        time.sleep(0.2)
    return condition()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process states from /proc")
def test_workers_end_when_the_parent_is_killed(tmp_path):
    """SIGTERM to a jobs=2 table kills the parent without clean-up; its two workers, each 120 s from the end of a job, must follow it within seconds."""
    parent = _parent(tmp_path, 2, fail=False, sleep=120.0)
    started = [tmp_path / "runs" / f"job{k}" / "started" for k in range(2)]
    try:
        assert _wait_for(lambda: all(p.exists() for p in started), 120), "the two workers never started their jobs"
        pids = [int(p.read_text()) for p in started]
        assert all(_alive(pid) for pid in pids)
        parent.send_signal(signal.SIGTERM)
        parent.wait(30)
        assert _wait_for(lambda: not any(_alive(pid) for pid in pids), 20), "a worker kept running after its parent was killed"
    finally:
        parent.kill()
        for p in started:
            if p.exists() and _alive(int(p.read_text())):
                os.kill(int(p.read_text()), signal.SIGKILL)


def test_an_error_drops_the_jobs_not_started(tmp_path):
    """Job 0 of 12 raises at once: the error reaches the parent, and the jobs not yet handed to a worker are dropped instead of run (each takes 4 s, two at a time: the parent has 4 s to react before a job ends and the pool hands out more)."""
    parent = _parent(tmp_path, 12, fail=True, sleep=4.0)
    _, err = parent.communicate(timeout=120)
    assert parent.returncode != 0 and "job failed on purpose" in err
    started = sorted(p.parent.name for p in (tmp_path / "runs").glob("job*/started"))
    # at most 6 start: job 0, job 1 (the other worker), the one the freed worker takes next, and the 3 that the pool's
    # call queue (max_workers + 1 slots) may hold when the error arrives; those are already the workers' and still run
    assert "job0" in started and len(started) <= 6, started
