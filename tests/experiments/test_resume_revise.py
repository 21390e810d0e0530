"""A run finished with other evaluation settings (``--resume --set``): only the settings evaluation alone reads change,
the trained weights stay those of the run, ``config.json`` records both values, and any other setting is one line,
exit 2, the folder untouched."""

import json

import numpy as np
import pytest
import torch

from gflownet_measure.experiments import EXPERIMENTS
from gflownet_measure.experiments.cli import _revised_settings, main
from gflownet_measure.experiments.settings import ConfigError

RUN = ["run", "hypergrid", "--preset", "quick", "--threads", "1", "--set", "steps=20", "eval_every=10", "eval_samples=200"]


def _weights(path):
    return torch.load(path, weights_only=True)["model"]


@pytest.fixture
def run(tmp_path):
    out = tmp_path / "r"
    assert main(RUN + ["--out", str(out)]) == 0
    return out


@pytest.mark.slow  # trains a run, then three resumes (about 3 s)
def test_a_finished_run_is_rescored_with_other_evaluation_settings_and_its_weights_kept(run, capsys):
    before = _weights(run / "checkpoint.pt")
    assert main(["run", "hypergrid", "--out", str(run), "--resume", "--set", "eval_samples=300", "--threads", "1"]) == 0
    config = json.loads((run / "config.json").read_text())
    assert config["settings"]["eval_samples"] == 300 and config["trained_with"] == {"eval_samples": 200}
    after = _weights(run / "checkpoint.pt")
    assert all(torch.equal(before[k], after[k]) for k in before)
    with np.load(run / "samples.npz") as samples:
        assert len(samples["x"]) == 300  # the final evaluation's draws
    assert main(["run", "hypergrid", "--out", str(run), "--resume", "--threads", "1"]) == 0  # the record still resumes
    assert main(["run", "hypergrid", "--out", str(run), "--resume", "--set", "eval_samples=200", "--threads", "1"]) == 0
    assert json.loads((run / "config.json").read_text())["trained_with"] == {}  # back to the values it trained with


@pytest.mark.slow  # trains a run per case
@pytest.mark.parametrize("assignment", ["steps=30", "lr=0.5", "eval_every=5"])
def test_a_resume_that_would_change_the_model_is_one_line_and_touches_nothing(run, assignment, capsys):
    config = (run / "config.json").read_text()
    capsys.readouterr()
    assert main(["run", "hypergrid", "--out", str(run), "--resume", "--set", assignment, "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    key = assignment.split("=")[0]
    assert "\n" not in err and f"not {key}; valid: eval_samples" in err, err
    assert (run / "config.json").read_text() == config


def test_an_experiment_of_many_runs_takes_no_setting_on_resume():
    table = EXPERIMENTS["sde-table"]
    saved = {"settings": {}}
    with pytest.raises(ConfigError, match="valid: none"):
        _revised_settings(table, saved, {"eval_samples": "5"}, trained_before=True)
    assert _revised_settings(table, saved, {}, trained_before=True)[1] == {}


def test_a_crafted_trained_with_is_one_line():
    with pytest.raises(ConfigError, match="trained_with"):
        _revised_settings(EXPERIMENTS["hypergrid"], {"settings": {}, "trained_with": {"steps": 3}}, {}, trained_before=True)
