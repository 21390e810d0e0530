"""The checks of issue 23 on small spaces, valid and broken: supports, charts, encodings, located eq. 4, power, errors.

The spaces are circles (Lahlou et al. 2023, Definition 1 with Haar measure): states ``[stage, theta]``,

    s0 = [0, 0]  --(arclength on the circle)-->  [1, theta]  --(rotation by u in [0, 2 pi))-->  [2, theta']  --> sink

with kappa_b([1, theta], .) = delta_s0, kappa_b([2, theta'], .) the backward rotation, nu = delta_s0 + Haar on
stage 1 + Haar on stage 2 and the terminal measure Haar on stage 2. Every piece is a one-dimensional bounded box, so
``method="auto"`` integrates eq. 4 by quadrature (deterministic nodes); the other checks draw random states and
coordinates from ``check_graph``'s seed (0), so every outcome here is reproducible. A broken space's failure is
exact (a move whose reverse does not exist, a chart that does not invert) or far outside the tolerance (factors of
2 pi); the tolerances are the checks' own (module docstrings of ``gflownet_measure.checks``). The new checks are also
run on every registered environment, at small settings.
"""
from __future__ import annotations

import dataclasses
import math
import re

import pytest
import torch
from broken_spaces import environment

from conftest import build_graph, random_dag_spec
from gflownet_measure.charts import AffineChart, Chart, WithoutJacobian
from gflownet_measure.checks import POWER, check_graph
from gflownet_measure.checks.results import verdict
from gflownet_measure.densities import Policy, UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.kernels import Kernel
from gflownet_measure.measures import Atoms, Box, Measure, Piece, charted, dirac, sum_measures

TWO_PI = 2 * math.pi
D = 2
# Nodes and random states per piece on the circles. Every piece has one coordinate, so under method="auto" eq. 4 runs by
# quadrature, whose 64 Gauss nodes are exact for these smooth integrands far below the errors planted (factors of 2 pi or
# pi / 2 on a component, pairs that no backward move reverses; tests/core/test_broken_spaces.py runs its circles at n = 64 for the same reason); the
# support, chart, encoding and walk failures planted here cover a large part of a piece, which 64 seeded states meet.
# The default 256 is kept where Monte Carlo's power is the subject.
N = 64


def circle_chart(stage: float) -> AffineChart:
    """Haar measure (arclength) on the circle of states ``[stage, theta]``."""
    return AffineChart(Box((0.0,), (TWO_PI,)), slots=(1,), period=TWO_PI, fixed={0: stage})


FIRST = AffineChart(Box((0.0,), (1.0,)), slots=(1,), scale=TWO_PI, period=TWO_PI, fixed={0: 1.0})  # theta = 2 pi u, log|J| = log 2 pi
ROTATE = AffineChart(Box((0.0,), (TWO_PI,)), slots=(1,), relative=True, period=TWO_PI, fixed={0: 2.0})  # theta' = theta + u
UNROTATE = AffineChart(Box((-TWO_PI,), (0.0,)), slots=(1,), relative=True, period=TWO_PI, fixed={0: 1.0})  # theta = theta' + u


class CircleForward(Kernel):
    """kappa: the first chart at s0, the rotation at stage 1, the sink at stage 2."""

    def __init__(self, first: Chart = FIRST, rotate: Chart = ROTATE):
        self.first, self.rotate = first, rotate

    def __call__(self, s):
        stage = s[:, 0].round()
        done = (stage == 2)[:, None]
        atoms = Atoms(s[:, None], torch.zeros(len(s), 1, dtype=s.dtype), done, torch.ones_like(done))
        return Measure(atoms, (Piece(self.first, s, stage == 0), Piece(self.rotate, s, stage == 1)))


class CircleBackward(Kernel):
    """kappa_b: the atom s0 (shifted by ``shift`` in theta) under stage 1, the backward rotation under stage 2, zero at s0."""

    def __init__(self, unrotate: Chart = UNROTATE, shift: float = 0.0):
        self.unrotate, self.shift = unrotate, shift

    def __call__(self, s):
        stage = s[:, 0].round()
        parent = torch.zeros_like(s)
        parent[:, 1] = self.shift
        atoms = Atoms(parent[:, None], torch.zeros(len(s), 1, dtype=s.dtype), (stage == 1)[:, None], torch.zeros(len(s), 1, dtype=torch.bool))
        return Measure(atoms, (Piece(self.unrotate, s, stage == 2),))


def periodic_encode(s):
    """One-hot stage, cos and sin of the angle: separates the states of the circle, not an unwrapped angle from its representative."""
    return torch.cat([torch.nn.functional.one_hot(s[:, 0].round().long(), 3).to(s.dtype), torch.cos(s[:, 1:]), torch.sin(s[:, 1:])], 1)


def circle(**changes) -> PointedGraph:
    """The circle space (module docstring), float64, with ``changes`` to its fields."""
    source = torch.zeros(D, dtype=torch.float64)
    stage2 = charted(circle_chart(2.0), D, torch.float64)
    graph = PointedGraph(
        name="circle", source=source, kappa=CircleForward(), kappa_b=CircleBackward(),
        nu=sum_measures(dirac(source), charted(circle_chart(1.0), D, torch.float64), stage2), terminal=stage2,
        log_reward=lambda x: torch.cos(x[:, 1]), max_length=3, encode=periodic_encode,
    )
    return dataclasses.replace(graph, **changes)


def result(report, start: str):
    """The row of ``report`` whose condition starts with ``start``."""
    (hit,) = [r for r in report.results if r.condition.startswith(start)]
    return hit


def failing(report) -> set[str]:
    return {r.condition.split("  ")[0] for r in report.results if not r.passed}


SUPPORT, CHARTS, ENCODE, EQ4 = "support", "charts", "encode", "eq. 4"


# --- the valid circle passes every check, eq. 4 with power -------------------------------------------------------


def test_the_circle_passes_every_check_by_quadrature():
    report = check_graph(circle(), UniformPolicy(CircleForward()), UniformPolicy(CircleBackward()), n=N)
    assert report.passed, str(report)
    eq4 = result(report, EQ4)
    assert "quadrature" in eq4.detail and eq4.tolerance < 1e-6, eq4  # smooth periodic integrands: Gauss-Legendre is near exact


SHIPPED = [("hypergrid", {"height": 4, "ndim": 2}), ("quarter-disc", {"rho": 0.25}), ("sde", {"target": "gmm9", "n_steps": 4}),
           ("sde", {"target": "funnel", "n_steps": 2}), ("dag-params", {"d": 3, "hidden": 8}),
           ("torus", {"n_steps": 2, "harmonics": 1, "hidden": 8, "n_layers": 1}), ("hybrid-torus", {"n_steps": 2, "harmonics": 1, "hidden": 8, "n_layers": 1})]


@pytest.mark.parametrize("name, settings", SHIPPED)
def test_the_new_checks_pass_on_the_shipped_environments(name, settings, one_thread):
    """Supports, charts and encodings on every registered environment (64 states per piece, seeded); eq. 4 decides by
    quadrature wherever every piece has at most three coordinates, and is undecided on the 10-dimensional funnel."""
    from gflownet_measure.environments import ENVIRONMENTS
    from gflownet_measure.experiments.settings import build, resolve

    spec = ENVIRONMENTS[name]
    graph = spec.make_graph(build(spec.config, resolve(spec.settings, settings)))
    report = check_graph(graph, n=64)
    for start in (SUPPORT, CHARTS, ENCODE):
        assert result(report, start).passed, str(report)
    eq4 = result(report, EQ4)
    if settings.get("target") == "funnel":
        assert eq4.undecided and "Monte Carlo" in eq4.detail, eq4  # 10 coordinates per piece: Monte Carlo, no power at n = 64
    else:
        assert eq4.passed, str(report)


# --- supports: a move whose reverse is missing -------------------------------------------------------------------


def test_a_parent_atom_shifted_by_1e_3_in_a_hybrid_space_fails_support():
    report = check_graph(circle(kappa_b=CircleBackward(shift=1e-3)), n=N)
    row = result(report, SUPPORT)
    assert not row.passed and row.estimate > 0
    assert row.detail.startswith("forward move not reversible: kappa(s, .) piece 0 (AffineChart) moves s=[0.0, 0.0]"), row.detail
    assert "not in the support of kappa_b(s', .)" in row.detail and "shifted atom" in row.detail


def test_a_parent_atom_shifted_by_1e_3_in_a_discrete_space_fails_support():
    """A random DAG whose backward atoms sit 1e-3 off their nodes: every forward move fails, exactly."""
    good = build_graph(random_dag_spec(3))

    class Shifted(Kernel):
        def __call__(self, s):
            m = good.kappa_b(s)
            a = m.atoms
            return Measure(Atoms(a.x + 1e-3, a.log_mass, a.mask, a.sink), m.pieces)

    report = check_graph(dataclasses.replace(good, kappa_b=Shifted()))
    row = result(report, SUPPORT)
    assert not row.passed
    assert row.detail.startswith("forward move not reversible: kappa(s, .) atom 0 moves s=[0.0]"), row.detail
    assert "a shifted, rounded or missing atom" in row.detail


def test_a_backward_rotation_without_period_fails_support():
    no_period = AffineChart(Box((-TWO_PI,), (0.0,)), slots=(1,), relative=True, fixed={0: 1.0})
    row = result(check_graph(circle(kappa_b=CircleBackward(no_period)), n=N), SUPPORT)
    assert not row.passed
    assert row.detail.startswith("forward move not reversible: kappa(s, .) piece 1 (AffineChart) moves s=[1.0,"), row.detail
    assert "a missing `period` on a circle" in row.detail


@pytest.mark.parametrize("low", [-math.pi, -1.5 * math.pi])
def test_a_backward_arc_of_the_wrong_length_fails_support(low):
    short = AffineChart(Box((low,), (0.0,)), slots=(1,), relative=True, period=TWO_PI, fixed={0: 1.0})
    row = result(check_graph(circle(kappa_b=CircleBackward(short)), n=N), SUPPORT)
    assert not row.passed and "forward move not reversible: kappa(s, .) piece 1" in row.detail, row.detail


def test_a_forward_rotation_of_the_wrong_scale_fails_support():
    """scale 1/2 on [0, 2 pi): the forward rotation covers half the circle, so half of the backward moves have no forward one."""
    half = AffineChart(Box((0.0,), (TWO_PI,)), slots=(1,), scale=0.5, relative=True, period=TWO_PI, fixed={0: 2.0})
    row = result(check_graph(circle(kappa=CircleForward(rotate=half)), n=N), SUPPORT)
    assert not row.passed
    assert row.detail.startswith("backward move not reversible: kappa_b(s', .) piece 0 (AffineChart) moves s'=[2.0,"), row.detail
    assert "not in the support of kappa(s, .)" in row.detail


def test_a_terminal_measure_off_the_stopping_states_fails_support():
    row = result(check_graph(circle(terminal=charted(circle_chart(1.0), D, torch.float64)), n=N), SUPPORT)
    assert not row.passed
    assert row.detail.startswith("kappa(s, .) has the sink atom at s=[2.0,") and "graph.terminal = kappa_b(sink, .)" in row.detail, row.detail


def test_an_unwrapped_rotation_hidden_by_a_periodic_encoding_fails_support_not_eq4():
    """The forward rotation without ``period`` writes theta + u up to 4 pi: the same points of the circle for ``contains``
    and for cos/sin (eq. 4 cannot see it, issue 23), other numbers for the reward and the policies."""
    unwrapped = AffineChart(Box((0.0,), (TWO_PI,)), slots=(1,), relative=True, fixed={0: 2.0})
    report = check_graph(circle(kappa=CircleForward(rotate=unwrapped)), n=N)
    row = result(report, SUPPORT)
    assert not row.passed
    assert row.detail.startswith("forward move leaves nu's coordinates: kappa(s, .) piece 1 (AffineChart)"), row.detail
    assert "a chart without `period`" in row.detail
    assert result(report, EQ4).passed  # the periodic encoding hides it from the test functions


# --- charts ------------------------------------------------------------------------------------------------------


class OffInverse(AffineChart):
    """The rotation with an inverse off by 0.01 in ``u``."""

    def _coords(self, s, y):
        return super()._coords(s, y) + 0.01


def test_a_chart_whose_inverse_is_wrong_fails_charts():
    off = OffInverse(Box((0.0,), (TWO_PI,)), slots=(1,), relative=True, period=TWO_PI, fixed={0: 2.0})
    report = check_graph(circle(kappa=CircleForward(rotate=off)), n=N)
    row = result(report, CHARTS)
    assert not row.passed
    assert row.detail.startswith("kappa piece 1 (OffInverse) at s=[1.0,") and "inverse(s, forward(s, u)) = " in row.detail, row.detail
    assert "the chart's inverse does not undo its forward map" in row.detail
    assert "charts" in failing(report)


# --- encode ------------------------------------------------------------------------------------------------------


def test_an_encoding_that_drops_the_angle_fails_encode():
    report = check_graph(circle(encode=lambda s: torch.nn.functional.one_hot(s[:, 0].round().long(), 3).double()), n=N)
    row = result(report, ENCODE)
    assert not row.passed
    assert row.detail.startswith("encode maps states A=[2.0,") and "and B=[2.0," in row.detail and "the test functions of eq. 4 cannot tell them apart" in row.detail, row.detail
    assert "add the raw coordinates" in row.detail


# --- eq. 4: power and location -----------------------------------------------------------------------------------


DROPPED = WithoutJacobian(FIRST)  # kappa(s0, .) of mass 1 instead of 2 pi: the first move's log 2 pi dropped


def test_a_dropped_jacobian_on_the_first_move_is_no_longer_a_monte_carlo_pass():
    """Issue 23: with MC and 256 nodes eq. 4 read 0.668 against a tolerance of 0.918 and passed. Now a tolerance that
    large is undecided (or the difference fails); by default (quadrature) it fails, located on the pairs from s0."""
    broken = circle(kappa=CircleForward(first=DROPPED))
    mc = result(check_graph(broken, method="mc", n=256), EQ4)
    assert not mc.passed, mc
    auto = result(check_graph(broken, n=N), EQ4)
    assert not auto.passed and not auto.undecided
    assert auto.estimate > 1e3 * auto.tolerance, auto
    assert "pairs between states, diffuse: " in auto.detail and "most of the difference on pairs from s0" in auto.detail, auto.detail
    assert "made by kappa piece 0 (WithoutJacobian) and reversed by kappa_b atom 0" in auto.detail


def test_a_terminal_measure_of_the_wrong_mass_fails_eq4_on_the_sink_pairs():
    light = charted(WithoutJacobian(AffineChart(Box((0.0,), (1.0,)), slots=(1,), scale=TWO_PI, period=TWO_PI, fixed={0: 2.0})), D, torch.float64)
    report = check_graph(circle(terminal=light), n=N)
    assert result(report, SUPPORT).passed  # the same support, another mass
    row = result(report, EQ4)
    assert not row.passed and "pairs into the sink, diffuse: " in row.detail and "mostly kappa atom 0" in row.detail, row.detail
    assert "the terminal measure kappa_b(sink, .)" in row.detail


NUMBER = r"(-?[0-9.]+(?:e[-+]?[0-9]+)?)"


def test_an_eq4_failure_prints_its_class_totals_under_the_class_and_the_pair_type_apart():
    """Issue 64 (new user, 3): pairs from s0 and inner pairs share one class, and the row printed the class's totals
    as those of "pairs from s0". Now the totals are labelled by their class, and the pair type's own come apart: here
    the inner pairs agree, so the class's difference is that of the pairs from s0, whose totals are smaller."""
    detail = result(check_graph(circle(kappa=CircleForward(first=DROPPED)), n=N), EQ4).detail
    match = re.search(
        rf"pairs between states, diffuse: nu\(x\)kappa {NUMBER} vs swap\(nu\(x\)kappa_b\) {NUMBER}; most of the difference on pairs from s0 \({NUMBER} vs {NUMBER}\), "
        rf"mostly on those made by kappa piece 0 \(WithoutJacobian\) and reversed by kappa_b atom 0: {NUMBER} vs {NUMBER}$",
        detail,
    )
    assert match, detail
    lhs, rhs, lhs_s0, rhs_s0, lhs_moves, rhs_moves = map(float, match.groups())
    assert abs(lhs - lhs_s0) > 1 and abs(rhs - rhs_s0) > 1  # the class holds the inner pairs too
    assert lhs - rhs == pytest.approx(lhs_s0 - rhs_s0, rel=1e-3)  # and they agree: the difference is the pairs from s0's
    assert (lhs_moves, rhs_moves) == (lhs_s0, rhs_s0)  # one move from s0 on either side


PI = math.pi
HALF = AffineChart(Box((0.0,), (PI,)), slots=(1,), relative=True, period=TWO_PI, fixed={0: 2.0})  # theta' - theta in [0, pi)
UNHALF = AffineChart(Box((-PI,), (0.0,)), slots=(1,), relative=True, period=TWO_PI, fixed={0: 1.0})
SHORT = AffineChart(Box((2.0,), (3.0,)), slots=(1,), scale=PI / 2, relative=True, period=TWO_PI, fixed={0: 2.0})  # in [pi, 3 pi / 2)
UNSHORT = AffineChart(Box((-3.0,), (-2.0,)), slots=(1,), scale=PI / 2, relative=True, period=TWO_PI, fixed={0: 1.0})


class TwoMoves(Kernel):
    """kappa of the circle with two rotations at stage 1 onto disjoint arcs: by up to pi (piece 1), by pi to 3 pi / 2 (piece 2, ``short``)."""

    def __init__(self, short: Chart = SHORT):
        self.short = short

    def __call__(self, s):
        stage = s[:, 0].round()
        done = (stage == 2)[:, None]
        atoms = Atoms(s[:, None], torch.zeros(len(s), 1, dtype=s.dtype), done, torch.ones_like(done))
        return Measure(atoms, (Piece(FIRST, s, stage == 0), Piece(HALF, s, stage == 1), Piece(self.short, s, stage == 1)))


class TwoMovesBack(Kernel):
    """kappa_b of :class:`TwoMoves`: the atom s0 under stage 1; the two backward rotations under stage 2 (pieces 0 and 1)."""

    def __call__(self, s):
        stage = s[:, 0].round()
        atoms = Atoms(torch.zeros_like(s)[:, None], torch.zeros(len(s), 1, dtype=s.dtype), (stage == 1)[:, None], torch.zeros(len(s), 1, dtype=torch.bool))
        return Measure(atoms, (Piece(UNHALF, s, stage == 2), Piece(UNSHORT, s, stage == 2)))


def test_two_moves_pass_eq4():
    assert result(check_graph(circle(kappa=TwoMoves(), kappa_b=TwoMovesBack()), n=N), EQ4).passed


@pytest.mark.parametrize("method", ["auto", pytest.param("mc", marks=pytest.mark.slow)])  # mc: 256 nodes for its power, about 2 s
def test_an_eq4_failure_names_the_move_at_fault_not_the_largest_one(method):
    """Issue 64 (new user, 3): "mostly" named each side's largest term, here the half turn that both sides agree on.
    Now it names the pairs where the two sides differ: those of the short move whose Jacobian was dropped."""
    row = result(check_graph(circle(kappa=TwoMoves(WithoutJacobian(SHORT)), kappa_b=TwoMovesBack()), method=method, n=N if method == "auto" else 256), EQ4)
    assert not row.passed and not row.undecided, row
    assert "most of the difference on pairs inner" in row.detail, row.detail
    assert "mostly on those made by kappa piece 2 (WithoutJacobian) and reversed by kappa_b piece 1 (AffineChart): " in row.detail, row.detail
    assert "piece 1 (AffineChart) and" not in row.detail and "kappa_b piece 0" not in row.detail  # the half turn, not at fault


def test_an_eq4_failure_names_the_pairs_that_no_backward_move_reverses():
    """The short move overshoots by 1/3 (to 5 pi / 3, where kappa_b reverses up to 3 pi / 2): the pairs beyond are named."""
    long = AffineChart(Box((2.0,), (3.0 + 1 / 3,)), slots=(1,), scale=PI / 2, relative=True, period=TWO_PI, fixed={0: 2.0})
    row = result(check_graph(circle(kappa=TwoMoves(long), kappa_b=TwoMovesBack()), n=N), EQ4)
    assert not row.passed, row
    assert "mostly on those made by kappa piece 2 (AffineChart) and reversed by no component of kappa_b: " in row.detail, row.detail
    assert row.detail.endswith(" vs 0"), row.detail  # the right side has no such pair


def test_the_split_by_moves_repeats_the_monte_carlo_nodes_and_adds_up():
    """The split that locates a failure is a second pass: from the same random state it draws the same nodes, so its
    sets add up to the pair type's totals, on either side."""
    from gflownet_measure.checks import integration, reversibility

    graph = circle(kappa=TwoMoves(WithoutJacobian(SHORT)), kappa_b=TwoMovesBack())
    rule = integration.Rule("mc", 64)
    fs = reversibility.test_functions(graph, 4, torch.Generator().manual_seed(0))
    torch.manual_seed(1)
    first = reversibility._integrals(graph, fs, rule, seed=2)
    torch.manual_seed(1)
    split = reversibility._integrals(graph, fs, rule, seed=2, split=(2, 1))  # between states, diffuse; inner pairs
    for a, b in ((first.lhs, split.lhs), (first.rhs, split.rhs)):
        assert torch.equal(a.est, b.est) and a.moves is None
        assert b.moves is not None and len(b.moves.sums) >= 2  # the half turn's pairs and the short move's
        assert torch.allclose(sum(b.moves.sums.values()), b.groups[:, 2, 1].sum(1), rtol=1e-12, atol=1e-14)
    assert split.lhs.moves.kappa[2:] == ("piece 1 (AffineChart)", "piece 2 (WithoutJacobian)")


def test_a_check_with_too_little_power_is_undecided_and_not_a_pass():
    """Monte Carlo with 4 nodes per piece: a tolerance of the size of the integrals, reported as such; the advice names
    the piece, and quadrature fits its one coordinate."""
    report = check_graph(circle(), method="mc", n=4)
    row = result(report, EQ4)
    assert row.undecided and not row.passed and row.verdict == "undecided", row
    assert row.detail.startswith("undecided: too little power; nu piece 0 (AffineChart, 1 coordinate) undecided at 4 draws: try --samples "), row.detail
    assert "or --method quadrature" in row.detail
    assert not report.passed
    assert str(report).splitlines()[-1].startswith("some conditions are undecided")


def test_an_undecided_row_on_ten_coordinates_asks_for_samples_not_quadrature():
    """The 10-D funnel's eq. 4 (Monte Carlo, 64 nodes): a tensor rule has 2 nodes per coordinate there even at n = 1024, so
    the advice is more samples only (issue 39)."""
    graph, pf, pb = environment("sde", target="funnel", n_steps=2, hidden=16)()
    row = result(check_graph(graph, pf, pb, n=64), EQ4)
    assert row.undecided, row
    assert "(AffineChart, 10 coordinates) undecided at 64 draws: try --samples " in row.detail and "quadrature" not in row.detail.split("(median")[0], row.detail


def test_verdict_fails_before_it_is_undecided_and_decides_below_the_power_fraction():
    one = torch.ones(3, dtype=torch.float64)
    assert verdict(0.1 * one, 0.2 * one, 0.2 * one, one) == (True, False, pytest.approx(0.2), 0)
    passed, undecided, power, _ = verdict(0.1 * one, 0.3 * one, 0.3 * one, one)
    assert (passed, undecided) == (False, True) and power > POWER
    passed, undecided, _, worst = verdict(torch.tensor([0.1, 2.0, 0.1]), 0.3 * one, 0.3 * one, one)
    assert (passed, undecided, worst) == (False, False, 1)  # a failure is a failure, whatever the power
    exact = torch.zeros(3, dtype=torch.float64)
    assert verdict(exact, 1e-9 * one, exact, exact)[:2] == (True, False)  # exact sums have no estimation error to judge


# --- the reward only on terminal states; errors inside a check -----------------------------------------------------


def test_a_reward_nan_off_the_terminal_states_does_not_fail():
    """log R is a density on the terminal states (stage 2) only; eq. 1 walks back from every state of nu without it."""

    def log_reward(x):
        return torch.where(x[:, 0] == 2, torch.cos(x[:, 1]), torch.full_like(x[:, 1], float("nan")))

    report = check_graph(circle(log_reward=log_reward), UniformPolicy(CircleForward()), UniformPolicy(CircleBackward()), n=N)
    assert report.passed, str(report)


class Orphaned(CircleBackward):
    """kappa_b without the backward rotation: the stage-2 circle has no parent."""

    def __call__(self, s):
        m = super().__call__(s)
        return Measure(m.atoms, (Piece(self.unrotate, s, torch.zeros(len(s), dtype=torch.bool)),))


class Stuck(CircleForward):
    """kappa without the sink atom at stage 2: a dead end on the whole circle."""

    def __call__(self, s):
        m = super().__call__(s)
        a = m.atoms
        return Measure(Atoms(a.x, a.log_mass, torch.zeros_like(a.mask), a.sink), m.pieces)


def test_walks_name_the_state_where_they_stop():
    """eq. 1 walks back from nu until s0, eq. 7 forward until the sink; a state without a parent or without a move is named."""
    row = result(check_graph(circle(kappa_b=Orphaned()), n=N), "eq. 1")
    assert not row.passed and row.detail.startswith("kappa_b(s, .) = 0 at s=[2.0, "), row.detail
    assert "which is not s0: no parent, so s is unreachable from s0" in row.detail
    row = result(check_graph(circle(kappa=Stuck()), n=N), "eq. 7")
    assert not row.passed and row.detail.startswith("kappa(s, .) = 0 at s=[2.0, "), row.detail
    assert "which is not the sink: a dead end" in row.detail


class Raising(Policy):
    """A policy that raises where a chart is broken, as a network would on states it cannot encode."""

    def forward(self, s):
        raise ValueError("policy cannot evaluate a broken chart")

    def parameters_at(self, s, measure):
        raise NotImplementedError


def test_a_policy_that_raises_is_a_failed_row_not_an_exception():
    report = check_graph(circle(), Raising(CircleForward()), UniformPolicy(CircleBackward()), n=N)
    for start in ("eq. 7", "eq. 15"):
        row = result(report, start)
        assert not row.passed and not row.undecided
        assert row.detail == "raised ValueError: policy cannot evaluate a broken chart", row.detail
    assert result(report, "eq. 16").passed and result(report, EQ4).passed


def test_every_function_the_docs_name_is_public():
    """docs/theory_to_code.md section 4 names ``gm.checks.<name>``: each is in ``gflownet_measure.checks.__all__`` (``help`` lists it)."""
    import re
    from pathlib import Path

    from gflownet_measure import checks

    doc = (Path(__file__).resolve().parents[2] / "docs" / "theory_to_code.md").read_text(encoding="utf-8")
    named = set(re.findall(r"gm\.checks\.(\w+)", doc))
    assert {"check_reachability", "check_reversibility", "check_normalised"} <= named
    assert named <= set(checks.__all__), sorted(named - set(checks.__all__))
    assert all(hasattr(checks, name) for name in checks.__all__)
