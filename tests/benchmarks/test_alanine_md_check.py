"""benchmarks/alanine_md_check.py: its 15-degree cells hold the Ramachandran basins exactly, and its MD chain runs."""
import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from gflownet_measure.environments import alanine
from gflownet_measure.environments.torus_targets import periodic_grid

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from alanine_md_check import CELLS, basin_masses, coarse, histogram  # noqa: E402


def test_cells_hold_the_basins_exactly():
    """Basin masses from 15-degree cell masses equal those summed over the 3-degree grid (the cell edges lie on the basins'
    30-degree boundaries), for any density; points at the fine grid's nodes fall in the cells that coarse() sums them into."""
    fine = periodic_grid(2, 120)
    p = torch.softmax(torch.randn(len(fine), dtype=torch.float64, generator=torch.Generator().manual_seed(0)), 0)
    region = alanine.basin_of(fine)
    direct = [float(p[region == j].sum()) for j in range(len(alanine.BASINS))]
    assert basin_masses(coarse(p, 120)) == pytest.approx(direct, abs=1e-12)
    assert torch.allclose(histogram(fine.numpy() - 2 * math.pi), coarse(torch.full((len(fine),), 1 / len(fine), dtype=torch.float64), 120))
    assert coarse(p, 120).shape == (CELLS * CELLS,)


@pytest.mark.slow
def test_a_short_chain_gives_torsions():
    """2 ps of Langevin dynamics after the burn-in: 20 frames of (phi, psi) in [-pi, pi], and the chain moves."""
    pytest.importorskip("openmm", reason="the molecule extra (OpenMM) is not installed")
    from alanine_md_check import md_torsions

    x = md_torsions("amber14-all.xml", 300.0, 0.002, seed=0)
    assert x.shape == (20, 2) and np.isfinite(x).all() and (np.abs(x) <= math.pi).all()
    assert np.ptp(x, 0).min() > 0
