"""`--set executor=ray`: a table's runs as Ray tasks (a local Ray instance), the same folders and results as the local pool."""
import json
import sys

import pytest

from gflownet_measure.experiments.cli import main

TINY = ["steps=6", "eval_every=3", "prefill=10", "batch_size=8", "theta_samples=2", "hidden=8", "posterior_samples=50", "dims=3", "datasets=2"]


def _numbers(path):
    return {k: v for k, v in json.loads(path.read_text()).items() if "seconds" not in k}


def test_ray_gives_the_table_of_the_local_pool(tmp_path):
    pytest.importorskip("ray")
    args = ["--threads", "1", "--set", *TINY]
    assert main(["run", "jsp-table", "--out", str(tmp_path / "local"), *args]) == 0
    assert main(["run", "jsp-table", "--out", str(tmp_path / "ray"), *args, "executor=ray", "jobs=2"]) == 0
    for k in range(2):  # each run seeded on its own: the same numbers, wherever it trained
        assert _numbers(tmp_path / "ray" / "d3" / f"data{k}" / "metrics.json") == _numbers(tmp_path / "local" / "d3" / f"data{k}" / "metrics.json")
    assert _numbers(tmp_path / "ray" / "metrics.json") == _numbers(tmp_path / "local" / "metrics.json")
    assert main(["run", "jsp-table", "--out", str(tmp_path / "ray"), "--resume"]) == 0  # finished runs are kept


def test_ray_missing_is_one_line_naming_the_extra(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main(["run", "jsp-table", "--out", str(tmp_path / "t"), "--set", *TINY, "executor=ray"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "pip install -e '.[cluster]'" in err
    assert not (tmp_path / "t").exists()
