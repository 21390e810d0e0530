"""The JAX comparison benchmark without JAX: its refusals name what is missing, and our side runs in its pinned child
with and without the length-2 penalty (no timing assertions; the JAX side needs the public code, module docstring)."""
import math
import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from jsp_vs_jax import _child, main  # noqa: E402


def test_refuses_without_the_public_code(tmp_path):
    with pytest.raises(SystemExit, match="--jax-checkout"):
        main([])
    with pytest.raises(SystemExit, match="holds no dag_gflownet/gflownet.py"):
        main(["--jax-checkout", str(tmp_path), "--jax-python", sys.executable])


@pytest.mark.parametrize("penalty", [False, True])
def test_our_side_runs_pinned_in_a_child(penalty):
    cpu = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    spec = {"d": 3, "model": "lingauss-full", "n_data": 20, "batch": 8, "theta_samples": 2, "updates": 2, "warmup": 1, "seed": 0, "cpu": cpu, "penalty": penalty}
    r = _child(sys.executable, "--child-ours", spec, timeout=300)
    assert r["side"] == ("ours+penalty" if penalty else "ours")
    assert len(r["times"]) == 2 and all(t > 0 for t in r["times"])
    assert math.isfinite(r["last_loss"])
