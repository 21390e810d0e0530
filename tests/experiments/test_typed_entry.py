"""The typed entry point: an experiment's ``run(settings, context)`` called from Python with settings built as
dataclasses (no flat ``--set`` strings) writes the run the command line writes, to the last bit."""

import dataclasses
import json

import numpy as np
import pytest

from gflownet_measure.environments.hypergrid import HypergridConfig
from gflownet_measure.experiments import EXPERIMENTS
from gflownet_measure.experiments.cli import main
from gflownet_measure.experiments.common import run_id
from gflownet_measure.experiments.hypergrid import HypergridRun
from gflownet_measure.experiments.registry import RunContext
from gflownet_measure.experiments.settings import flatten
from gflownet_measure.experiments.training_config import TrainingConfig
from gflownet_measure.training import seed_everything

pytestmark = [pytest.mark.usefixtures("one_thread"), pytest.mark.slow]  # one thread: bitwise equality of float sums; slow: trains two runs


def _untimed(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if "seconds" not in k}


def test_run_from_typed_settings_writes_the_command_lines_run(tmp_path):
    settings = HypergridRun(
        space=HypergridConfig(height=4, ndim=2, hidden=16),
        training=dataclasses.replace(TrainingConfig(), steps=20, batch_size=8, eval_every=10),
        eval_samples=50,
    )
    exp = EXPERIMENTS["hypergrid"]
    cfg = {k: v for k, v in flatten(settings).items() if k in exp.settings}  # what the command line takes (not lr_backward)
    typed = tmp_path / "typed"
    typed.mkdir()
    seed_everything(3)  # the command line seeds the global stream before run, as here
    metrics = exp.run(settings, RunContext(typed, False, 3, run_id(cfg, 3)))

    cli = tmp_path / "cli"
    assert main(["run", "hypergrid", "--seed", "3", "--threads", "1", "--out", str(cli), "--set", *(f"{k}={v}" for k, v in cfg.items())]) == 0
    assert _untimed(metrics) == _untimed(json.loads((cli / "metrics.json").read_text()))
    with np.load(typed / "samples.npz") as a, np.load(cli / "samples.npz") as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    assert json.loads((cli / "config.json").read_text())["settings"] == cfg  # the flat settings are the typed ones
