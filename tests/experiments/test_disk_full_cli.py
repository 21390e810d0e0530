"""A disk that fills up during a run: one line naming the file (``error: FOLDER/wall_clock.json: No space left on
device``), exit 2, and no temporary file left in the run folder (issue 64, item 8).

The disk is ``/dev/full``: the temporary file of each write to the names chosen is made as usual, then its descriptor is
swapped for one of ``/dev/full``, so every write on it fails with the kernel's ``ENOSPC``."""

import errno
import os
import threading

import pytest

from conftest import FULL_DISK, leftovers
from gflownet_measure.experiments.cli import main
from gflownet_measure.experiments.common import WallClock, write_json

TINY = ["--threads", "1", "--set", "steps=20", "eval_every=10", "eval_samples=50"]

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.skipif(not FULL_DISK.exists(), reason="no /dev/full on this system")]


def test_write_json_on_a_full_disk_names_the_file(tmp_path, full_disk):
    full_disk.append("config.json")
    with pytest.raises(OSError) as e:
        write_json(tmp_path / "config.json", {"seed": 0})
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "config.json") and os.listdir(tmp_path) == []


@pytest.mark.parametrize("name", ["wall_clock.json", "checkpoint.pt"])
def test_a_run_on_a_full_disk_is_one_line_naming_the_file(tmp_path, full_disk, name, capsys):
    """``wall_clock.json``: written last, at the clock's exit; ``checkpoint.pt``: by ``torch.save``, which reports the
    full disk as a ``RuntimeError`` of its own (and the clock's exit, which would fail as well, is not the error shown)."""
    out = tmp_path / "run"
    full_disk.append(name)
    assert main(["run", "hypergrid", "--out", str(out), *TINY]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and err.splitlines()[-1] == f"gflownet-measure: error: {out / name}: No space left on device", err  # after the progress bar
    assert leftovers(out) == [] and not (out / "metrics.json").exists() and not (out / name).exists()


def test_the_wall_clock_thread_never_prints_a_traceback_and_the_exit_names_the_file(tmp_path, full_disk, monkeypatch):
    """A periodic write that fails is tried again at the next tick (no ``Exception in thread``); the one at the exit
    raises, naming ``wall_clock.json``, unless the run failed already: then the run's own error is the one raised."""
    full_disk.append(WallClock.FILE)
    thread_errors: list = []
    monkeypatch.setattr(threading, "excepthook", thread_errors.append)
    with pytest.raises(OSError, match="No space left on device") as e:
        with WallClock(tmp_path, resume=False, every=0.01):
            threading.Event().wait(0.2)  # several ticks, each failing
    assert e.value.filename == str(tmp_path / WallClock.FILE) and thread_errors == [] and leftovers(tmp_path) == []
    with pytest.raises(OSError) as e:
        with WallClock(tmp_path, resume=False):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "checkpoint.pt"))
    assert e.value.filename == str(tmp_path / "checkpoint.pt") and leftovers(tmp_path) == []
