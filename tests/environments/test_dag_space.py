"""The DAG x Theta pointed graph, the JSP-GFN policy on it, the transition loss and the exact evaluation.

The central check is Theorem 3.1 in practice: a policy built from the exact posterior (edge probabilities from the
exact flows under the uniform P_B, theta from the exact Gaussian posterior) has zero undirected-SubTB residual on
every transition and every theta pair, and a perturbed one does not.
"""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from environments import dag_params as dp
from environments.dag_params import policy as policy_mod
from environments.dag_params.bayesnet import LinearGaussian, simulate_er
from environments.dag_params.dags import dag_codes, transitive_closure, valid_edges
from environments.dag_params.evaluation import _line_fit, estimate_graph_log_marginal, model_graph_log_marginals, posterior_metrics
from environments.dag_params.exact import ExactPosterior
from environments.dag_params.network import JSPOutputs
from environments.dag_params.objective import ParallelEnvs, transition_loss
from environments.dag_params.policy import JSPPolicy
from environments.dag_params.space import DagKernel, join, make_space, pack, split, unpack
from environments.dag_params.theta import FullNormalTheta
from gflownet_measure.checks import check_graph
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.rollout import sample_forward

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
            mean, cov = model.theta_posterior(dags[g])
            loc[g] = mean
            for j in range(d):
                pa = dags[g][:, j].nonzero()[:, 0]
                if len(pa):
                    L = torch.linalg.cholesky(torch.linalg.inv(cov[j][pa][:, pa]))
                    U[g, j][pa[:, None], pa[None, :]] = L.T
        self.table = (edge.reshape(n, d, d), stop, loc, U)

    def forward(self, adj):
        idx = torch.searchsorted(self.codes, dag_codes(adj > 0.5))
        edge, stop, loc, U = self.table
        return JSPOutputs(edge[idx], stop[idx], FullNormalTheta(loc[idx], U[idx], adj.to(loc.dtype)))


def _exact_policy(model, perturb: float = 0.0) -> tuple[JSPPolicy, UniformPolicy]:
    graph = make_space(model.d, model.log_reward)
    return JSPPolicy(graph.kappa, ExactNetwork(model, perturb)), UniformPolicy(graph.kappa_b)


def _cfg(**kw) -> dp.DagParamsConfig:
    return dp.DagParamsConfig(**kw)


def test_pack_unpack_round_trip():
    adj = torch.tensor([[[0, 1, 1], [0, 0, 1], [0, 0, 0]], [[0, 0, 0], [1, 0, 0], [1, 1, 0]]], dtype=torch.bool)
    theta = torch.randn(4, 2, 3, 3, generator=torch.Generator().manual_seed(0))
    u = pack(theta, adj)
    assert u.shape == (4, 2, 3)
    assert torch.equal(unpack(u, adj), theta * adj)


def _random_policies(d: int = 3):
    """The graph and ``(P_F, P_B)`` with every network weight drawn N(0, 0.3^2) (the zero-initialised heads randomised)."""
    cfg = _cfg(d=d, hidden=16)
    graph = dp.make_graph(cfg)
    pf, pb = dp.make_policies(graph, cfg)
    torch.manual_seed(0)
    for p in pf.network.parameters():
        nn.init.normal_(p, std=0.3)
    return graph, pf, pb


def test_check_graph_passes_with_a_trained_looking_policy():
    """Every condition of Definition 1 and eq. 15-16 on d = 3, with the network's zero-initialised heads randomised."""
    graph, pf, pb = _random_policies()
    report = check_graph(graph, pf, pb, n=32, n_functions=4)
    assert report.passed, str(report)


def test_eq15_fails_when_the_theta_density_is_off(monkeypatch):
    """A theta density twice too large (log 2 added) no longer integrates to one against kappa: eq. 15 reports it."""
    cfg = _cfg(d=3, hidden=16)
    graph = dp.make_graph(cfg)
    pf, pb = dp.make_policies(graph, cfg)
    original = policy_mod.PackedTheta.log_prob
    monkeypatch.setattr(policy_mod.PackedTheta, "log_prob", lambda self, v: original(self, v) + math.log(2.0))
    results = {r.condition: r for r in check_graph(graph, pf, pb, n=32, n_functions=1).results}
    assert not results["eq. 15 P_F integrates to 1"].passed


def test_kernel_atoms_are_the_valid_one_edge_moves():
    adj = torch.zeros(1, 3, 3, dtype=torch.bool)
    adj[0, 0, 1] = adj[0, 1, 2] = True  # 0 -> 1 -> 2: adding 2 -> 0 or 2 -> 1 or 1 -> 0 closes a cycle
    m = DagKernel(3, True)(join(adj))
    allowed = m.atoms.mask[0, :9].reshape(3, 3)
    assert allowed.nonzero().tolist() == [[0, 2]]
    assert [bool(p.mask[0]) for p in m.pieces] == [False, True, False]  # Theta_G = R^2
    back = DagKernel(3, False)(join(adj))
    assert back.atoms.mask[0, :9].reshape(3, 3).nonzero().tolist() == [[0, 1], [1, 2]]


def test_exact_policy_has_zero_residual_and_a_perturbed_one_does_not():
    """Theorem 3.1: the undirected SubTB residual vanishes on every transition and theta pair iff the policy is exact (d = 3)."""
    model = _model()
    exact = ExactPosterior(model)
    graphs = exact.dags
    valid = valid_edges(graphs, transitive_closure(graphs))
    g, e = valid.flatten(1).nonzero().unbind(1)  # every transition G -> G + e of the space
    nxt = graphs[g].flatten(1).clone()
    nxt[torch.arange(len(g)), e] = True
    s, s_next = join(graphs[g], dtype=torch.float64), join(nxt.reshape(-1, 3, 3), dtype=torch.float64)
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
    graph = make_space(3, model.log_reward)
    adj, theta, _ = split(sample_forward(graph, pf, 2000).terminal, 3)
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


def test_parallel_envs_keep_masks_in_step_with_the_closure():
    model = _model(d=4)
    graph = make_space(4, model.log_reward)
    pf, _ = dp.make_policies(graph, _cfg(d=4, hidden=16))
    envs = ParallelEnvs(16, 4)
    torch.manual_seed(0)
    for _ in range(30):
        before, after = envs.step(pf, 0.5)
        assert ((after.flatten(1).sum(1) - before.flatten(1).sum(1)) == 1).all() and (after >= before).all()
        torch.testing.assert_close(envs.reach, transitive_closure(envs.adj))
        assert not (transitive_closure(after) & transitive_closure(after).transpose(1, 2) & ~torch.eye(4, dtype=torch.bool)).any()  # acyclic


def test_robust_slope_ignores_a_few_outlying_samples_that_pull_least_squares():
    rng = torch.Generator().manual_seed(0)
    x = torch.randn(500, generator=rng, dtype=torch.float64).numpy() * 10
    y = 0.8 * x + 0.01 * torch.randn(500, generator=rng, dtype=torch.float64).numpy()
    y[:10] -= 200.0 + 20 * x[:10]  # 2% badly estimated samples
    slope, robust, r = _line_fit(x, y)
    assert abs(robust - 0.8) < 0.01 and abs(slope - 0.8) > 0.1 and r < 0.99
