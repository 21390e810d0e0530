"""Contract tests for every chart (STYLE.md rule 10): round trip, containment, Jacobian against autograd."""
import math

import pytest
import torch

from gflownet_measure.measures import Box
from gflownet_measure.transforms import AffineChart, PolarChart

D = 4  # state dimension of the test states
ALL_CHARTS = {
    "lebesgue-box": AffineChart(Box((0.0, -1.0), (2.0, 3.0)), slots=(1, 2), scale=1.0, fixed={0: 2.0}),
    "scaled-relative": AffineChart(Box((-1.0,), (1.0,)), slots=(3,), scale=0.5, relative=True),
    "gaussian-increment": AffineChart(Box((-math.inf, -math.inf), (math.inf, math.inf)), slots=(0, 1), scale=(0.3, 2.0), relative=True),
    "torus": AffineChart(Box((0.0, 0.0), (2 * math.pi, 2 * math.pi)), slots=(1, 2), relative=True, period=2 * math.pi),
    "polar-quarter-disc": PolarChart(0.25, slots=(0, 1)),
    "scattered-slots": AffineChart(Box((-1.0, -1.0), (1.0, 1.0)), slots=(3, 0), scale=(0.5, 2.0), relative=True),  # gathered, not sliced
}


def test_slot_columns_are_a_view_only_when_contiguous_and_increasing():
    """``Chart.columns`` slices contiguous increasing slots (a view) and gathers any others, in the slots' order."""
    assert ALL_CHARTS["lebesgue-box"].columns == slice(1, 3)
    assert ALL_CHARTS["scattered-slots"].columns == [3, 0]
    s = torch.arange(8.0).reshape(2, D)
    assert torch.equal(s[:, ALL_CHARTS["scattered-slots"].columns], s[:, [3, 0]])


def _inputs(chart, n=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(n, D, generator=g, dtype=torch.float64)
    for i, v in chart.fixed.items():
        s[:, i] = v
    u, _ = chart.domain.weighted_points(n, "mc", generator=g)
    if chart.domain.bounded:  # keep away from the boundary where the inverse is ill-conditioned (r = 0)
        lo, hi = torch.tensor(chart.domain.low, dtype=torch.float64), torch.tensor(chart.domain.high, dtype=torch.float64)
        u = lo + (hi - lo) * (0.05 + 0.9 * (u - lo) / (hi - lo))
    return s, u


@pytest.mark.parametrize("name", ALL_CHARTS)
def test_round_trip_and_contains(name):
    chart = ALL_CHARTS[name]
    s, u = _inputs(chart)
    x = chart.forward(s, u)
    assert torch.allclose(chart.inverse(s, x), u, atol=1e-10)
    assert chart.contains(s, x).all()
    moved = x.clone()
    other = [i for i in range(D) if i not in chart.slots][0]
    moved[:, other] += 1.0  # a coordinate the chart never moves
    assert not chart.contains(s, moved).any()


@pytest.mark.parametrize("name", ALL_CHARTS)
def test_log_abs_det_jacobian_matches_autograd(name):
    """Area formula: |J| = sqrt(det(Dphi^T Dphi)) over the moved coordinates (float64, tolerance 1e-9 of round-off)."""
    chart = ALL_CHARTS[name]
    s, u = _inputs(chart, n=6)
    for b in range(len(s)):
        jac = torch.autograd.functional.jacobian(lambda v: chart.forward(s[b : b + 1], v[None])[0, list(chart.slots)], u[b])
        expected = 0.5 * torch.logdet(jac.T @ jac)
        assert torch.allclose(chart.log_abs_det_jacobian(s[b : b + 1], u[b : b + 1])[0], expected, atol=1e-9)


def test_chart_outside_domain_is_not_contained():
    chart = ALL_CHARTS["lebesgue-box"]
    s = torch.zeros(1, D, dtype=torch.float64)
    x = chart.forward(s, torch.tensor([[1.0, 0.0]], dtype=torch.float64))
    x[0, 1] = 2.5  # u_0 = 2.5 > high = 2
    assert not chart.contains(s, x).any()


def test_bad_charts_raise():
    with pytest.raises(ValueError, match="slots"):
        AffineChart(Box((0.0,), (1.0,)), slots=(0, 1))
    with pytest.raises(ValueError, match="non-zero"):
        AffineChart(Box((0.0,), (1.0,)), slots=(0,), scale=0.0)
    with pytest.raises(ValueError, match="low < high"):
        Box((1.0,), (0.0,))
