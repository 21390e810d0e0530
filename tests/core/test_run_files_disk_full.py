"""Run files on a disk that fills up: the error names the file being written (not nothing, not a temporary name), and a
failed write leaves no temporary file and no half of an appended line (issue 64, item 8).

The disk is ``/dev/full`` (every write fails with ``ENOSPC``, from the kernel): the temporary file of a write is made
as usual, then its descriptor is swapped for one of ``/dev/full``, so the writers (a buffer, ``np.savez``,
``torch.save``) meet the real error through the real file objects."""

import errno
import os

import numpy as np
import pytest
import torch

from conftest import FULL_DISK, leftovers
from gflownet_measure import run_files
from gflownet_measure.run_files import append_text, confined, start_manifest, write_file, write_text

needs_dev_full = pytest.mark.skipif(not FULL_DISK.exists(), reason="no /dev/full on this system")


@needs_dev_full
@pytest.mark.parametrize(
    "write",
    [
        lambda p: write_text(p, '{"seconds": 1.0}\n'),
        lambda p: write_text(p, "x" * 100_000),  # more than a buffer: the error comes from a write, not from the close
        lambda p: write_file(p, lambda f: np.savez(f, x=np.zeros(1000))),
        lambda p: write_file(p, lambda f: torch.save({"w": torch.zeros(1000)}, f)),  # torch reports it as a RuntimeError of its own
    ],
)
def test_a_write_on_a_full_disk_names_the_file_and_leaves_no_temporary_file(tmp_path, full_disk, write):
    (tmp_path / "run.json").write_text("before")
    with pytest.raises(OSError) as e:
        write(tmp_path / "run.json")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "run.json"), e.value
    assert f"{e.value.filename}: {e.value.strerror}" == f"{tmp_path / 'run.json'}: No space left on device"
    assert leftovers(tmp_path) == [] and (tmp_path / "run.json").read_text() == "before"  # the earlier version is kept


@needs_dev_full
def test_a_full_disk_in_a_run_folder_names_the_file_inside_it(tmp_path, full_disk):
    full_disk.append("checkpoint.pt")  # the manifest, which records it, is written
    run = tmp_path / "run"
    run.mkdir()
    start_manifest(run)
    with confined(run), pytest.raises(OSError, match="No space left on device") as e:
        write_file(run / "checkpoint.pt", lambda f: torch.save({"w": torch.zeros(10)}, f), previous="checkpoint.prev.pt")
    assert e.value.filename == str(run / "checkpoint.pt") and leftovers(run) == []


@pytest.mark.parametrize("failing", ["replace", "write"])
def test_a_rename_or_write_refused_names_the_file_and_leaves_no_temporary_file(tmp_path, monkeypatch, failing):
    """Without /dev/full: ``os.replace`` (the rename onto the name) or the temporary file's write raising ENOSPC."""

    def refuse(*args, **kw):
        raise OSError(errno.ENOSPC, "No space left on device")

    if failing == "replace":
        monkeypatch.setattr(run_files.os, "replace", refuse)
    else:
        monkeypatch.setattr(run_files._Temporary, "write", refuse)
    with pytest.raises(OSError) as e:
        write_text(tmp_path / "metrics.json", "{}")
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(tmp_path / "metrics.json")
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_append_that_fails_names_the_file_and_leaves_the_earlier_lines(tmp_path, monkeypatch):
    path = tmp_path / "history.jsonl"
    append_text(path, '{"step": 1}\n')
    real_write, calls = os.write, []

    def half_then_full(fd, data):  # the disk fills up half-way through the line
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(run_files.os, "write", half_then_full)
    with pytest.raises(OSError) as e:
        append_text(path, '{"step": 2, "loss": 0.5}\n')
    assert e.value.errno == errno.ENOSPC and e.value.filename == str(path) and len(calls) == 2
    assert path.read_text() == '{"step": 1}\n'
