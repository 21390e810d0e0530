"""--set logger=tensorboard: the history's scalars as TensorBoard event files in the run folder (read back with
TensorBoard's own reader), recorded in the manifest, purged of the rows a resume drops, and a one-line error (exit 2,
nothing written) where the optional package is missing."""

import json
import math
import sys

import numpy as np
import pytest

from gflownet_measure.experiments.cli import main
from gflownet_measure.experiments.common import run_id
from gflownet_measure.training import Trainer

TINY = ["--threads", "1", "--set", "steps=20", "eval_every=10", "eval_samples=50", "hidden=16"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _event_scalars(folder) -> dict:
    """``{tag: [(step, value), ...]}`` as TensorBoard's reader shows the event files of ``folder`` (every event kept)."""
    accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")
    acc = accumulator.EventAccumulator(str(folder), size_guidance={accumulator.SCALARS: 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _history_scalars(out) -> dict:
    """The same from ``history.jsonl``: every finite number but ``step``, rounded to float32 as TensorBoard stores it."""
    scalars: dict = {}
    for line in (out / "history.jsonl").read_text().splitlines():
        row = json.loads(line)
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                scalars.setdefault(key, []).append((row["step"], float(np.float32(value))))
    return scalars


def _event_files(out) -> set:
    return {p.name for p in (out / "tensorboard").glob("events.out.tfevents.*")}


def test_hypergrid_event_files_hold_the_history_and_overwrite_removes_them(tmp_path):
    pytest.importorskip("tensorboard")
    out = tmp_path / "r"
    assert main(["run", "hypergrid", "--out", str(out), *TINY, "logger=tensorboard"]) == 0
    history = _history_scalars(out)
    assert {"loss", "trajectories", "seconds", "l1_to_target", "log_Z"} <= set(history) and [s for s, _ in history["loss"]] == [10, 20]
    assert _event_scalars(out / "tensorboard") == history
    files = _event_files(out)
    assert len(files) == 1  # one invocation, one event file, recorded in the manifest that --overwrite reads
    assert set(json.loads((out / "tensorboard" / "manifest.json").read_text())["files"]) == files
    assert "tensorboard" in json.loads((out / "manifest.json").read_text())["folders"]
    assert main(["run", "hypergrid", "--out", str(out), "--overwrite", *TINY]) == 0  # logger=none
    assert not (out / "tensorboard").exists() and (out / "metrics.json").exists()


@pytest.mark.slow
def test_hypergrid_resume_hides_the_rows_it_drops(tmp_path, monkeypatch):
    """Killed after the row of step 20 but before its checkpoint: the resume drops that row from the history and logs it
    anew, in an event file of its own; TensorBoard's reader shows each step once, as the history does."""
    pytest.importorskip("tensorboard")
    out = tmp_path / "r"
    save = Trainer._save

    def killed(self, step, *args, **kwargs):
        if step == 20:
            raise KeyboardInterrupt
        return save(self, step, *args, **kwargs)

    monkeypatch.setattr(Trainer, "_save", killed)
    assert main(["run", "hypergrid", "--out", str(out), *TINY, "logger=tensorboard"]) == 130
    monkeypatch.undo()
    assert [s for s, _ in _event_scalars(out / "tensorboard")["loss"]] == [10, 20]  # the row of step 20, flushed before the kill
    assert main(["run", "hypergrid", "--out", str(out), "--resume", "--threads", "1"]) == 0
    history = _history_scalars(out)
    assert [s for s, _ in history["seconds"]] == [10, 20]
    assert _event_scalars(out / "tensorboard") == history
    files = _event_files(out)
    assert len(files) == 2 and set(json.loads((out / "tensorboard" / "manifest.json").read_text())["files"]) == files


def test_logger_tensorboard_without_the_package_is_one_line_before_the_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if tensorboard were not installed
    out = tmp_path / "r"
    assert main(["run", "hypergrid", "--out", str(out), *TINY, "logger=tensorboard"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install 'gflownet-measure[tensorboard]'" in err, err
    assert not out.exists()  # stopped while resolving the settings, before the run folder


def test_logger_is_not_part_of_the_run_identity():
    """Where a run reports changes nothing it trains: a checkpoint written before the setting existed still resumes."""
    assert run_id({"steps": 20, "logger": "tensorboard"}, 0)["settings"] == run_id({"steps": 20}, 0)["settings"] == {"steps": 20}
