"""Run files: written through no symbolic link, never outside the run folder, and recorded in the folder's manifest."""
import json
import os

import numpy as np
import pytest

from gflownet_measure import run_files
from gflownet_measure.run_files import MANIFEST, RunFileError, append_text, confined, inventory, make_folder, start_manifest, write_file, write_text


@pytest.fixture
def outside(tmp_path):
    """A file of the user's outside the run folder, and the run folder."""
    target = tmp_path / "notes.txt"
    target.write_text("my notes")
    run = tmp_path / "run"
    run.mkdir()
    return target, run


def test_os_replace_replaces_a_link_not_its_target(outside):
    """What the module relies on: renaming onto a name that is a symbolic link replaces the link itself."""
    target, run = outside
    (run / "a").symlink_to(target)
    (run / "b").write_text("new")
    os.replace(run / "b", run / "a")
    assert not (run / "a").is_symlink() and (run / "a").read_text() == "new" and target.read_text() == "my notes"


@pytest.mark.parametrize("write", [
    lambda p: write_text(p, "x"),
    lambda p: append_text(p, "x"),
    lambda p: write_file(p, lambda f: np.savez(f, x=np.zeros(3))),
])
def test_a_link_is_refused_and_its_target_unchanged(outside, write):
    target, run = outside
    (run / "history.jsonl").symlink_to(target)
    with confined(run), pytest.raises(RunFileError, match="history.jsonl is a symbolic link: a run never writes through one") as e:
        write(run / "history.jsonl")
    assert "\n" not in str(e.value) and target.read_text() == "my notes" and (run / "history.jsonl").is_symlink()
    assert sorted(p.name for p in run.iterdir()) == ["history.jsonl"]  # no temporary file left


def test_a_link_that_appears_after_the_check_is_still_not_followed(outside, monkeypatch):
    """Without the check (a link placed between it and the write): the temporary file is renamed over the link, and an
    append opens with O_NOFOLLOW."""
    target, run = outside
    monkeypatch.setattr(run_files, "_check_name", lambda fd, path: None)
    (run / "samples.npz").symlink_to(target)
    write_file(run / "samples.npz", lambda f: f.write(b"samples"))
    assert not (run / "samples.npz").is_symlink() and (run / "samples.npz").read_bytes() == b"samples" and target.read_text() == "my notes"
    (run / "history.jsonl").symlink_to(target)
    with pytest.raises(RunFileError, match="is a symbolic link"):
        append_text(run / "history.jsonl", "row\n")
    assert target.read_text() == "my notes"


def test_a_linked_folder_or_a_path_outside_the_run_folder_is_refused(tmp_path, outside):
    target, run = outside
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "sub").symlink_to(elsewhere, target_is_directory=True)
    with confined(run):
        with pytest.raises(RunFileError, match="sub is a symbolic link"):
            write_text(run / "sub" / "config.json", "{}")
        with pytest.raises(RunFileError, match="sub is a symbolic link"):
            make_folder(run / "sub" / "seed0")
        with pytest.raises(RunFileError, match="lies outside the run folder"):
            write_text(tmp_path / "config.json", "{}")
        with pytest.raises(RunFileError, match="lies outside the run folder"):
            write_text(run / ".." / "config.json", "{}")
    assert list(elsewhere.iterdir()) == [] and not (tmp_path / "config.json").exists()


def test_the_manifest_lists_what_was_written_and_made(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "mine.txt").write_text("a user's file, there before the run")
    start_manifest(run)
    with confined(run):
        write_text(run / "config.json", "{}")
        write_file(run / "checkpoint.pt", lambda f: f.write(b"1"), previous="checkpoint.prev.pt")
        write_file(run / "checkpoint.pt", lambda f: f.write(b"2"), previous="checkpoint.prev.pt")
        append_text(run / "history.jsonl", "{}\n")
        make_folder(run / "a" / "seed0")
        write_text(run / "a" / "seed0" / "metrics.json", "{}")
    assert (run / "checkpoint.prev.pt").read_bytes() == b"1" and (run / "checkpoint.pt").read_bytes() == b"2"
    assert json.loads((run / MANIFEST).read_text()) == {"files": ["checkpoint.prev.pt", "checkpoint.pt", "config.json", "history.jsonl"], "folders": ["a"]}
    assert json.loads((run / "a" / MANIFEST).read_text()) == {"files": [], "folders": ["seed0"]}
    assert json.loads((run / "a" / "seed0" / MANIFEST).read_text()) == {"files": ["metrics.json"], "folders": []}
    (run / "config.json.123-0123abcd.tmp").write_text("left by a killed write")
    (run / "a" / "draft.tmp").write_text("a user's")
    found = inventory(run)
    rel = lambda paths: sorted(p.relative_to(run).as_posix() for p in paths)  # noqa: E731
    assert rel(found.files) == [
        "a/manifest.json", "a/seed0/manifest.json", "a/seed0/metrics.json",
        "checkpoint.prev.pt", "checkpoint.pt", "config.json", "config.json.123-0123abcd.tmp", "history.jsonl", "manifest.json",
    ]
    assert rel(found.folders) == ["a", "a/seed0"]
    assert [(p.relative_to(run).as_posix(), kind) for p, kind in found.foreign] == [("a/draft.tmp", "a file"), ("mine.txt", "a file")]


def test_a_folder_without_manifest_is_written_unrecorded(tmp_path):
    write_text(tmp_path / "config.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"] and inventory(tmp_path) is None
