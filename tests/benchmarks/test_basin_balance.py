"""benchmarks/basin_balance.py: TB's per-basin balance read back from a torus run folder."""

import math
import sys
from pathlib import Path

import pytest

from gflownet_measure.experiments.cli import main as cli

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from basin_balance import balance, main, mix  # noqa: E402

TINY = ["steps=6", "eval_every=3", "eval_samples=200", "paper_samples=100", "batch_size=16", "hidden=16", "n_layers=1", "n_steps=2", "eval_grid=24"]


def test_mix_weights_each_part_by_its_share():
    """Equal parts of batches: a basin's share is the mean of its shares, its mean residual the share-weighted mean; a part
    with none of the basin does not count (its mean is nan)."""
    assert mix((0.2, 1.0), (0.6, -1.0)) == pytest.approx((0.4, -0.5))
    assert mix((0.5, 2.0), (0.0, math.nan)) == pytest.approx((0.25, 2.0))


@pytest.mark.slow  # trains a short torus run: about 1.8 s
def test_a_local_search_run_gives_every_kind_of_batch(tmp_path):
    """An R6 run with local search and the weight average (a few updates): both samplers' masses sum to one over the six
    modes, the forward KL within each mode is positive (a barely trained sampler is far from R; a sign error in the identity
    would make it negative), and the replay rows are there with their shares summing to one."""
    out = tmp_path / "r6"
    assert cli(["run", "torus", "--out", str(out), "--set", *TINY, "local_search=true", "ls_every=2", "ls_moves=3", "ema=0.9"]) == 0
    found = balance(out, samples=500)
    assert list(found.masses) == ["sampler (weight average)", "last iterate"] and len(found.basins) == 6
    for rows in found.masses.values():
        assert sum(m for m, _, _ in rows) == pytest.approx(1.0)
        assert sum(e for _, e, _ in rows) == pytest.approx(1.0, abs=1e-9)
        assert all(kl > 0 for m, _, kl in rows if m > 0.05)
    assert {"exploring batches", "replay (rank_weight 0.01)", "replay (uniform)", "half exploring, half replay (uniform)"} <= set(found.residuals)
    for rows in found.residuals.values():
        assert sum(s for s, _ in rows) == pytest.approx(1.0)


def test_a_folder_without_a_run_is_refused_in_one_line(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "holds no run" in err
