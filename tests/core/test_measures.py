"""Integration rules of reference measures: exact on atoms, quadrature exact on polynomials, unbiased Monte Carlo."""
import math

import pytest
import torch

from gflownet_measure.checks import integrate
from gflownet_measure.measures import Atoms, Box, Measure, Piece, charted, counting, sum_measures
from gflownet_measure.transforms import AffineChart, PolarChart


def test_quadrature_is_exact_on_polynomials():
    box = Box((0.0, -1.0), (2.0, 1.0))
    u, lw = box.weighted_points(25, "quadrature")
    val = (lw.exp() * u[:, 0] ** 3 * u[:, 1] ** 2).sum()
    assert torch.isclose(val, torch.tensor(4.0 * 2 / 3, dtype=torch.float64), atol=1e-12)  # int x^3 dx * int y^2 dy


def test_gauss_hermite_on_the_real_line():
    u, lw = Box((-math.inf,), (math.inf,)).weighted_points(30, "quadrature")
    val = (lw.exp() * torch.exp(-u[:, 0] ** 2 / 2)).sum()
    assert torch.isclose(val, torch.tensor(math.sqrt(2 * math.pi), dtype=torch.float64), rtol=1e-10)


@pytest.mark.parametrize("n", [64, 512, 4096])
def test_quadrature_on_the_real_line_stays_finite_for_many_nodes(n):
    """``check dag-params --samples 512`` asked numpy for 512 Gauss-Hermite nodes, whose weights divide by zero: the rule
    caps them (HERMITE_MAX) and keeps integrating int cos(u) e^{-u^2/2} du = sqrt(2 pi) e^{-1/2} to float64 round-off
    (1e-12 relative: a sum of at most 200 terms of size <= 1)."""
    for coarse in (False, True):
        u, log_w = Box((-math.inf,), (math.inf,)).weighted_points(n, "quadrature", coarse=coarse)
        assert torch.isfinite(log_w).all() and len(u) >= 2
        integral = float((log_w.exp() * torch.cos(u[:, 0]) * torch.exp(-u[:, 0] ** 2 / 2)).sum())
        assert integral == pytest.approx(math.sqrt(2 * math.pi) * math.exp(-0.5), rel=1e-12)


@pytest.mark.parametrize("box", [Box((0.0,), (3.0,)), Box((-math.inf,), (math.inf,))])
def test_monte_carlo_is_unbiased_within_its_standard_error(box):
    """int exp(-x^2/2) over the box; 5 standard errors (false failure rate ~6e-7)."""
    truth = math.sqrt(2 * math.pi) * (0.5 if box.bounded else 1.0) * (math.erf(3 / math.sqrt(2)) if box.bounded else 1.0)
    g = torch.Generator().manual_seed(0)
    u, lw = box.weighted_points(20000, "mc", generator=g)
    y = len(u) * lw.exp() * torch.exp(-u[:, 0] ** 2 / 2)
    assert abs(float(y.mean()) - truth) < 5 * float(y.std()) / math.sqrt(len(u))


def test_polar_piece_has_the_quarter_disc_area():
    """The measure phi_#(|J| du) of the polar chart is Lebesgue area: mass pi rho^2 / 4."""
    m = charted(PolarChart(0.5), state_dim=2)
    wp = m.weighted_points(400, "quadrature")
    est, _ = integrate(wp, torch.ones_like(wp.log_w))
    assert torch.isclose(est[0], torch.tensor(math.pi * 0.25 / 4, dtype=torch.float64), rtol=1e-10)


def test_sum_of_atoms_and_pieces_locates_each_point():
    atoms = counting(torch.tensor([[0.0, 0.0], [1.0, 5.0]]))
    piece = charted(AffineChart(Box((0.0,), (1.0,)), slots=(1,), fixed={0: 2.0}), state_dim=2)
    m = sum_measures(atoms, piece)
    x = torch.tensor([[0.0, 0.0], [1.0, 5.0], [2.0, 0.3], [3.0, 0.3]])
    def rows(t):  # the same measure for each of the 4 queries
        return t.expand(4, *t.shape[1:])

    batched = Measure(Atoms(rows(m.atoms.x), rows(m.atoms.log_mass), rows(m.atoms.mask), rows(m.atoms.sink)), tuple(Piece(p.chart, rows(p.context), rows(p.mask)) for p in m.pieces))
    assert batched.component_of(x, torch.zeros(4, dtype=torch.bool)).tolist() == [0, 1, 2, -1]
    comp, us = batched.point_of(x, torch.zeros(4, dtype=torch.bool))  # the coordinates of the one row on the piece
    assert comp.tolist() == [0, 1, 2, -1] and torch.allclose(us[0], torch.tensor([[0.3]]))
    with pytest.raises(ValueError, match="batch"):
        sum_measures(atoms, batched)
