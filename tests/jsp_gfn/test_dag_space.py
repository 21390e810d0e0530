"""The DAG x Theta pointed graph, the JSP-GFN policy on it, the transition loss and the exact evaluation.

States are ``[adj (d*d) | theta (P) | stopped]`` with the CPD model's flat ``theta``; the continuous part of the forward
kernel is one :class:`ThetaChart` piece whose dimension varies with the graph (Lebesgue on the active coordinates).

The central check is Theorem 3.1 in practice: a policy built from the exact posterior (edge probabilities from the
exact flows under the uniform P_B, theta from the exact Gaussian posterior) has zero undirected-SubTB residual on
every transition and every theta pair, and a perturbed one does not.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from conftest import random_jsp_policies
from gflownet_measure.checks import check_graph
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.environments import dag_params as dp
from gflownet_measure.jsp_gfn.bayesnets.cpds import MLPGaussian
from gflownet_measure.jsp_gfn.bayesnets.dags import FEATURES, dag_codes, enumerate_dags, is_dag, transitive_closure, valid_edges, weighted_features
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.structure_metrics import sample_features
from gflownet_measure.jsp_gfn.dag_params import theta as theta_mod
from gflownet_measure.jsp_gfn.dag_params.evaluation import _line_fit, estimate_graph_log_marginal, model_graph_log_marginals, posterior_metrics
from gflownet_measure.jsp_gfn.dag_params.network import JSPOutputs
from gflownet_measure.jsp_gfn.dag_params.objective import transition_loss
from gflownet_measure.jsp_gfn.dag_params.policy import JSPPolicy
from gflownet_measure.jsp_gfn.dag_params.space import DagKernel, ThetaChart, enumerated_measures, make_space
from gflownet_measure.jsp_gfn.dag_params.states import join, split
from gflownet_measure.jsp_gfn.dag_params.theta import FullNormalTheta
from gflownet_measure.measures import Atoms, Measure
from gflownet_measure.rollout import sample_forward
from gflownet_measure.walkers import Walkers

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(d: int = 3, n: int = 20, seed: int = 0) -> LinearGaussian:
    """A small dataset (N = 20) so that the posterior over graphs is spread out."""
    return LinearGaussian(simulate_er(d, 1.0, n, 0, seed=seed).train)


class ExactNetwork(nn.Module):
    """Network outputs that make :class:`JSPPolicy` sample the exact posterior (a lookup table over all DAGs).

    Flows under the uniform P_B: :math:`F(G) = R(G) + \\sum_{e} F(G + e) / |E(G + e)|` with
    :math:`R(G) = \\int R(G, \\theta) d\\theta = P(G) P(D | G)`; then :math:`P_F(G + e | G) = F(G + e) / (|E(G + e)| F(G))`,
    :math:`P_F(\\text{stop} | G) = R(G) / F(G)`, and :math:`P_\\phi(\\theta | G) = P(\\theta | G, D)` (full covariance).
    ``perturb`` adds that much to every edge logit of node 0's out-edges (breaking the balance).
    """

    def __init__(self, model: LinearGaussian, perturb: float = 0.0):
        super().__init__()
        self.dummy = nn.Parameter(torch.zeros((), dtype=torch.float64))  # fixes the dtype the policy casts to
        d = model.d
        dags = ExactPosterior(model).dags
        self.codes = dag_codes(dags)
        n = len(dags)
        log_R = model.log_joint_graph(dags)
        valid = valid_edges(dags, transitive_closure(dags)).flatten(1)
        n_edges = dags.flatten(1).sum(1)
        bits = dag_codes(torch.eye(d * d, dtype=torch.bool).reshape(d * d, d, d))
        child = torch.searchsorted(self.codes, (self.codes[:, None] + bits[None]).clamp(max=int(self.codes.max()))).clamp(max=n - 1)
        log_F = torch.full((n,), float("-inf"), dtype=torch.float64)
        edge = torch.zeros(n, d * d, dtype=torch.float64)
        for level in range(int(n_edges.max()), -1, -1):
            rows = (n_edges == level).nonzero()[:, 0]
            terms = log_F[child[rows]] - math.log(level + 1)
            terms = torch.where(valid[rows], terms, torch.full_like(terms, float("-inf")))
            edge[rows] = torch.where(valid[rows], terms, torch.zeros_like(terms))
            log_F[rows] = torch.logaddexp(log_R[rows], terms.logsumexp(1))
        edge[:, :d] += perturb * valid[:, :d]
        log_p_stop = log_R - log_F
        stop = torch.where(valid.any(1), log_p_stop - torch.log(-torch.expm1(log_p_stop)), torch.zeros_like(log_p_stop))
        loc = torch.zeros(n, d, d, dtype=torch.float64)
        U = torch.eye(d, dtype=torch.float64).repeat(n, d, 1, 1)  # [n, j, d, d]
        for g in range(n):
            mean, cov = model.theta_posterior(dags[g])  # mean flat [d * d]; cov[j] the covariance of column j's block
            loc[g] = mean.reshape(d, d)
            for j in range(d):
                pa = dags[g][:, j].nonzero()[:, 0]
                if len(pa):
                    L = torch.linalg.cholesky(torch.linalg.inv(cov[j][pa][:, pa]))
                    U[g, j][pa[:, None], pa[None, :]] = L.T
        self.table = (edge.reshape(n, d, d), stop, loc, U)

    def trunk(self, adj):
        """:class:`~gflownet_measure.jsp_gfn.dag_params.network.JSPNetwork`'s split: the graphs' table rows stand in for the node and global features."""
        idx = torch.searchsorted(self.codes, dag_codes(adj > 0.5))
        edge, stop, _, _ = self.table
        return idx[:, None], idx, edge[idx], stop[idx]

    def theta_head(self, nodes, glob, adj):
        _, _, loc, U = self.table
        return FullNormalTheta(loc[glob], U[glob], adj.to(loc.dtype))

    def forward(self, adj):
        nodes, glob, edge, stop = self.trunk(adj)
        return JSPOutputs(edge, stop, self.theta_head(nodes, glob, adj))


def _exact_policy(model, perturb: float = 0.0) -> tuple[JSPPolicy, UniformPolicy]:
    graph = make_space(model)
    return JSPPolicy(graph.kappa, ExactNetwork(model, perturb)), UniformPolicy(graph.kappa_b)


def _cfg(**kw) -> dp.DagParamsConfig:
    return dp.DagParamsConfig(**kw)


def _random_policies(d: int = 3, model: str = "lingauss-diag"):
    """The graph and ``(P_F, P_B)`` with every network weight drawn N(0, 0.3^2) (the zero-initialised heads randomised)."""
    _, graph, pf, pb = random_jsp_policies(_cfg(d=d, hidden=16, model=model))
    return graph, pf, pb


# ---------------------------------------------------------------- the chart of varying dimension (was pack / unpack)


@pytest.mark.parametrize("cpd", ["lingauss", "mlp"])
def test_theta_chart_round_trips_on_the_active_coordinates(cpd):
    """``ThetaChart`` at (G, #): forward writes u's active coordinates (``model.active(G)``) into theta, 0 elsewhere, and
    sets the stop flag; inverse gives u back masked; NaN or garbage in u's inactive coordinates never reaches the state;
    ``contains`` accepts the image and rejects a non-zero inactive parameter, another graph or an unstopped state. The
    log-Jacobian is 0 (Lebesgue on the active coordinates)."""
    d = 3
    data = torch.randn(6, d, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    model = LinearGaussian(data) if cpd == "lingauss" else MLPGaussian(data, hidden=2)
    P = model.n_params
    chart = ThetaChart(d, P, model.active)
    adj = torch.zeros(3, d, d, dtype=torch.bool)
    adj[0, 0, 1] = adj[0, 1, 2] = True
    adj[1, 2, 0] = True  # adj[2]: the empty graph
    s = join(adj, P, dtype=torch.float64)
    on = model.active(adj)
    assert torch.equal(chart.active(s), on)
    if cpd == "lingauss":
        assert on.sum(1).tolist() == [2, 1, 0]  # Theta_G = R^|E|; the empty graph's piece is a unit atom
    gen = torch.Generator().manual_seed(1)
    u = torch.randn(3, P, dtype=torch.float64, generator=gen)
    for garbage in (torch.full_like(u, float("nan")), torch.full_like(u, 1e300), torch.randn(3, P, dtype=torch.float64, generator=gen)):
        dirty = torch.where(on, u, garbage)
        x = chart.forward(s, dirty)
        x_adj, x_theta, x_stopped = split(x, d)
        assert torch.equal(x_adj, adj) and x_stopped.all()
        assert torch.equal(x_theta, torch.where(on, u, 0.0))
        assert torch.equal(chart.inverse(s, x), torch.where(on, u, 0.0))
        assert chart.contains(s, x).all()
        inside, coords = chart.coordinates_of(s, x)
        assert inside.all() and torch.equal(coords, torch.where(on, u, 0.0))
    assert torch.equal(chart.log_abs_det_jacobian(s, u), torch.zeros(3, dtype=torch.float64))
    x = chart.forward(s, u)
    off = x.clone()
    for b in range(3):
        off[b, d * d + int((~on[b]).nonzero()[0])] = 0.5  # a non-zero inactive parameter
    assert not chart.contains(s, off).any()
    moved = x.clone()
    moved[:, 4] = 1 - moved[:, 4]  # another graph (edge 1 -> 1 flipped)
    assert not chart.contains(s, moved).any()
    unstopped = x.clone()
    unstopped[:, -1] = 0.0
    assert not chart.contains(s, unstopped).any()


# ---------------------------------------------------------------- the kernels


def test_kernel_atoms_are_the_valid_one_edge_moves():
    """At 0 -> 1 -> 2 (adding 2 -> 0, 2 -> 1 or 1 -> 0 closes a cycle): the forward atoms are the d^2 edge slots (only
    0 -> 2 valid, its atom the intermediate state G + e), the sink slot (absent at an intermediate state) and the one
    Theta piece with the 2 active coordinates of G; the backward atoms remove each edge of G'. At the terminal state
    (G, theta) the forward kernel is the sink alone and the backward one the atom (G, #)."""
    d, P = 3, 9
    active = _model().active
    adj = torch.zeros(1, 3, 3, dtype=torch.bool)
    adj[0, 0, 1] = adj[0, 1, 2] = True
    s = join(adj, P)
    m = DagKernel(d, P, True, active)(s)
    assert m.atoms.count == d * d + 1 and len(m.pieces) == 1
    allowed = m.atoms.mask[0, :9].reshape(3, 3)
    assert allowed.nonzero().tolist() == [[0, 2]]
    child = adj.clone()
    child[0, 0, 2] = True
    assert torch.equal(m.atoms.x[0, 2], join(child, P)[0])  # slot i d + j adds i -> j, theta 0, not stopped
    assert not m.atoms.mask[0, -1] and m.atoms.sink[0, -1] and not m.atoms.sink[0, :9].any()
    (piece,) = m.pieces
    assert bool(piece.mask[0]) and torch.equal(piece.context, s)
    assert piece.chart.active(piece.context)[0].nonzero()[:, 0].tolist() == [1, 5]  # theta[0 d + 1], theta[1 d + 2]
    back = DagKernel(d, P, False, active)(s)
    assert back.atoms.count == 3 + 1 and not back.pieces  # d(d-1)/2 = 3 removal slots (two used: |E(G')| = 2), then (G, #)
    assert back.atoms.mask[0].tolist() == [True, True, False, False]
    removed = [split(back.atoms.x[0, k : k + 1], d)[0][0].flatten().nonzero()[:, 0].tolist() for k in range(2)]
    assert removed == [[5], [1]]  # slot 0 removes 0 -> 1 (the first edge, row-major), slot 1 removes 1 -> 2

    theta = torch.zeros(1, P)
    theta[0, 1], theta[0, 5] = 0.3, -1.2
    x = join(adj, P, theta, torch.ones(1, dtype=torch.bool))
    fwd = DagKernel(d, P, True, active)(x)
    assert fwd.atoms.mask[0].nonzero()[:, 0].tolist() == [d * d] and fwd.atoms.sink[0, d * d] and not fwd.pieces[0].mask[0]
    bwd = DagKernel(d, P, False, active)(x)
    assert bwd.atoms.mask[0].tolist() == [False, False, False, True] and torch.equal(bwd.atoms.x[0, -1], s[0])


def test_backward_kernel_has_a_slot_per_possible_edge_and_is_zero_at_the_source():
    """eq. 5: kappa_b(s0, .) = 0. Whatever the batch, the backward kernel carries d(d-1)/2 = 3 removal slots (the most
    edges of a DAG), the unused ones masked; ``max_parents`` removes the forward moves that would give a node too many parents."""
    d, P = 3, 9
    active = _model().active
    adj = torch.zeros(3, 3, 3, dtype=torch.bool)
    adj[1, 2, 1] = True
    adj[2, 0, 1] = adj[2, 0, 2] = adj[2, 1, 2] = True
    back = DagKernel(d, P, False, active)(join(adj, P))
    assert back.atoms.count == 3 + 1
    assert back.atoms.mask.tolist() == [[False] * 4, [True, False, False, False], [True, True, True, False]]
    assert back.is_zero().tolist() == [True, False, False]
    limited = DagKernel(d, P, True, active, max_parents=1)(join(adj[1:2], P))
    assert limited.atoms.mask[0, :9].reshape(3, 3).nonzero().tolist() == [[0, 2], [1, 0], [2, 0]]  # not 0 -> 1 (node 1 has a parent), not 1 -> 2 (a cycle)


@pytest.mark.parametrize("max_parents", [None, 1])
def test_eq4_pairs_every_forward_move_with_one_backward_move(max_parents):
    """eq. 4, combinatorially: over every DAG of d = 3 (within ``max_parents``) the forward edge moves G -> G + e are
    exactly the reversed backward moves G' -> G' - e, each once; every (G, #) stops into the piece of (G, theta) whose
    backward kernel is the atom (G, #); the enumerated nu holds each (G, #) once and one piece per graph."""
    d, P = 3, 9
    model = _model()
    dags = enumerate_dags(d, max_parents)
    s = join(dags, P)
    fwd = DagKernel(d, P, True, model.active, max_parents)(s)
    bwd = DagKernel(d, P, False, model.active, max_parents)(s)
    codes = lambda x: dag_codes(split(x, d)[0]).tolist()  # noqa: E731
    src = codes(s)
    forward = {(src[b], c) for b, k in fwd.atoms.mask[:, : d * d].nonzero().tolist() for c in codes(fwd.atoms.x[b, k : k + 1])}
    backward = [(c, src[b]) for b, k in bwd.atoms.mask[:, :-1].nonzero().tolist() for c in codes(bwd.atoms.x[b, k : k + 1])]
    assert len(backward) == len(set(backward)) and forward == set(backward)
    assert int(fwd.atoms.mask[:, : d * d].sum()) == len(forward)
    assert set(c for _, c in forward) <= set(src)  # every child is a DAG of the space (within max_parents)
    assert fwd.pieces[0].mask.all() and not fwd.atoms.mask[:, -1].any() and not bwd.atoms.mask[:, -1].any()
    nu, terminal = enumerated_measures(d, P, fwd.pieces[0].chart, max_parents)
    assert torch.equal(nu.atoms.x[0], s) and nu.atoms.mask.all() and len(nu.pieces) == len(dags) == len(terminal.pieces)
    assert all(torch.equal(p.context[0], s[g]) for g, p in enumerate(nu.pieces))


def _pair_integral(outer: Measure, kernel, f, forward: bool, n: int) -> float:
    """:math:`\\int\\int f(s, s')\\, \\mu(ds)\\, \\kappa(s, ds')` (``forward``) or :math:`\\int\\int f(s, s')\\, \\mu(ds')\\, \\kappa_b(s', ds)`
    by the measures' own quadrature rules (atoms exactly); ``f(s, s', sink') -> [M]``."""
    wp = outer.weighted_points(n, "quadrature")
    keep = wp.mask[0] & ~wp.sink[0]
    states, w = wp.x[0][keep], wp.log_w[0][keep].exp()
    inner = kernel(states).weighted_points(n, "quadrature")
    B, M, D = inner.x.shape
    outer_rep = states[:, None].expand(B, M, D).reshape(-1, D)
    x, sink = inner.x.reshape(-1, D), inner.sink.reshape(-1)
    values = f(outer_rep, x, sink) if forward else f(x, outer_rep, torch.zeros_like(sink))
    values = torch.where(inner.mask.reshape(-1), values * inner.log_w.reshape(-1).exp(), 0.0)
    return float((w * values.reshape(B, M).sum(1)).sum())


def test_eq4_holds_for_product_test_functions_by_quadrature():
    """eq. 4, nu (x) kappa = swap(nu (x) kappa_b), integrated against random test functions f(s, s') = g(s) h(s'),
    h(sink) = c: Gaussian bumps in theta times a function of the graph and the stop flag. The right side's sink term is
    the terminal measure against the stop moves. Both sides integrate the same Theta_G by the same Gauss rule, so they
    agree to float64 round-off (relative 1e-9) whatever the rule's own error."""
    d, P = 3, 9
    graph = make_space(_model())
    gen = torch.Generator().manual_seed(3)

    for trial in range(3):
        a_s, a_x = (torch.randn(d * d, dtype=torch.float64, generator=gen) for _ in range(2))
        mu_s, mu_x = (torch.randn(P, dtype=torch.float64, generator=gen) for _ in range(2))
        c_s, c_x, c_sink = torch.randn(3, dtype=torch.float64, generator=gen).tolist()

        def g(x, a, mu, c):
            adj, theta, stopped = split(x.double(), d)
            on = graph.kappa.chart.active(x)
            return torch.exp(0.3 * adj.flatten(1).double() @ a + c * stopped - torch.where(on, (theta - mu) ** 2, 0.0).sum(1) / (2 * 0.8**2))

        def f(s, x, sink):
            return g(s, a_s, mu_s, c_s) * torch.where(sink, math.exp(c_sink), g(x, a_x, mu_x, c_x))

        left = _pair_integral(graph.nu, graph.kappa, f, True, 64)
        right = _pair_integral(graph.nu, graph.kappa_b, f, False, 64)
        sink_term = _pair_integral(graph.terminal, lambda s: Measure(_sink_atoms(s), ()), f, True, 64)
        assert left > 0 and abs(left - (right + sink_term)) <= 1e-9 * abs(left), (trial, left, right, sink_term)


def _sink_atoms(s):
    """The sink as one atom at each state (what kappa_b(sink, .) pairs the terminal measure with)."""
    B, D = s.shape
    one = torch.ones(B, 1, dtype=torch.bool)
    return Atoms(s[:, None].clone(), torch.zeros(B, 1, dtype=s.dtype), one, one)


# ---------------------------------------------------------------- the policy's densities


@pytest.mark.slow
def test_check_graph_passes_with_a_trained_looking_policy():
    """Every condition of Definition 1 and eq. 15-16 on d = 3, with the network's zero-initialised heads randomised.

    128 nodes per piece (was 32): the Theta piece's box now has P = 9 coordinates (3 at most active), so ``method="auto"``
    integrates eq. 4 by Monte Carlo rather than quadrature, and at 32 nodes that is undecided (too little power)."""
    graph, pf, pb = _random_policies()
    report = check_graph(graph, pf, pb, n=128, n_functions=4)
    assert report.passed, str(report)


def _hermite_piece_integral(pf, s: torch.Tensor, nodes: int) -> torch.Tensor:
    """:math:`\\int_{\\Theta_G} p(s, (G, \\theta))\\, d\\theta` ``[B]`` float64 at intermediate states ``s``, through ``pf(s).log_prob``:
    a Gauss-Hermite tensor rule of ``nodes`` per active coordinate, centred and scaled by the mean and standard deviation
    of 4000 draws of the policy's own theta density (so that the integrand over the rule's weight is nearly constant;
    the draws only place the nodes, they do not enter the estimate). One node of weight 1 where Theta_G = R^0."""
    z, w = np.polynomial.hermite.hermgauss(nodes)  # int e^{-z^2} g(z) dz
    z, log_w = torch.tensor(z), torch.tensor(np.log(w)) + torch.tensor(z) ** 2
    d = pf.kernel.d
    adj, _, _ = split(s, d)
    with torch.no_grad():
        draws = pf.network(adj.float()).theta.sample((4000,)).double()  # [S, B, P]
    mean, sd = draws.mean(0), draws.std(0)
    on = pf.kernel.chart.active(s)
    out = torch.zeros(len(s), dtype=torch.float64)
    for b in range(len(s)):
        idx = on[b].nonzero()[:, 0]
        k = len(idx)
        grid = torch.cartesian_prod(*[torch.arange(nodes)] * k).reshape(-1, k) if k else torch.zeros(1, 0, dtype=torch.long)
        u = mean[b, idx] + math.sqrt(2) * sd[b, idx] * z[grid]  # [M, k]
        lw = (log_w[grid] + torch.log(math.sqrt(2) * sd[b, idx])).sum(1)  # [M]
        theta = torch.zeros(len(u), s.shape[1] - d * d - 1, dtype=torch.float64)
        theta[:, idx] = u
        x = join(adj[b].expand(len(u), d, d), theta.shape[1], theta, torch.ones(len(u), dtype=torch.bool), dtype=s.dtype)
        with torch.no_grad():
            log_p = pf(s[b].expand(len(u), -1)).log_prob(x, torch.zeros(len(u), dtype=torch.bool))
        out[b] = (log_p.double() + lw).exp().sum()
    return out


@pytest.mark.parametrize("model", ["lingauss-diag", "lingauss-full"])
def test_policy_densities_integrate_to_one_against_the_kernels(model):
    """eq. 15-16 without the checks module. At all 25 intermediate states (G, #) of d = 3: the edge and sink atoms
    (``pf(s).log_prob`` at each atom of the kernel) plus the Theta_G piece by a Gauss-Hermite rule of 12 nodes per
    active coordinate (:func:`_hermite_piece_integral`) sum to 1. Tolerance 1e-4: the float32 policy's round-off is
    ~1e-6, and the rule's error, bounded by its change from 12 to 16 nodes, is below 1e-5 here (the draws that centre it
    are seeded). At terminal states P_F is the sink with probability one; P_B sums to one over the edges of G' and (G, #)."""
    graph, pf, pb = _random_policies(model=model)
    dags = enumerate_dags(3)
    s = join(dags, 9)
    torch.manual_seed(4)
    with torch.no_grad():
        density, m = pf(s), graph.kappa(s)
        atoms = torch.zeros(len(s), dtype=torch.float64)
        for k in range(m.atoms.count):
            on = m.atoms.mask[:, k]
            if on.any():
                atoms[on] += pf(s[on]).log_prob(m.atoms.x[on, k], m.atoms.sink[on, k]).double().exp()
    piece = _hermite_piece_integral(pf, s, 12)
    total = atoms + piece
    assert ((total - 1).abs() < 1e-4).all(), (total - 1).abs().max()
    assert (piece - _hermite_piece_integral(pf, s, 16)).abs().max() < 1e-5  # the rule has converged
    assert torch.allclose(piece, density.log_probs[:, -1].double().exp(), atol=1e-4)  # the piece's mass is pi_stop
    empty = dags.flatten(1).sum(1) == 0
    assert piece[empty].item() > 0.1  # Theta_empty = R^0: a unit atom carrying P(stop | empty graph)
    # terminal states: the sink with probability one; P_B: uniform over the removals and, at (G, theta), the atom (G, #)
    with torch.no_grad():
        theta = pf.network(dags.float()).theta.sample()
    x = join(dags, 9, theta, torch.ones(len(dags), dtype=torch.bool))
    sink = torch.ones(len(x), dtype=torch.bool)
    with torch.no_grad():
        assert torch.equal(pf(x).log_prob(x, sink), torch.zeros(len(x)))
    for states in (s[~empty], x):
        back = graph.kappa_b(states)
        integral = torch.zeros(len(states), dtype=torch.float64)
        for k in range(back.atoms.count):
            on = back.atoms.mask[:, k]
            if on.any():
                integral[on] += pb(states[on]).log_prob(back.atoms.x[on, k], torch.zeros(int(on.sum()), dtype=torch.bool)).double().exp()
        assert torch.allclose(integral, torch.ones_like(integral), atol=1e-6)


def test_kernels_accept_an_empty_batch():
    """A policy or a check may evaluate the kernels on an empty selection of rows: both give measures of batch 0."""
    graph = make_space(_model())
    empty = torch.zeros(0, graph.state_dim)
    assert graph.kappa(empty).batch == 0 and graph.kappa_b(empty).batch == 0


def test_eq15_fails_when_the_theta_density_is_off(monkeypatch):
    """A theta density twice too large (log 2 added) no longer integrates to one against kappa: eq. 15 reports it."""
    cfg = _cfg(d=3, hidden=16)
    graph = dp.make_graph(cfg)
    pf, pb = dp.make_policies(graph, cfg)
    original = theta_mod.DiagNormalTheta.log_prob
    monkeypatch.setattr(theta_mod.DiagNormalTheta, "log_prob", lambda self, v: original(self, v) + math.log(2.0))
    results = {r.condition: r for r in check_graph(graph, pf, pb, n=32, n_functions=1).results}
    assert not results["eq. 15 P_F integrates to 1"].passed and not results["eq. 15 P_F integrates to 1"].undecided


# ---------------------------------------------------------------- the transition loss and the exact marginals


def test_exact_policy_has_zero_residual_and_a_perturbed_one_does_not():
    """Theorem 3.1: the undirected SubTB residual vanishes on every transition and theta pair iff the policy is exact (d = 3)."""
    model = _model()
    exact = ExactPosterior(model)
    graphs = exact.dags
    valid = valid_edges(graphs, transitive_closure(graphs))
    g, e = valid.flatten(1).nonzero().unbind(1)  # every transition G -> G + e of the space
    nxt = graphs[g].flatten(1).clone()
    nxt[torch.arange(len(g)), e] = True
    s, s_next = join(graphs[g], 9, dtype=torch.float64), join(nxt.reshape(-1, 3, 3), 9, dtype=torch.float64)
    log_reward = lambda adj, theta: model.log_reward(adj, theta.double())  # noqa: E731
    torch.manual_seed(0)
    pf, pb = _exact_policy(model)
    loss = transition_loss(pf, pb, log_reward, s, s_next, n_samples=8, scale=1.0)
    assert loss < 1e-18  # Huber(r) = r^2 / 2: |r| < 1.4e-9, float64 round-off of log-rewards of size ~100
    pf, pb = _exact_policy(model, perturb=0.5)
    assert transition_loss(pf, pb, log_reward, s, s_next, n_samples=8, scale=1.0) > 1e-4


def test_exact_policy_reproduces_the_posterior():
    """The lattice sum over edge orders gives P_T = P(G | D) for the exact policy, and the metrics say so."""
    model = _model()
    exact = ExactPosterior(model)
    pf, _ = _exact_policy(model)
    log_pt = model_graph_log_marginals(pf, exact.dags)
    torch.testing.assert_close(log_pt, exact.log_prob, atol=1e-9, rtol=0)
    torch.manual_seed(1)
    graph = make_space(model)
    adj, theta, _ = split(sample_forward(graph, pf, 2000).terminal, 3)
    assert theta.shape == (2000, 9) and (theta[~model.active(adj)] == 0).all()
    m, _ = posterior_metrics(pf, exact, adj, theta.double(), None)
    assert m["edge_rmse"] < 1e-9 and m["graph_kl"] < 1e-9
    # log P_T(G, theta) = log R(G, theta) - log Z exactly: slope 1 and r = 1 up to round-off
    assert abs(m["log_pt_vs_log_r_slope"] - 1) < 1e-6 and abs(m["log_pt_vs_log_r_slope_robust"] - 1) < 1e-6 and m["log_pt_vs_log_r_r"] > 1 - 1e-9
    # theta_nll over 2000 exact draws against its expectation: the per-sample values have sd ~ 1.2 here, 5 SE ~ 0.14
    assert abs(m["theta_nll"] - m["theta_nll_exact"]) < 0.2


def test_model_marginals_sum_to_one_and_match_rollouts():
    """For a random network the lattice sum is a distribution over DAGs, and the core's rollouts sample it (d = 3)."""
    graph, pf, _ = _random_policies()
    dags = ExactPosterior(_model()).dags
    p = model_graph_log_marginals(pf, dags).exp()
    assert abs(float(p.sum()) - 1) < 1e-5  # float32 network, 25 graphs
    K = 4000
    adj, _, _ = split(sample_forward(graph, pf, K).terminal, 3)
    freq = torch.bincount(torch.searchsorted(dag_codes(dags), dag_codes(adj)), minlength=len(dags)).double() / K
    se = (p * (1 - p) / K).sqrt()
    assert ((freq - p).abs() <= 5 * se + 1.0 / K).all()  # 5 binomial SE per graph (25 graphs), plus one count


def test_sample_based_rmses_approach_the_exact_p_t_ones():
    """``posterior_metrics``' ``*_rmse_samples`` (the papers' estimator: the frequencies in K sampled graphs) against its
    ``*_rmse`` (the policy's exact P_T), for a random policy at d = 3, K = 4,000 (seeded). Each sampled marginal is within
    5 binomial SE at p = 1/2 (0.040) of the policy's exact one (18 pairs, so a failure rate near 1e-5), and by the triangle
    inequality |RMSE(sampled, exact) - RMSE(P_T, exact)| <= RMSE(sampled, P_T) <= the largest of those gaps."""
    graph, pf, _ = _random_policies()
    exact = ExactPosterior(_model())
    torch.manual_seed(2)
    K = 4000
    adj, theta, _ = split(sample_forward(graph, pf, K).terminal, 3)
    m, _ = posterior_metrics(pf, exact, adj, theta.double(), None)
    model_features = weighted_features(exact.dags, model_graph_log_marginals(pf, exact.dags).exp())
    sampled = sample_features(adj)
    for name in FEATURES:
        gap = float((sampled[name] - model_features[name]).abs().max())
        assert gap <= 5 * math.sqrt(0.25 / K)
        assert abs(m[f"{name}_rmse_samples"] - m[f"{name}_rmse"]) <= gap + 1e-6  # float32 network: P_T to ~1e-7
        assert m[f"{name}_rmse_samples"] > 0.05  # a random policy is far from the posterior: the bound above is not vacuous


@pytest.mark.slow
def test_estimated_graph_marginal_is_exact_when_the_beam_holds_every_order():
    """d = 4, every DAG with at most 5 edges (5! = 120 orders <= beam 128): beam search finds every order and no
    sampled order falls outside it, so the estimate is the lattice sum (float32 network: sums agree to 1e-5)."""
    _, pf, _ = _random_policies(4)
    dags = ExactPosterior(_model(4)).dags
    small = dags[dags.flatten(1).sum(1) <= 5]
    est = estimate_graph_log_marginal(pf, small, beam=128, n_orders=200, generator=torch.Generator().manual_seed(0))
    assert torch.allclose(est, model_graph_log_marginals(pf, dags)[ExactPosterior(_model(4)).index(small)], atol=1e-5)


def test_estimated_graph_marginal_is_unbiased_outside_the_beam():
    """A 6-edge DAG of d = 4 (720 orders) with a beam of 1: the importance-sampling term carries almost all the mass.
    The estimate of P_T(G) (not its log) is unbiased: the mean of 40 independent estimates lies within 4 standard
    errors (their own spread / sqrt(40)) of the exact value."""
    _, pf, _ = _random_policies(4)
    post = ExactPosterior(_model(4))
    g = post.dags[post.dags.flatten(1).sum(1) == 6][:1]
    exact = float(model_graph_log_marginals(pf, post.dags)[post.index(g)])
    gen = torch.Generator().manual_seed(0)
    ratio = torch.stack([estimate_graph_log_marginal(pf, g, beam=1, n_orders=100, generator=gen)[0] - exact for _ in range(40)]).exp()
    assert abs(float(ratio.mean()) - 1) < 4 * float(ratio.std()) / math.sqrt(40)
    assert float(ratio.std()) > 0  # the importance-sampling term is at work


# ---------------------------------------------------------------- the walkers of Algorithm 1 (was ParallelEnvs)


def test_walkers_add_one_valid_edge_or_stop_and_restart_at_the_source():
    """The core's Walkers on d = 4 with exploration (epsilon = 0.5: uniform moves, Gaussian parameters of scale 1.5):
    from (G, #) a walker adds one edge that keeps G acyclic or stops into (G, theta) with theta on Theta_G only; from
    (G, theta) it moves into the sink and restarts at the empty graph; every state stays a DAG."""
    graph, pf, _ = _random_policies(4)
    d, P = 4, 16
    assert graph.state_dim == d * d + P + 1
    walkers = Walkers(graph, 16)
    torch.manual_seed(0)
    stops = sinks = 0
    for _ in range(30):
        s, x, sink = walkers.step(pf, 0.5)
        adj, _, stopped = split(s, d)
        adj_x, theta_x, stopped_x = split(x, d)
        assert is_dag(adj).all() and is_dag(adj_x[~sink]).all()
        assert torch.equal(sink, stopped)  # from a terminal state only the sink; from (G, #) never the sink
        grow = ~stopped & ~stopped_x
        assert ((adj_x.flatten(1).sum(1) - adj.flatten(1).sum(1))[grow] == 1).all() and (adj_x >= adj)[grow].all()
        stop = ~stopped & stopped_x
        assert torch.equal(adj_x[stop], adj[stop]) and (theta_x[stop][~graph.kappa.chart.active(x[stop])] == 0).all()
        restarted = walkers.states[sink]
        assert torch.equal(restarted, graph.source.expand_as(restarted)) and (walkers.moves[sink] == 0).all()
        stops, sinks = stops + int(stop.sum()), sinks + int(sink.sum())
    assert stops > 0 and sinks > 0


def test_walkers_sample_the_exact_marginal_over_graphs():
    """Under a fixed policy the trajectories of one walker are i.i.d. rollouts: the first 10 completed by each of 400
    walkers (d = 3) have the policy's exact marginal P_T(G) (the lattice sum), within 5 binomial standard errors per
    graph plus one count, as the rollouts above. Only the first 10 per walker count, so that the walkers still in a
    long trajectory when the loop ends bias nothing (seeded)."""
    graph, pf, _ = _random_policies()
    dags = enumerate_dags(3)
    p = model_graph_log_marginals(pf, dags).exp()
    walkers, per = Walkers(graph, 400), 10
    torch.manual_seed(5)
    done = torch.zeros(400, dtype=torch.long)
    graphs = []
    while bool((done < per).any()):
        s, _, sink = walkers.step(pf)
        keep = sink & (done < per)
        graphs.append(split(s[keep], 3)[0])
        done += sink.long()
    adj = torch.cat(graphs)
    K = len(adj)
    assert K == 400 * per
    freq = torch.bincount(torch.searchsorted(dag_codes(dags), dag_codes(adj)), minlength=len(dags)).double() / K
    se = (p * (1 - p) / K).sqrt()
    assert ((freq - p).abs() <= 5 * se + 1.0 / K).all()


def test_robust_slope_ignores_a_few_outlying_samples_that_pull_least_squares():
    rng = torch.Generator().manual_seed(0)
    x = torch.randn(500, generator=rng, dtype=torch.float64).numpy() * 10
    y = 0.8 * x + 0.01 * torch.randn(500, generator=rng, dtype=torch.float64).numpy()
    y[:10] -= 200.0 + 20 * x[:10]  # 2% badly estimated samples
    slope, robust, r = _line_fit(x, y)
    assert abs(robust - 0.8) < 0.01 and abs(slope - 0.8) > 0.1 and r < 0.99


def test_the_data_are_read_once_per_configuration_and_again_when_the_file_changes(tmp_path, monkeypatch):
    """``check`` and the registry build ``make_graph(config)`` then ``make_policies(graph, config)``: one simulation; a CSV
    edited between two calls is read again (its size and modification time key the cache)."""
    calls = []
    monkeypatch.setattr(dp, "simulate_er", lambda *a, **k: calls.append(a) or simulate_er(*a, **k))
    config = dp.DagParamsConfig(d=3, data_seed=11)
    graph = dp.make_graph(config)
    dp.make_policies(graph, config)
    assert len(calls) == 1
    dp.make_graph(dp.DagParamsConfig(d=3, data_seed=12))
    assert len(calls) == 2
    path = tmp_path / "data.csv"
    path.write_text("a,b\n0.1,0.2\n0.3,0.5\n0.2,0.1\n")
    first = dp.make_problem(dp.DagParamsConfig(data=str(path)))
    assert dp.make_problem(dp.DagParamsConfig(data=str(path))) is first
    path.write_text("a,b\n0.1,0.2\n0.3,0.5\n0.2,0.1\n0.7,0.9\n")
    assert dp.make_problem(dp.DagParamsConfig(data=str(path))).model.n == 4
