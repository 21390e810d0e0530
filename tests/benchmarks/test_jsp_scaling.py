"""The JSP-GFN scaling benchmark's quick run: every configuration runs and the JSON holds finite positive figures (no timing assertions)."""
import json
import math
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from jsp_scaling import main  # noqa: E402

pytestmark = pytest.mark.slow  # one subprocess per configuration: about 20 s

MEASURED = ("s_per_update", "s_per_update_min", "rss_mb", "n_params", "n")


def _positive(r: dict) -> None:
    assert "error" not in r and "skipped" not in r, r
    for key in MEASURED:
        assert math.isfinite(r[key]) and r[key] > 0, (key, r[key])
    assert math.isfinite(r["peak_mb"]) and r["peak_mb"] >= 0  # the rise of the peak over the updates: 0 when set-up already reached it
    assert len(r["times"]) == r["updates"] and all(t > 0 for t in r["times"])
    assert r["loss_finite"] and r["torch_threads"] == 1


def test_quick_run(tmp_path):
    out = tmp_path / "jsp.json"
    # --quick: d = 5, 2 timed updates; one S and a smaller N keep the subprocesses (one per configuration) near 20 s
    result = main(["--quick", "--seed", "0", "--theta-samples", "4", "--mb-models", "mlp", "--mb-rows", "1000", "--paths-models", "lingauss-diag", "--paths-theta-samples", "4", "--out", str(out)])
    saved = json.loads(out.read_text())
    assert saved == json.loads(json.dumps(result))
    assert set(saved) == {"meta", "scaling", "minibatch", "paths"}
    meta = saved["meta"]
    assert meta["threads"] == 1 and meta["quick"] and len(meta["load_start"]) == len(meta["load_end"]) == 3
    assert {(r["d"], r["model"], r["theta_samples"]) for r in saved["scaling"]} == {(5, "lingauss-diag", 4), (5, "mlp", 4)}
    assert {(r["d"], r["model"], r["n_data"], r["batch_size_data"]) for r in saved["minibatch"]} == {(5, "mlp", 1000, 0), (5, "mlp", 1000, 100)}
    assert [(r["d"], r["model"], r["theta_samples"]) for r in saved["paths"]] == [(5, "lingauss-diag", 4)]
    for r in saved["scaling"] + saved["minibatch"] + saved["paths"]:
        _positive(r)
    for r in saved["paths"]:  # both paths timed, alternating: as many updates each
        assert len(r["times_materialised"]) == r["updates"] and r["s_per_update_materialised"] > 0 and r["fast_over_materialised"] > 0
    table = out.with_suffix(".md").read_text()
    assert "| d | model |" in table and "Mini-batch rewards" in table and "Materialised vs fast" in table and "load average" in table
