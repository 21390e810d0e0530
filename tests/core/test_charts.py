"""The chart contract, over every ``Chart`` subclass of the core: round trip, containment, Jacobian against autograd.

:data:`CASES` gives, for each chart class, small instances (factories); :func:`test_every_core_chart_has_contract_cases`
finds every concrete ``Chart`` subclass defined in ``gflownet_measure`` by introspection and fails, naming the
class, when one has none: a new chart joins the contract by adding its factories here.

All contract checks run in float64 on states ``s [16, 4]`` and coordinates drawn in the middle 90% of each
bounded box (the inverse of a polar chart is ill-conditioned at ``r = 0``); tolerances are a few thousand
float64 ulps (1e-10 on ``u``, 1e-9 on ``log|J|``), far below any error of a wrong formula.
"""
import importlib
import inspect
import math
import pkgutil
import warnings

import pytest
import torch

import gflownet_measure
from conftest import APPLICATIONS
from gflownet_measure.charts import AffineChart, ArcChart, Chart, PolarChart, WithoutJacobian
from gflownet_measure.measures import Box

D = 4  # state dimension of the test states
TWO_PI = 2 * math.pi


def _arc_bounds(s):
    """Angle fractions ``A < B`` in ``[0.1, 0.9]`` that vary with the anchor (``s`` in ``[0, 1)``)."""
    return 0.1 + 0.2 * s[:, 0], 0.7 + 0.2 * s[:, 1]


CASES = {
    AffineChart: {
        "lebesgue-box": lambda: AffineChart(Box((0.0, -1.0), (2.0, 3.0)), slots=(1, 2), scale=1.0, fixed={0: 2.0}),
        "scaled-relative": lambda: AffineChart(Box((-1.0,), (1.0,)), slots=(3,), scale=0.5, relative=True),
        "negative-scales": lambda: AffineChart(Box((-1.0, 0.5), (1.0, 2.0)), slots=(0, 2), scale=(-0.5, -3.0), relative=True),
        "gaussian-increment": lambda: AffineChart(Box((-math.inf, -math.inf), (math.inf, math.inf)), slots=(0, 1), scale=(0.3, 2.0), relative=True),
        "clock": lambda: AffineChart(Box((-2.0, -2.0), (2.0, 2.0)), slots=(0, 1), scale=0.1, relative=True, advance={2: -1.0}),
        "scattered-slots": lambda: AffineChart(Box((-1.0, -1.0), (1.0, 1.0)), slots=(3, 0), scale=(0.5, 2.0), relative=True),  # gathered, not sliced
        "torus": lambda: AffineChart(Box((0.0, 0.0), (TWO_PI, TWO_PI)), slots=(1, 2), relative=True, period=TWO_PI),
        "torus-negative-scale": lambda: AffineChart(Box((0.0, 0.0), (TWO_PI, TWO_PI)), slots=(1, 2), scale=-1.0, relative=True, period=TWO_PI),
        "arc-negative-scale": lambda: AffineChart(Box((0.0,), (1.0,)), slots=(0,), scale=-2.0, period=TWO_PI),  # a 2-rad arc, clockwise
        "backward-arc": lambda: AffineChart(Box((-1.0,), (0.0,)), slots=(1,), scale=2.0, relative=True, period=TWO_PI),  # the 2 rad before the anchor
    },
    PolarChart: {
        "quarter-disc": lambda: PolarChart(0.25, slots=(0, 1)),
        "fixed-flag": lambda: PolarChart(0.5, slots=(2, 3), fixed={0: 1.0}),
    },
    ArcChart: {
        "children": lambda: ArcChart(0.25, _arc_bounds, direction=1),
        "parents": lambda: ArcChart(0.25, _arc_bounds, direction=-1, slots=(2, 3)),
    },
    WithoutJacobian: {
        "arc": lambda: WithoutJacobian(ArcChart(0.25, _arc_bounds, direction=-1)),
        "arc-negative-scale": lambda: WithoutJacobian(AffineChart(Box((0.0,), (1.0,)), slots=(0,), scale=-2.0, period=TWO_PI)),
    },
}
DROPS_JACOBIAN = {WithoutJacobian}  # classes whose contract is log|J| = 0 (the error they demonstrate), not the area formula
ALL = {f"{cls.__name__}-{name}": factory for cls, factories in CASES.items() for name, factory in factories.items()}


def core_chart_classes() -> set[type]:
    """Every concrete ``Chart`` subclass defined in a module of the core (``gflownet_measure`` less the subpackages of
    :data:`conftest.APPLICATIONS`, whose optional dependencies may be missing; all the core's modules imported first)."""
    def core(module: str) -> bool:
        return module.split(".")[0] == "gflownet_measure" and not module.startswith(APPLICATIONS)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # the deprecated aliases (transforms, policies) warn on import
        for info in pkgutil.walk_packages(gflownet_measure.__path__, "gflownet_measure.", onerror=lambda name: None):
            if core(info.name):
                importlib.import_module(info.name)
    found, todo = set(), [Chart]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if core(sub.__module__) and not inspect.isabstract(sub):
                found.add(sub)
    return found


def test_every_core_chart_has_contract_cases():
    missing = sorted(f"{c.__module__}.{c.__name__}" for c in core_chart_classes() - set(CASES))
    assert not missing, f"Chart subclasses of the core without contract cases: {', '.join(missing)}; add factories to CASES in {__file__}"


@pytest.mark.parametrize("cls", CASES, ids=lambda c: c.__name__)
def test_cases_build_their_class(cls):
    assert CASES[cls] and all(type(factory()) is cls for factory in CASES[cls].values())


def _inputs(chart, n=16, seed=0):
    """Anchors ``s [n, D]`` in ``[0, 1)`` (``fixed`` coordinates set) and coordinates ``u [n, k]`` in the middle 90% of a bounded box."""
    g = torch.Generator().manual_seed(seed)
    s = torch.rand(n, D, generator=g, dtype=torch.float64)
    for i, v in chart.fixed.items():
        s[:, i] = v
    u, _ = chart.domain.weighted_points(n, "mc", generator=g)
    if chart.domain.bounded:
        lo, hi = torch.tensor(chart.domain.low, dtype=torch.float64), torch.tensor(chart.domain.high, dtype=torch.float64)
        u = lo + (hi - lo) * (0.05 + 0.9 * (u - lo) / (hi - lo))
    return s, u


@pytest.mark.parametrize("name", ALL)
def test_round_trip_and_contains(name):
    chart = ALL[name]()
    s, u = _inputs(chart)
    x = chart.forward(s, u)
    assert torch.allclose(chart.inverse(s, x), u, atol=1e-10, rtol=0)
    assert chart.contains(s, x).all()
    inside, coords = chart.coordinates_of(s, x)
    assert inside.all() and torch.equal(coords, chart.inverse(s, x))
    moved = x.clone()
    other = [i for i in range(D) if i not in chart.slots][0]
    moved[:, other] += 1.0  # a coordinate the chart never moves
    assert not chart.contains(s, moved).any()


@pytest.mark.parametrize("name", ALL)
def test_log_abs_det_jacobian_matches_autograd(name):
    """Area formula: :math:`\\log|J| = \\tfrac12 \\log\\det(D\\varphi^\\top D\\varphi)` over the moved coordinates (float64, 1e-9);
    0 for the charts that drop it on purpose. Finite at every point."""
    chart = ALL[name]()
    s, u = _inputs(chart, n=6)
    log_j = chart.log_abs_det_jacobian(s, u)
    assert log_j.shape == (len(s),) and torch.isfinite(log_j).all()
    for b in range(len(s)):
        jac = torch.autograd.functional.jacobian(lambda v: chart.forward(s[b : b + 1], v[None])[0, list(chart.slots)], u[b])
        expected = 0.0 if type(chart) in DROPS_JACOBIAN else 0.5 * torch.logdet(jac.T @ jac)
        assert torch.allclose(log_j[b], torch.as_tensor(expected, dtype=log_j.dtype), atol=1e-9, rtol=0)


def test_slot_columns_are_a_view_only_when_contiguous_and_increasing():
    """``Chart.columns`` slices contiguous increasing slots (a view) and gathers any others, in the slots' order."""
    scattered = CASES[AffineChart]["scattered-slots"]()
    assert CASES[AffineChart]["lebesgue-box"]().columns == slice(1, 3)
    assert scattered.columns == [3, 0]
    s = torch.arange(8.0).reshape(2, D)
    assert torch.equal(s[:, scattered.columns], s[:, [3, 0]])


def test_chart_outside_domain_is_not_contained():
    chart = CASES[AffineChart]["lebesgue-box"]()
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
