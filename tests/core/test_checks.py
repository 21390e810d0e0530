"""``checks.check_graph`` passes on valid pointed graphs and fails, on the right row, on broken ones.

All graphs here are discrete, so every check is exact (enumeration, float64 round-off tolerance):
the outcomes are deterministic and no statistical failure rate applies, except that eq. 4 uses
random test functions from a seeded generator (``check_graph(seed=0)``). Continuous and hybrid spaces, and the
checks of supports, charts and encodings, are tested in ``test_check_spaces.py``.
"""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import HYPOTHESIS, build_graph, dag_specs, random_dag_spec, row
from gflownet_measure.checks import check_graph
from gflownet_measure.densities import KernelDensity, UniformPolicy, uniform_density
from gflownet_measure.environments import hypergrid
from gflownet_measure.kernels import FiniteKernel, Kernel
from gflownet_measure.measures import Atoms, Measure

ALL_ROWS = {"shapes", 1, 2, 3, 4, 5, 6, 7, "support", "charts", "encode"}
SHIFT = 0.1  # log-density offset of the broken policies below: they integrate to e^0.1


def hypergrid_cfg(**kw) -> hypergrid.HypergridConfig:
    return hypergrid.HypergridConfig(**kw)


def key(condition: str) -> int | str:
    """``4`` for ``"eq. 4  ..."``, the first word (``"support"``, ``"charts"``, ``"encode"``) for the other rows."""
    words = condition.split()
    return int(words[1]) if words[0] == "eq." else words[0]


def failing(report) -> set[int | str]:
    return {key(r.condition) for r in report.results if not r.passed}


class Reweighted(Kernel):
    """``base`` with every child atom given mass ``e^child`` and every sink atom mass ``e^sink``."""

    def __init__(self, base: Kernel, child: float = 0.0, sink: float = 0.0):
        self.base, self.child, self.sink = base, child, sink

    def __call__(self, s):
        m = self.base(s)
        a = m.atoms
        log_mass = torch.where(a.sink, torch.full_like(a.log_mass, self.sink), torch.full_like(a.log_mass, self.child))
        return Measure(Atoms(a.x, log_mass, a.mask, a.sink), m.pieces)


class _ShiftedDensity(KernelDensity):
    def log_prob(self, x, sink):
        return super().log_prob(x, sink) + SHIFT


class ShiftedUniform(UniformPolicy):
    """The uniform policy with its log-density shifted by ``SHIFT``: it integrates to ``e^SHIFT``, not 1."""

    def forward(self, s):
        d = uniform_density(self.kernel(s))
        return _ShiftedDensity(d.measure, d.logits, d.coords)


# --- valid graphs pass -------------------------------------------------------------------------------------


@pytest.mark.parametrize("height, ndim", [(8, 2), (4, 3), (2, 1), (3, 4)])
@pytest.mark.parametrize("backward", ["uniform", "learned"])
def test_hypergrid_passes(height, ndim, backward):
    cfg = hypergrid_cfg(height=height, ndim=ndim)
    graph = hypergrid.make_graph(cfg)
    torch.manual_seed(0)  # the MLP's initial weights; any initialisation gives a normalised density
    pf, pb = hypergrid.make_policies(graph, dataclasses.replace(cfg, backward=backward, hidden=16, n_layers=1))
    report = check_graph(graph, pf, pb)
    assert report.passed, str(report)
    assert {key(r.condition) for r in report.results} == ALL_ROWS | {15, 16}
    assert row(report, 1).estimate == 0 and row(report, 7).estimate == 0
    assert "all conditions hold" in str(report)


@settings(HYPOTHESIS, max_examples=20)
@given(dag_specs(max_nodes=8), st.sampled_from([torch.float32, torch.float64]))
def test_random_dag_passes(spec, dtype):
    graph = build_graph(spec, dtype=dtype)
    report = check_graph(graph, UniformPolicy(graph.kappa), UniformPolicy(graph.kappa_b))
    assert report.passed, str(report)
    assert {key(r.condition) for r in report.results} == ALL_ROWS | {15, 16}


# --- broken graphs fail on the right row -------------------------------------------------------------------


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs(min_nodes=3), st.data())
def test_backward_kernel_missing_a_parent_breaks_eq4(spec, data):
    i, j = data.draw(st.sampled_from(spec.edges))
    parents = [list(p) for p in spec.parents]
    parents[j].remove(i)
    broken = build_graph(spec.with_edges(spec.children, parents))
    report = check_graph(broken)
    assert not report.passed
    assert failing(report) == {4, "support"}, str(report)  # reachability and absorption only read kappa
    detail = next(r.detail for r in report.results if key(r.condition) == "support")
    assert "forward move not reversible: kappa(s, .) atom" in detail and f"to s'=[{float(j)}]" in detail, detail
    assert "pairs inner" in row(report, 4).detail or "pairs from s0" in row(report, 4).detail, row(report, 4).detail


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs())
def test_policy_that_does_not_integrate_to_one_breaks_eq15_and_eq16(spec):
    graph = build_graph(spec)
    report = check_graph(graph, ShiftedUniform(graph.kappa), UniformPolicy(graph.kappa_b))
    assert failing(report) == {15}, str(report)
    # integrals are exact sums over atoms: the worst state's integral is e^SHIFT
    assert row(report, 15).estimate == pytest.approx(math.expm1(SHIFT), rel=1e-6)
    report = check_graph(graph, UniformPolicy(graph.kappa), ShiftedUniform(graph.kappa_b))
    assert failing(report) == {16}, str(report)


def reweighted_graph(spec):
    """A valid graph whose child atoms (forward and backward) have mass 2: nu(x)kappa = swap(nu(x)kappa_b) still holds."""
    g = build_graph(spec)
    return dataclasses.replace(g, kappa=Reweighted(g.kappa, child=math.log(2.0)), kappa_b=Reweighted(g.kappa_b, child=math.log(2.0)))


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs())
def test_policy_normalised_against_kappa_with_masses_passes(spec):
    graph = reweighted_graph(spec)
    # uniform_density divides by the atom masses, so it is a density w.r.t. kappa with masses 2
    report = check_graph(graph, UniformPolicy(graph.kappa), UniformPolicy(graph.kappa_b))
    assert report.passed, str(report)


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs())
def test_policy_on_a_different_kernel_breaks_eq15_and_eq16(spec):
    """A density w.r.t. the wrong reference kernel must fail: eq. 15-16 integrate against graph.kappa / kappa_b."""
    graph = reweighted_graph(spec)
    assert check_graph(graph).passed  # the graph itself is valid
    # densities w.r.t. unit-mass counting measure: against kappa (child masses 2) they integrate to
    # (2 |children| + 1[terminable]) / (|children| + 1[terminable]) > 1 at s0, which has two children
    pf = UniformPolicy(FiniteKernel([list(c) for c in spec.children], list(spec.terminable)))
    pb = UniformPolicy(FiniteKernel([list(p) for p in spec.parents]))
    report = check_graph(graph, pf, pb)
    assert failing(report) == {15, 16}, str(report)


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs(min_nodes=4), st.data())
def test_cycle_breaks_eq7(spec, data):
    inner = [(i, j) for i, j in spec.edges if i >= 1]
    assume(inner)
    i, j = data.draw(st.sampled_from(inner))
    children = [list(c) for c in spec.children]
    children[j].append(i)  # i -> j -> i, kappa_b mirrored
    report = check_graph(build_graph(spec.with_edges(children)))
    assert failing(report) == {7}, str(report)
    assert row(report, 7).estimate > 0  # states still reachable after N steps


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs(), st.data())
def test_unreachable_state_breaks_eq1(spec, data):
    k = data.draw(st.integers(1, spec.n - 1))
    children = [list(c) for c in spec.children] + [[k]]  # a new node n -> k that no edge enters
    broken = spec.with_edges(children, terminable=spec.terminable + (False,), log_R=spec.log_R + (0.0,), max_length=spec.n + 1)
    report = check_graph(build_graph(broken))
    assert failing(report) == {1}, str(report)
    assert row(report, 1).estimate == 1  # exactly one state is missing
    assert row(report, 1).detail.endswith(f"unreachable from s0 (exact search): [{float(spec.n)}]"), row(report, 1).detail


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs(), st.data())
def test_source_with_a_parent_breaks_eq5(spec, data):
    j = data.draw(st.integers(1, spec.n - 1))
    children = [list(c) for c in spec.children]
    children[j].append(0)  # j -> s0, mirrored: kappa_b(s0, .) = delta_j
    report = check_graph(build_graph(spec.with_edges(children)))
    assert not row(report, 5).passed
    assert row(report, 4).passed  # the kernels still mirror each other
    assert 5 in failing(report) and failing(report) <= {5, 7}, str(report)  # the edge into s0 also closes a cycle


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs(), st.data())
def test_dead_end_breaks_eq7(spec, data):
    leaves = [i for i, c in enumerate(spec.children) if not c]
    i = data.draw(st.sampled_from(leaves))
    terminable = tuple(t and v != i for v, t in enumerate(spec.terminable))  # a leaf without the sink atom
    assume(any(terminable))  # no terminable state at all: see test_graph_without_terminal_states_is_reported
    report = check_graph(build_graph(dataclasses.replace(spec, terminable=terminable)))
    assert failing(report) == {7}, str(report)
    assert f"1 dead ends ([{float(i)}])" in row(report, 7).detail, row(report, 7).detail


def test_graph_without_terminal_states_is_reported():
    children = ((1,), ())  # s0 -> 1, and no state has the sink atom: every trajectory dies at node 1
    spec = dataclasses.replace(random_dag_spec(0), children=children, parents=((), (0,)), terminable=(False, False), log_R=(0.0, 0.0), max_length=2)
    report = check_graph(build_graph(spec))
    assert failing(report) == {7}, str(report)


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs(), st.data())
def test_sink_among_parents_breaks_eq2(spec, data):
    i = data.draw(st.integers(1, spec.n - 1))
    back_to_sink = tuple(v == i for v in range(spec.n))
    report = check_graph(build_graph(dataclasses.replace(spec, back_to_sink=back_to_sink)))
    assert not row(report, 2).passed
    assert row(report, 2).estimate == 1


@settings(HYPOTHESIS, max_examples=10)
@given(dag_specs())
def test_sink_atom_of_mass_two_breaks_eq6(spec):
    g = build_graph(spec)
    report = check_graph(dataclasses.replace(g, kappa=Reweighted(g.kappa, sink=math.log(2.0))))
    assert not row(report, 6).passed
    # mass 2 is at distance 1 from {0, 1}; log 2 is stored in the float32 atoms of the graph's kernel (error ~1e-7 * 2)
    assert row(report, 6).estimate == pytest.approx(1.0, abs=1e-6)


def test_pair_integrals_keep_to_the_budget_and_do_not_depend_on_it(monkeypatch):
    """DAG x Theta space, d = 3 (quadrature: deterministic nodes): with a budget of a few states' worth, no kernel
    batch that is integrated exceeds it (states differ in their number of pieces), every state is integrated once, and
    the integrals equal those of one chunk, to float64 round-off."""
    from gflownet_measure.checks import integration, reversibility
    from gflownet_measure.environments import dag_params

    graph = dag_params.make_graph(dag_params.DagParamsConfig(d=3))
    rule = integration.Rule("quadrature", 4)
    nu = integration.nodes(graph.nu, rule)
    fs = reversibility.test_functions(graph, 3, torch.Generator().manual_seed(0))
    whole = reversibility.pair_integrals(graph, nu, graph.kappa, fs, False, rule)
    states = nu.x[0][nu.mask[0] & ~nu.sink[0]]  # the outer states, as pair_integrals takes them
    sizes = [integration.nodes(graph.kappa(states[k : k + 1]), rule).x.numel() for k in range(len(states))]
    assert max(sizes) > min(sizes)  # states differ in their number of pieces
    budget = 4 * max(sizes)  # room for at least 4 of the largest states
    batches = []  # (states, inner values) of every kernel batch integrated

    def recording(s):
        m = graph.kappa(s)
        batches.append((len(s), integration.nodes(m, rule).x.numel()))
        return m

    monkeypatch.setattr(reversibility, "PAIR_BUDGET", budget)
    chunked = reversibility.pair_integrals(graph, nu, recording, fs, False, rule)
    kept = [(k, n) for k, n in batches[3:] if n <= budget]  # after sorting the states (a one-state probe of the kernel's size, one chunk) and the one-state sizing probe; larger batches are halved and redone
    assert len(kept) > 3 and sum(k for k, _ in kept) == len(states)  # every state, once
    for a, b in zip(whole[:4], chunked[:4]):
        if a is whole.var:  # a quadrature rule's sample variance means nothing (the coarse rule makes the tolerance) and counts
            continue  # the padding of a piece of varying dimension, which depends on the batch: estimates, masses and groups do not
        assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)

