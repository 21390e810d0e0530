"""Integration rules of reference measures: exact on atoms, quadrature exact on polynomials, unbiased Monte Carlo."""
import math

import pytest
import torch

from gflownet_measure.charts import AffineChart, PolarChart
from gflownet_measure.checks import integrate
from gflownet_measure.measures import Atoms, Box, Measure, Piece, charted, counting, sum_measures


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


class _Masked(AffineChart):
    """Lebesgue measure on the coordinates of a 3-box that a state's first three entries mark active (a piece of varying dimension)."""

    def active(self, s):
        return s[:, :3] > 0.5


def _gauss_bump(u):
    return torch.exp(-0.5 * (u**2).sum(-1))


@pytest.mark.parametrize("bounded", [pytest.param(True, marks=pytest.mark.slow), False])  # bounded: about 12 s
def test_masked_quadrature_integrates_over_the_active_coordinates_only(bounded):
    """A piece of varying dimension (Chart.active): on active set A the integral of exp(-|u|^2/2) is prod over A of the
    one-dimensional integral (Gauss-Legendre / Gauss-Hermite, exact to 1e-10 here), whatever the inactive ones; an empty
    A is a unit atom."""
    lo, hi = (-2.0, 2.0) if bounded else (-math.inf, math.inf)
    box = Box((lo,) * 3, (hi,) * 3)
    one = math.sqrt(2 * math.pi) * (math.erf(2 / math.sqrt(2)) if bounded else 1.0)
    ctx = torch.tensor([[0, 0, 0, 0.0], [1, 0, 0, 0], [1, 0, 1, 0], [1, 1, 1, 0]], dtype=torch.float64)
    piece = Piece(_Masked(box, slots=(0, 1, 2), relative=False, fixed={3: 1.0}), ctx, torch.ones(4, dtype=torch.bool))
    wp = Measure(Atoms.empty(4, 4, torch.float64), (piece,)).weighted_points(4096, "quadrature")
    values = torch.where(wp.mask, _gauss_bump(wp.x[..., :3]), 0.0)
    est, _ = integrate(wp, values)
    for b, k in enumerate([0, 1, 2, 3]):
        assert float(est[b]) == pytest.approx(one**k, rel=1e-10)
    assert (wp.x[0][wp.mask[0]][:, :3] == 0).all()  # the empty set: its one node is the origin


def test_masked_monte_carlo_is_unbiased_within_its_standard_error():
    """The same integrals by Monte Carlo on the active coordinates; 5 standard errors (false failure rate ~6e-7 per row)."""
    box = Box((-math.inf,) * 3, (math.inf,) * 3, proposal_scale=1.5)
    ctx = torch.tensor([[0, 0, 0, 0.0], [0, 1, 0, 0], [1, 1, 1, 0]], dtype=torch.float64)
    piece = Piece(_Masked(box, slots=(0, 1, 2), relative=False, fixed={3: 1.0}), ctx, torch.ones(3, dtype=torch.bool))
    wp = Measure(Atoms.empty(3, 4, torch.float64), (piece,)).weighted_points(20000, "mc", generator=torch.Generator().manual_seed(0))
    est, var = integrate(wp, torch.where(wp.mask, _gauss_bump(wp.x[..., :3]), 0.0))
    for b, k in enumerate([0, 1, 3]):
        truth = (2 * math.pi) ** (k / 2)
        assert abs(float(est[b]) - truth) <= 5 * max(float(var[b]) ** 0.5, 1e-12)
