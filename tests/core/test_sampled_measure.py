"""Reference measures given by a sampling rule (:class:`~gflownet_measure.sampled.SampledMeasure`) and the theory checks on them.

Each graph here is small enough to list its nu and terminal measure; :func:`resampled` rewrites such a measure as a
sampling rule (a uniform choice of component, then a uniform atom or a Gaussian point of a piece's chart coordinates,
weighted by ``d mu / dq``), so that the checks on the sampled graph can be compared with the checks on the listed one.

Seeds: ``check_graph(seed=0)``, every draw of the tests from a ``torch.Generator`` seeded here, and the networks of the
gallery built after ``torch.manual_seed(broken_spaces.SEED)``: each outcome is deterministic. Tolerances are
:data:`~gflownet_measure.checks.Z_SCORE` standard errors of the importance-sampling estimates (a false failure rate of
about 6e-7 per comparison, normal approximation) unless a comment says otherwise.
"""
from __future__ import annotations

import dataclasses
import math

import broken_spaces as bs
import pytest
import torch
from test_checks import Reweighted

from gflownet_measure.checks import EXACT_RTOL, Z_SCORE, check_graph, integrate, reversibility
from gflownet_measure.checks.integration import Rule, broadcast, nu_states, terminal_states
from gflownet_measure.environments import hypergrid
from gflownet_measure.exact import enumerate_states
from gflownet_measure.graph import PointedGraph
from gflownet_measure.measures import Measure, Piece
from gflownet_measure.sampled import SampledMeasure

pytestmark = pytest.mark.usefixtures("one_thread")

N = 64  # nodes per piece, as in test_broken_spaces.py: enough for the pointwise checks, which need no power
SEED = 0
DRAWS = 1024
"""Draws (and inner nodes per piece) for eq. 4 over a sampled nu: its signed integrals against the test functions are
small next to their terms, so Monte Carlo needs about 1000 draws to bring the median tolerance / |integral| below
POWER = 0.25 (measured: 0.43 at 256 and 0.23 at 1024 draws on the 4 x 4 grid, 0.33 and 0.16 on the one-step segment;
the hybrid space needs 2048, 0.27 at 1024 and 0.2 at 2048; the circle about 4096, 0.52 at 1024). Since eq. 4 compares
each class of pairs apart (reversibility.PAIR_CLASSES) the hybrid space needs 3072 (0.26 at 2048, 0.2 at 3072), with
the stratified draws of :func:`resampled`."""


def resampled(measure: Measure, label: str = "resampled", spread: float = 0.5) -> SampledMeasure:
    """The batch-one ``measure`` as a sampling rule in ``ceil(n / G)`` blocks of one draw per component (stratified; the
    atoms as one, ``G`` components in all): a uniform atom or, on a piece, chart coordinates
    :math:`u \\sim \\mathcal N(\\text{mid}, (\\text{spread} \\cdot \\text{width})^2)` per coordinate; weights :math:`m_k / q` on an
    atom, :math:`|J(u)| / q(u)` inside the box, 0 (``-inf``) outside it, over the blocks. ``contains`` is the measure's own
    support test, ``atomic`` whether a state is one of its atoms."""
    a = measure.atoms
    atoms, log_mass = a.x[0][a.mask[0] & ~a.sink[0]], a.log_mass[0][a.mask[0] & ~a.sink[0]].double()
    groups: list = ([atoms] if len(atoms) else []) + list(measure.pieces)

    def draw(n: int, generator: torch.Generator | None):
        blocks = -(-n // len(groups))
        which = torch.arange(len(groups)).repeat(blocks)
        n = len(which)
        x = torch.zeros(n, a.x.shape[2], dtype=torch.float64)
        log_w = torch.full((n,), -math.log(blocks), dtype=torch.float64)
        for g, group in enumerate(groups):
            rows = (which == g).nonzero()[:, 0]
            if isinstance(group, Piece):
                box = group.chart.domain
                low, high = torch.tensor(box.low, dtype=torch.float64), torch.tensor(box.high, dtype=torch.float64)
                q = torch.distributions.Normal((low + high) / 2, spread * (high - low))
                u = q.loc + q.scale * torch.randn(len(rows), box.dim, dtype=torch.float64, generator=generator)
                ctx = group.context[:1].double().expand(len(rows), -1)
                inside = ((u >= low) & (u <= high)).all(1)
                log_d = group.chart.log_abs_det_jacobian(ctx, u).double() - q.log_prob(u).sum(1)
                x[rows] = group.chart.forward(ctx, u).double()
                log_w[rows] += torch.where(inside, log_d, torch.full_like(log_d, float("-inf")))
            else:
                k = torch.randint(len(atoms), (len(rows),), generator=generator)
                x[rows] = atoms[k].double()
                log_w[rows] += math.log(len(atoms)) + log_mass[k]
        return x.to(a.x.dtype), torch.zeros(n, dtype=torch.bool), log_w, torch.arange(n) // len(groups)

    def component(x):
        return broadcast(measure, len(x)).point_of(x.to(a.x.dtype), torch.zeros(len(x), dtype=torch.bool)).comp

    return SampledMeasure(draw, lambda x: component(x) >= 0, label, lambda x: (component(x) >= 0) & (component(x) < a.count))


def sampled_graph(graph: PointedGraph, nu: bool = True, terminal: bool = True) -> PointedGraph:
    """``graph`` with its nu and / or terminal measure given by :func:`resampled`."""
    return dataclasses.replace(
        graph,
        name=f"{graph.name}, sampled",
        nu=resampled(graph.nu, "resampled nu") if nu else graph.nu,
        terminal=resampled(graph.terminal, "resampled terminal measure") if terminal else graph.terminal,
    )


def hypergrid_graph() -> PointedGraph:
    return hypergrid.make_graph(hypergrid.HypergridConfig(height=4, ndim=2))


# --- the rule -----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["hypergrid", "hybrid", "circle"])
def test_the_rule_is_unbiased(which):
    """sum_m w_m f(x_m) estimates the integral of f over nu: f = 1 (nu's total mass: 16 atoms; 3 atoms and two unit
    segments; an atom and two circles of length 2 pi) and f = the first coordinate, within Z_SCORE standard errors of
    4096 draws; the Gaussian proposal on pieces puts draws outside the boxes (weight 0), which stay in as zero terms."""
    graph = {"hypergrid": hypergrid_graph(), "hybrid": bs.hybrid(), "circle": bs.circle()}[which]
    wp = resampled(graph.nu).weighted_points(4096, torch.Generator().manual_seed(SEED))
    exact = graph.nu.weighted_points(64, "quadrature")  # exact for f = 1 and for the (affine) first coordinate on every piece here
    if which != "hypergrid":
        assert 0 < int((~wp.mask).sum()) < wp.mask.numel()  # some draws fall outside the pieces: they must not bias the sum
    for f in (lambda x: torch.ones_like(x[..., 0]), lambda x: x[..., 0].double()):
        est, var = integrate(wp, f(wp.x))
        truth, _ = integrate(exact, f(exact.x))
        # plus float64 round-off: uniform draws over the grid's atoms give f = 1 the same term every draw (variance 0)
        assert abs(float(est - truth)) <= Z_SCORE * float(var.sqrt()) + EXACT_RTOL * abs(float(truth)), (float(est), float(truth), float(var.sqrt()))
        assert float(var.sqrt()) < 0.05 * abs(float(truth))  # and the error bar is informative (Monte Carlo, 4096 draws)


def test_draw_is_checked():
    """A draw with a NaN log-weight, or of the wrong shapes, raises a one-line ValueError naming the measure."""
    nan = SampledMeasure(lambda n, g: (torch.zeros(n, 2), torch.zeros(n, dtype=torch.bool), torch.full((n,), float("nan"))), lambda x: torch.ones(len(x), dtype=torch.bool), "nan weights")
    with pytest.raises(ValueError, match="nan weights: draw returned a log-weight that is NaN"):
        nan.weighted_points(4)
    flat = SampledMeasure(lambda n, g: (torch.zeros(n), torch.zeros(n, dtype=torch.bool), torch.zeros(n)), lambda x: torch.ones(len(x), dtype=torch.bool), "flat")
    with pytest.raises(ValueError, match=r"flat: draw must return x \[M, D\]"):
        flat.states(4)


def _normal_draws(copies: int):
    """N(0, 1) as a sampled measure of ``L = n`` i.i.d. blocks, each one draw repeated ``copies`` times at weight 1 / (L copies)."""

    def draw(n, generator):
        x = torch.randn(n, 1, generator=generator, dtype=torch.float64).repeat(copies, 1)
        return x, torch.zeros(len(x), dtype=torch.bool), torch.full((len(x),), -math.log(n * copies), dtype=torch.float64), torch.arange(n).repeat(copies)

    return SampledMeasure(draw, lambda x: torch.ones(len(x), dtype=torch.bool), f"{copies} copies per block")


def test_blocks_of_draws_give_the_variance_of_their_sums():
    """Draws made together (a block: here one draw repeated 3 times at a third of the weight) are not i.i.d.: integrate
    takes L times the sample variance of the L block sums, which is exactly the variance of the same L draws made once;
    the per-draw formula would claim three times the draws and a third of that variance. E[x^2] = 1 within Z_SCORE of it."""
    once = _normal_draws(1).weighted_points(512, torch.Generator().manual_seed(0))
    thrice = _normal_draws(3).weighted_points(512, torch.Generator().manual_seed(0))
    (e1,), (v1,) = integrate(once, once.x[..., 0] ** 2)
    (e3,), (v3,) = integrate(thrice, thrice.x[..., 0] ** 2)
    assert float(e3) == pytest.approx(float(e1), rel=1e-12) and float(v3) == pytest.approx(float(v1), rel=1e-12)
    (_,), (naive,) = integrate(dataclasses.replace(thrice, block=None), thrice.x[..., 0] ** 2)
    assert float(naive) == pytest.approx(float(v1) / 3, rel=0.01)
    assert abs(float(e1) - 1) <= Z_SCORE * float(v1) ** 0.5


# --- the checks on sampled measures ---------------------------------------------------------------------------------


def test_states_are_drawn_from_a_sampled_nu():
    """nu_states: s0 first, then distinct states drawn from the sampled nu (all 16 of the 4 x 4 grid at 256 draws: a state
    is missed with probability 16 (15/16)^256 < 1e-6); terminal_states likewise; exact enumeration refuses a sampled nu."""
    graph = sampled_graph(hypergrid_graph())
    torch.manual_seed(SEED)
    s = nu_states(graph, 256)
    assert torch.equal(s[0], graph.source) and len(s) == 16 and len(s.unique(dim=0)) == 16
    assert len(terminal_states(graph, 256).unique(dim=0)) == 16
    with pytest.raises(ValueError, match="nu is sampled"):
        enumerate_states(graph)


CONTROLS = {
    "hypergrid": lambda: (hypergrid_graph(), None, None),
    "hybrid": bs.hybrid_valid,
    "circle": bs.circle_valid,
    "readme-one-step": bs.readme_one_step,
}


@pytest.mark.parametrize("name, draws, combinations", [
    pytest.param("hypergrid", DRAWS, ((True, True), (True, False), (False, True)), id="hypergrid"),
    pytest.param("readme-one-step", DRAWS, ((True, True), (True, False), (False, True)), id="readme-one-step", marks=pytest.mark.slow),
    pytest.param("hybrid", 3 * DRAWS, ((True, True),), id="hybrid", marks=pytest.mark.slow),  # 40 s a run: both measures sampled only
])
def test_a_sampled_nu_passes_as_the_listed_one(name, draws, combinations):
    """Every row that passes on the listed graph passes on the sampled one (nu and terminal measure sampled, and each
    alone), eq. 4 by Monte Carlo over the draws with the power to decide."""
    graph, pf, pb = CONTROLS[name]()
    listed = check_graph(graph, pf, pb, n=N, seed=SEED)
    assert listed.passed, str(listed)
    for nu, terminal in combinations:
        report = check_graph(sampled_graph(graph, nu, terminal), pf, pb, n=draws, seed=SEED)
        assert report.passed, str(report)
        assert [r.condition for r in report.results] == [r.condition for r in listed.results]


def test_the_circle_fails_nothing_with_a_sampled_nu():
    """The circle with nu and the terminal measure sampled: no row FAILs at N draws; eq. 4 is undecided there (median
    tolerance / |integral| about 1.8 at 64 draws, see DRAWS), every other row passes."""
    graph, pf, pb = bs.circle_valid()
    report = check_graph(sampled_graph(graph), pf, pb, n=N, seed=SEED)
    assert [r.condition for r in report.results if not r.passed] == [r.condition for r in report.undecided]
    assert all(r.condition.startswith("eq. 4 ") for r in report.undecided), str(report)


@pytest.mark.slow
def test_quadrature_inside_a_sampled_nu():
    """method='quadrature' on a sampled nu: kernels by quadrature, the outer sums by the draws; the tolerance names both."""
    graph, pf, pb = bs.readme_one_step()
    report = check_graph(sampled_graph(graph), pf, pb, n=DRAWS, method="quadrature", seed=SEED)
    assert report.passed, str(report)
    eq4 = next(r for r in report.results if r.condition.startswith("eq. 4 "))
    assert "quadrature" in eq4.detail and "importance-sampling draws" in eq4.detail and "standard errors" in eq4.detail, eq4.detail


@pytest.mark.parametrize("name", ["hypergrid", "hybrid", "circle"])
def test_eq4_integrals_agree_with_the_listed_ones_within_their_error_bars(name):
    """The three integrals of eq. 4 (nu(x)kappa, swap(nu(x)kappa_b), the sink term) for the same test functions: the
    sampled graph's Monte Carlo estimates are within Z_SCORE of their standard errors of the listed graph's (exact sums on
    the hypergrid; on the others 64-node quadrature, exact to far below these error bars for smooth integrands on
    one-coordinate pieces, see test_broken_spaces.py); the error bars are finite and nonzero. 256 draws: agreement within
    error bars needs no power. Atomic and diffuse parts summed (reversibility.PAIR_CLASSES): a part that no draw reaches
    has no error bar."""
    graph = CONTROLS[name]()[0]
    fs = reversibility.test_functions(graph, 8, torch.Generator().manual_seed(SEED))
    torch.manual_seed(SEED)
    listed = reversibility._integrals(graph, fs, Rule("quadrature", N), SEED)
    drawn = reversibility._integrals(sampled_graph(graph), fs, Rule("mc", 256), SEED)
    pairs = (
        (listed.lhs.est, drawn.lhs.est, drawn.lhs.var, listed.lhs.mass),
        (listed.rhs.est, drawn.rhs.est, drawn.rhs.var, listed.rhs.mass),
        (listed.sink[0], drawn.sink[0], drawn.sink[1], listed.sink[2]),
    )
    for truth, est, var, mass in (tuple(t.reshape(len(t), 2, 2).sum(1) for t in p) for p in pairs):  # atomic + diffuse parts
        truth, est, var = truth[mass > 0], est[mass > 0], var[mass > 0]  # the pairs this side has
        assert bool((var > 0).all() & torch.isfinite(var).all())
        assert bool(((est - truth).abs() <= Z_SCORE * var.sqrt()).all()), ((est - truth) / var.sqrt()).tolist()


# --- broken spaces stay broken -------------------------------------------------------------------------------------------

def hypergrid_backward_mass_two():
    """kappa_b gives every parent mass 2 on the 4 x 4 grid: eq. 4 must fail on the inner pairs."""
    graph = hypergrid_graph()
    return dataclasses.replace(graph, name="hypergrid, parents of mass 2", kappa_b=Reweighted(graph.kappa_b, child=math.log(2))), None, None


BROKEN = {
    # (factory, row that must FAIL, substrings of its detail, draws): the pointwise rows at N, eq. 4 at DRAWS
    "diamond-missing-parent": (bs.diamond_missing_parent, "support kappa <-> kappa_b", ("forward move not reversible", "s=[2.0]", "s'=[3.0]"), N),
    "hybrid-terminal-missing-segment": (bs.hybrid_terminal_missing_segment, "support kappa <-> kappa_b", ("sink atom at s=[2.0, 1.0, ", "graph.terminal"), N),
    "chain-unreachable": (bs.chain_unreachable, "eq. 1 ", ("[7.0]", "no parent"), N),
    "hybrid-unreachable-segment": (bs.hybrid_unreachable_segment, "eq. 1 ", ("[2.0, 5.0, ",), N),
    "chain-sink-among-parents": (bs.chain_sink_among_parents, "eq. 2 ", ("s=[2.0]",), N),
    "hybrid-sink-mass-2": (bs.hybrid_sink_mass_two, "eq. 6 ", ("2 at s=[2.0, ",), N),
    "chain-cycle": (bs.chain_cycle, "eq. 7 ", ("have not reached the sink",), N),
    "clock-periodic-encode-merges": (bs.clock_encode_merges, "encode ", ("A=[0.0]", "B=[6.28"), N),
    "hypergrid-parents-of-mass-2": (hypergrid_backward_mass_two, "eq. 4 ", ("pairs inner", "kappa_b atom"), DRAWS),
    "segment-terminal-half-mass": (bs.segment_terminal_without_jacobian, "eq. 4 ", ("pairs into the sink", "the terminal measure"), DRAWS),
}


@pytest.mark.parametrize("name", list(BROKEN))
def test_a_broken_space_still_fails_with_a_sampled_nu(name):
    """Broken spaces (most from the gallery) with nu and the terminal measure sampled (the structure checks then walk,
    eq. 4 runs by Monte Carlo over the draws): the same row FAILs (not undecided) and says where. The terminal measure
    at half mass is resampled with its dropped Jacobian, so its draws carry half the weight."""
    factory, condition, where, draws = BROKEN[name]
    graph, pf, pb = factory()
    report = check_graph(sampled_graph(graph), pf, pb, n=draws, seed=SEED)
    row = next(r for r in report.results if r.condition.startswith(condition))
    assert row.verdict == "FAIL", str(report)
    assert all(w in row.detail for w in where), row.detail


def test_a_state_that_contains_rejects_is_reported_by_the_support_check():
    """A sampled nu whose contains rejects category 1's segment (its draws unchanged): the forward moves into it leave
    the support of nu, and the support check says so, naming nu's label; a terminal measure that rejects it too fails
    the stopping states."""
    graph = bs.hybrid()
    full = resampled(graph.nu, "nu without category 1")
    nu = dataclasses.replace(full, contains=lambda x: full.contains(x) & ~((x[:, 0] == 2) & (x[:, 1] == 1)))
    report = check_graph(dataclasses.replace(graph, nu=nu), n=N, seed=SEED)
    row = next(r for r in report.results if r.condition.startswith("support"))
    assert row.verdict == "FAIL" and "leaves the support of nu" in row.detail and "nu (nu without category 1).contains rejects" in row.detail, row.detail
    assert "s'=[2.0, 1.0, " in row.detail, row.detail
    sampled = resampled(graph.terminal, "terminal without category 1")
    terminal = dataclasses.replace(sampled, contains=lambda x: sampled.contains(x) & (x[:, 1] != 1))
    report = check_graph(dataclasses.replace(graph, terminal=terminal), n=N, seed=SEED)
    row = next(r for r in report.results if r.condition.startswith("support"))
    assert row.verdict == "FAIL" and "sink atom at s=[2.0, 1.0, " in row.detail and "graph.terminal" in row.detail, row.detail
