"""AffineChart for every sign of ``scale``, with and without ``period``, relative and absolute, in float32 and float64.

Properties (hypothesis, derandomised): ``inverse(forward(u)) == u`` and ``contains(forward(u))`` on the whole box,
its corners included; points beyond the box (off the arc, for a periodic chart shorter than a period) are not
contained; ``log|J| = sum_i log|c_i|``.

Tolerance, in coordinate units, with ``eps`` the dtype's machine epsilon (1.2e-7 float32, 2.2e-16 float64):

.. math:: \\tau_u = 16\\, \\epsilon \\Big(1 + \\max_i(|l_i|, |h_i|) + \\frac{\\max|a| + T}{\\min_i |c_i|}\\Big)

Each of the ~8 rounded operations of the round trip (``c u``, ``a + c u``, ``mod T``, ``- a``, ``/ c`` and the
wrap ``start + (u - start) mod T/|c|``) errs by at most ``eps`` times a value bounded by ``|a| + |c u| + T`` in
state units or ``|u| + (|a| + T)/|c|`` in coordinate units; 16 covers their sum with room (the worst error over
3000 random cases was 6% of :math:`\\tau_u`). On a whole circle (``(h - l) |c| = T``) the two ends are one
point, so the round trip is compared modulo :math:`T/|c|`. ``contains`` gets ``atol`` :math:`= \\tau_u
\\max(1, \\max|c|)`: it tests both ``u`` (coordinate units) and :math:`\\varphi(u)` (state units, where an
error in ``u`` is multiplied by ``|c|``). The draws (``|c|`` in [0.25, 4], ``|l|, |a| <= 4``, ``T <= 2 pi``)
keep that ``atol`` below 6e-4 in float32, ten times smaller than the distance (at least 6e-3) of the points
beyond the box used below.
"""
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import HYPOTHESIS
from gflownet_measure.charts import AffineChart
from gflownet_measure.measures import Box

PERIODS = (1.0, 2 * math.pi)
N = 8  # points per example; rows 0 and 1 are the box's corners l and h


@st.composite
def cases(draw):
    """``(chart, s [N, k + 1], u [N, k], dtype)``: a random AffineChart on ``k`` of ``k + 1`` state coordinates (slots in random order)."""
    k = draw(st.integers(1, 3))
    period = draw(st.sampled_from((None,) + PERIODS))
    scale = [draw(st.floats(0.25, 4.0)) * draw(st.sampled_from((1.0, -1.0))) for _ in range(k)]
    low = [draw(st.floats(-4.0, 4.0)) for _ in range(k)]
    if period is None:
        extent = [draw(st.floats(0.1, 4.0)) for _ in range(k)]
    else:  # the whole circle, or an arc leaving a gap of at least 10% of the circle
        extent = [draw(st.one_of(st.just(1.0), st.floats(0.05, 0.9))) * period / abs(c) for c in scale]
    slots = draw(st.permutations(range(k + 1)))[:k]
    chart = AffineChart(Box(tuple(low), tuple(lo + e for lo, e in zip(low, extent))), slots, scale=tuple(scale), relative=draw(st.booleans()), period=period)
    dtype = draw(st.sampled_from((torch.float32, torch.float64)))
    g = torch.Generator().manual_seed(draw(st.integers(0, 2**16)))
    s = (8 * torch.rand(N, k + 1, generator=g, dtype=torch.float64) - 4).to(dtype)
    t = torch.rand(N, k, generator=g, dtype=torch.float64)
    t[0], t[1] = 0.0, 1.0  # the corners l and h
    lo, hi = torch.tensor(chart.domain.low, dtype=torch.float64), torch.tensor(chart.domain.high, dtype=torch.float64)
    return chart, s, (lo + (hi - lo) * t).to(dtype), dtype


def tolerance(chart: AffineChart, s: torch.Tensor) -> float:
    """:math:`\\tau_u` of the module docstring."""
    eps = torch.finfo(s.dtype).eps
    reach = max(abs(v) for v in chart.domain.low + chart.domain.high)
    anchor = float(s.abs().max()) if chart.relative else 0.0
    return 16 * eps * (1 + reach + (anchor + (chart.period or 0.0)) / min(abs(c) for c in chart.scale))


def whole_circle(chart: AffineChart) -> list[bool]:
    """Per coordinate: the box is the whole circle, ``(h - l) |c| = T``."""
    return [chart.period is not None and math.isclose((hi - lo) * abs(c), chart.period) for lo, hi, c in zip(chart.domain.low, chart.domain.high, chart.scale)]


@HYPOTHESIS
@given(cases())
def test_round_trip_and_contains_on_the_whole_box(case):
    chart, s, u, dtype = case
    x = chart.forward(s, u)
    assert x.dtype == dtype
    back = chart.inverse(s, x)
    err = back.double() - u.double()
    span = torch.tensor([chart.period / abs(c) if chart.period else math.inf for c in chart.scale], dtype=torch.float64)
    circle = torch.tensor(whole_circle(chart))
    err = torch.where(circle, torch.remainder(err + span / 2, span) - span / 2, err)  # the ends of a whole circle are one point
    tau = tolerance(chart, s)
    assert err.abs().max() <= tau, (err.abs().max(), tau)
    assert chart.contains(s, x, atol=tau * max(1.0, max(abs(c) for c in chart.scale))).all()


@HYPOTHESIS
@given(cases())
def test_points_beyond_the_box_are_not_contained(case):
    """Each coordinate in turn moved beyond ``h``: by a quarter of the extent (no period) or into the middle of the
    arc's gap (period, an arc shorter than the circle; a whole circle has no point beyond its box)."""
    chart, s, u, _ = case
    atol = tolerance(chart, s) * max(1.0, max(abs(c) for c in chart.scale))
    for i, (lo, hi, c) in enumerate(zip(chart.domain.low, chart.domain.high, chart.scale)):
        if whole_circle(chart)[i]:
            continue
        beyond = u.clone()
        beyond[:, i] = hi + ((hi - lo) / 4 if chart.period is None else (chart.period / abs(c) - (hi - lo)) / 4)
        assert not chart.contains(s, chart.forward(s, beyond), atol=atol).any()


@HYPOTHESIS
@given(cases())
def test_log_abs_det_jacobian_is_the_log_of_the_absolute_scales(case):
    chart, s, u, dtype = case
    expected = sum(math.log(abs(c)) for c in chart.scale)
    assert torch.allclose(chart.log_abs_det_jacobian(s, u), torch.full((N,), expected, dtype=dtype))


def test_a_clockwise_arc_inverts():
    """The issue's example: scale -2 on [0, 1] with period 2 pi, a 2-rad arc traversed clockwise from angle 0.
    Before the fix the inverse picked the preimage in [l c, l c + T) (right for c > 0 only): u = 0.25 came back as -2.89."""
    chart = AffineChart(Box((0.0,), (1.0,)), slots=(0,), scale=-2.0, period=2 * math.pi)
    s = torch.zeros(3, 1, dtype=torch.float64)
    u = torch.tensor([[0.25], [0.0], [1.0]], dtype=torch.float64)
    x = chart.forward(s, u)
    assert torch.allclose(x[:, 0], torch.tensor([2 * math.pi - 0.5, 0.0, 2 * math.pi - 2.0], dtype=torch.float64))
    assert torch.allclose(chart.inverse(s, x), u, atol=1e-15)
    assert chart.contains(s, x).all()
    assert not chart.contains(s, torch.tensor([[1.0]], dtype=torch.float64)).any()  # angle 1 rad: off the clockwise arc


def test_the_circle_is_one_to_one_across_its_seam():
    """A point within round-off of angle 0 is in the image of a periodic chart from either side of the seam."""
    chart = AffineChart(Box((0.0,), (2 * math.pi,)), slots=(0,), period=2 * math.pi)
    s = torch.zeros(2, 1, dtype=torch.float64)
    x = torch.tensor([[-1e-17], [2 * math.pi]], dtype=torch.float64)  # both are angle 0
    assert chart.contains(s, x).all()


def test_a_box_longer_than_a_period_is_refused():
    with pytest.raises(ValueError, match="more than one period"):
        AffineChart(Box((0.0,), (1.0,)), slots=(0,), scale=-7.0, period=2 * math.pi)
    with pytest.raises(ValueError, match="more than one period"):
        AffineChart(Box((-math.inf,), (math.inf,)), slots=(0,), period=2 * math.pi)
    with pytest.raises(ValueError, match="positive"):
        AffineChart(Box((0.0,), (1.0,)), slots=(0,), period=-1.0)
    AffineChart(Box((0.0,), (0.3,)), slots=(0,), scale=2 * math.pi / 0.3, period=2 * math.pi)  # exactly one period, up to round-off


def test_constants_made_in_inference_mode_serve_a_backward_pass():
    """A chart's scale tensor is made once and shared (``charts._constant``): made first inside a rollout's inference
    mode, it must still be an ordinary tensor that autograd may save (an inference tensor would raise in ``backward``)."""
    chart = AffineChart(Box((-math.inf,) * 2, (math.inf,) * 2), (0, 1), scale=(0.5, 3.0), relative=True, advance={2: 1.0})
    s = torch.tensor([[1.0, 2.0, 0.0]])
    with torch.inference_mode():
        chart.forward(s, torch.ones(1, 2))
    u = torch.tensor([[1.0, -1.0]], requires_grad=True)
    x = chart.forward(s, u)
    x.sum().backward()
    assert x.tolist() == [[1.5, -1.0, 1.0]]
    assert u.grad is not None and u.grad.tolist() == [[0.5, 3.0]]
