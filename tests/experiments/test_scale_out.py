"""`run NAME --world-size N`: one run trained by N processes (torch.distributed, gloo on loopback), written once."""
import json

import pytest

from conftest import check_contract
from gflownet_measure.experiments.cli import main

pytestmark = pytest.mark.slow  # two processes train one run: about 20 s


def test_two_replicas_write_one_run_folder(tmp_path):
    out = tmp_path / "ddp"
    argv = ["run", "hypergrid", "--world-size", "2", "--out", str(out), "--set", "steps=20", "eval_every=10", "height=4", "ndim=2"]
    assert main(argv) == 0
    check_contract(out)
    config = json.loads((out / "config.json").read_text())
    assert config["world_size"] == 2 and config["torch_threads"] == 1
    rows = [json.loads(r) for r in (out / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20]  # rank 0 alone writes the history: no row twice
    both = 20 * config["settings"]["batch_size"] * 2  # both replicas' batches: batch_size is per replica
    assert rows[-1]["trajectories"] == both
    assert json.loads((out / "metrics.json").read_text())["trajectories"] == both
