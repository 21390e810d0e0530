"""The JAX comparison benchmark without JAX: its refusals name what is missing, and our side runs in its pinned child
with and without the length-2 penalty (no timing assertions; the JAX side needs the public code, module docstring)."""
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))
from jsp_vs_jax import _child, main, markdown  # noqa: E402

SETUP = BENCHMARKS / "setup_jax_peer.sh"


def test_refuses_without_the_public_code(tmp_path):
    with pytest.raises(SystemExit, match="--jax-checkout"):
        main([])
    with pytest.raises(SystemExit, match="holds no dag_gflownet/gflownet.py"):
        main(["--jax-checkout", str(tmp_path), "--jax-python", sys.executable])


@pytest.mark.slow  # the benchmark's child process imports torch and trains: about 3 s a case
@pytest.mark.parametrize("penalty", [False, True])
def test_our_side_runs_pinned_in_a_child(penalty):
    cpu = min(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 0
    spec = {"d": 3, "model": "lingauss-full", "n_data": 20, "batch": 8, "theta_samples": 2, "updates": 2, "warmup": 1, "seed": 0, "cpu": cpu, "penalty": penalty}
    r = _child(sys.executable, "--child-ours", spec, timeout=300)
    assert r["side"] == ("ours+penalty" if penalty else "ours")
    assert len(r["times"]) == 2 and all(t > 0 for t in r["times"])
    assert math.isfinite(r["last_loss"])


def test_markdown_names_the_jax_sides_compilations():
    meta = {"d": 20, "model": "lingauss-full", "batch": 64, "theta_samples": 64, "n_data": 100, "cpu": 0, "rounds": 2, "updates": 3,
            "warmup": 1, "torch": "t", "jax": "0.4.13", "jax_dtype": "float32", "python": "3.11", "load_start": 1.0, "load_end": 2.0, "wall_s": 9.0}
    summary = {"ours": {"median": 0.5, "min": 0.4}, "ours+penalty": {"median": 1.0, "min": 0.9},
               "jax": {"median": 2.0, "min": 1.5, "n": 6, "compiling_iterations": 1, "median_without_compiles": 1.8}}
    text = markdown({"meta": meta, "summary": summary})
    assert "| ours | 500.0 | 400.0 | 0.25 |" in text
    assert "1 of its 6 timed iterations held an XLA compilation" in text and "1800.0 ms" in text


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
def test_setup_script_refuses_in_one_line(tmp_path):
    assert subprocess.run(["bash", "-n", str(SETUP)]).returncode == 0
    missing = subprocess.run(["bash", str(SETUP), "--python", "no-such-python3.11", "--dir", str(tmp_path / "c"), "--venv", str(tmp_path / "v")],
                             capture_output=True, text=True)
    assert missing.returncode == 1 and missing.stderr.count("\n") == 1 and "no-such-python3.11 not found" in missing.stderr
    assert not (tmp_path / "c").exists() and not (tmp_path / "v").exists()
    unknown = subprocess.run(["bash", str(SETUP), "--bogus"], capture_output=True, text=True)
    assert unknown.returncode == 1 and "unknown argument --bogus" in unknown.stderr
