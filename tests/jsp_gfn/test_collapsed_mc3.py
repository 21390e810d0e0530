"""The collapsed structure MC3 (``gflownet_measure.jsp_gfn.baselines.collapsed_mc3``): its kernel, its marginals against exact enumeration, its diagnostics and its registry entry.

Problems: ``simulate_er(d, 1, N = 100, seed)`` with the settings of ``make_problem`` (noise std 0.1, :math:`\\sigma^2 = 0.01`,
:math:`\\sigma_0^2 = 1`), whose exact posterior :class:`ExactPosterior` enumerates for d <= 5; a categorical d = 3 problem
scored by BDeu, enumerated by hand here. Monte Carlo tolerances: an edge marginal estimated from K kept states has
standard error :math:`\\sqrt{p(1-p) / \\mathrm{ESS}} \\le 0.5 / \\sqrt{\\mathrm{ESS}}`.
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest
import torch

from conftest import SMALL_BUDGET as BUDGET
from gflownet_measure.jsp_gfn.baselines.collapsed_mc3 import (
    _advance,
    _Chain,
    _GaussianNeighbours,
    _ScoreCache,
    _start,
    _Target,
    collapsed_mc3,
    gold_standard,
    no_closed_form,
    split_rhat,
)
from gflownet_measure.jsp_gfn.baselines.mcmc import legal_moves
from gflownet_measure.jsp_gfn.baselines.structure import sample
from gflownet_measure.jsp_gfn.bayesnets.cpds import make_model
from gflownet_measure.jsp_gfn.bayesnets.dags import enumerate_dags, is_dag, transitive_closure, weighted_features
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.scores import bdeu_local_scores
from gflownet_measure.jsp_gfn.bayesnets.structure_metrics import rmse_pearson

torch.set_num_threads(1)


def _linear(d: int, seed: int = 0, **kw) -> LinearGaussian:
    sim = simulate_er(d, 1.0, 100, 0, seed=seed, obs_std=0.1)
    return make_model("lingauss", sim.train, obs_var=0.01, prior_var=1.0, **kw)


def _categorical(seed: int = 0):
    """d = 3 binary chain x0 -> x1 -> x2 with flip probability 0.2, N = 60 rows (a posterior spread over several DAGs), Erdos-Renyi prior p = 1/4."""
    g = torch.Generator().manual_seed(seed)
    x0 = (torch.rand(60, generator=g) < 0.5).long()
    x1 = x0 ^ (torch.rand(60, generator=g) < 0.2).long()
    x2 = x1 ^ (torch.rand(60, generator=g) < 0.2).long()
    return make_model("categorical-mlp", torch.stack([x0, x1, x2], 1), graph_prior="erdos_renyi", edges_per_node=0.25)


# ---------------------------------------------------------------- the kernel


class _Scripted:
    """An RNG whose ``random()`` returns the given uniforms in order: one step of the chain with chosen pair, coin and acceptance uniform."""

    def __init__(self, *uniforms: float):
        self.uniforms = list(uniforms)

    def random(self) -> float:
        return self.uniforms.pop(0)


def _codes(adj: torch.Tensor) -> list[int]:
    return [int(c) for c in (adj.long() << torch.arange(adj.shape[-1])[:, None]).sum(0)]


def _one_step(model, adj: torch.Tensor, k: int, u: float, max_parents: int | None) -> torch.Tensor:
    """The state after one step from ``adj`` with the pair-and-coin uniform of choice ``k`` and acceptance uniform ``u``."""
    d, target = model.d, _Target("test", model)
    cache = _ScoreCache(target.scorer, d, d if max_parents is None else max_parents)
    chain = _Chain(_codes(adj), cache, target.log_edge_odds, _Scripted((k + 0.5) / (d * (d - 1)), u))
    _advance(chain, 1)
    return torch.tensor([[bool(chain.parents[j] >> i & 1) for j in range(d)] for i in range(d)])


@pytest.mark.parametrize("max_parents", [None, 1])
def test_the_kernel_is_reversible_with_respect_to_the_collapsed_posterior(max_parents):
    """Every (DAG, pair, coin) of d = 3 enumerated: the proposal is symmetric, moves exactly along the legal MC3 moves
    (``mcmc.legal_moves``), accepts exactly when :math:`u < \\pi(G') / \\pi(G)`, and its transition matrix satisfies
    detailed balance with :math:`\\pi(G) \\propto P(G) P(D | G)` from ``model.log_joint_graph`` (an Erdos-Renyi prior,
    log-odds -1.1, so the edge-count term is tested). Tolerance 1e-9: float64 round-off of scores near -100."""
    model = _linear(3, graph_prior="erdos_renyi", edges_per_node=0.25)
    dags = enumerate_dags(3, max_parents)
    log_pi = model.log_joint_graph(dags)
    index = {tuple(_codes(g)): n for n, g in enumerate(dags)}
    n, choices = len(dags), 6  # 3 pairs x 2 coins, q = 1/6 each
    T, proposals = np.zeros((n, n)), np.zeros((n, n), dtype=int)
    for a, g in enumerate(dags):
        moved = 0
        for k in range(choices):
            new = _one_step(model, g, k, 0.0, max_parents)
            if torch.equal(new, g):
                continue
            b = index[tuple(_codes(new))]  # a DAG within the parent limit
            assert int((new ^ g).sum()) in (1, 2)
            moved, proposals[a, b] = moved + 1, proposals[a, b] + 1
            ratio = float((log_pi[b] - log_pi[a]).exp())
            if ratio < 1:
                assert torch.equal(_one_step(model, g, k, ratio * (1 + 1e-9), max_parents), g)
                assert torch.equal(_one_step(model, g, k, ratio * (1 - 1e-9), max_parents), new)
            T[a, b] += min(1.0, ratio) / choices
        assert moved == int(legal_moves(g[None], transitive_closure(g[None]), max_parents).sum())
        T[a, a] = 1 - T[a].sum()
    pi = (log_pi - log_pi.logsumexp(0)).exp().numpy()
    assert np.array_equal(proposals, proposals.T)
    flow = pi[:, None] * T
    np.testing.assert_allclose(flow, flow.T, atol=1e-12, rtol=1e-9)
    np.testing.assert_allclose(pi @ T, pi, atol=1e-12)


def test_gaussian_neighbour_scores_equal_the_model_local_marginal():
    """The rank-one updates of ``_GaussianNeighbours`` against :meth:`LinearGaussian.local_log_marginal` (a Cholesky of each
    parent set), with perfect interventions on some rows (per-node Gram matrices); 1e-8 nats: round-off in quadratic
    forms near 1e5 (noise variance 0.01)."""
    sim = simulate_er(6, 1.0, 80, 0, seed=2, obs_std=0.1)
    interventions = torch.rand(80, 6, generator=torch.Generator().manual_seed(0)) < 0.2
    model = make_model("lingauss", sim.train, interventions=interventions)
    scorer, rng = _GaussianNeighbours(model), random.Random(0)
    for _ in range(40):
        j = rng.randrange(6)
        parents = rng.sample([i for i in range(6) if i != j], rng.randrange(6))
        code = sum(1 << i for i in parents)
        candidates = [code] + [code ^ 1 << i for i in range(6) if i != j]
        expected = [model.local_log_marginal(j, tuple(i for i in range(6) if c >> i & 1)) for c in candidates]
        np.testing.assert_allclose(scorer(j, code, candidates), expected, rtol=0, atol=1e-8)


def test_chains_start_apart():
    """Chain 0 starts empty, the others at different dense random DAGs (``max_parents`` enforced)."""
    rng = np.random.default_rng(0)
    starts = [_start(8, c, rng, 3) for c in range(4)]
    assert starts[0] == [0] * 8 and len({tuple(s) for s in starts}) == 4
    for s in starts[1:]:
        adj = torch.tensor([[bool(s[j] >> i & 1) for j in range(8)] for i in range(8)])
        assert bool(is_dag(adj)) and int(adj.sum(0).max()) <= 3 and int(adj.sum()) >= 8


# ---------------------------------------------------------------- against exact posteriors


def test_edge_marginals_match_the_exact_posterior_at_d4():
    """4 chains x 5,000 states (thin 20, 100k steps each): the edge marginals' RMSE to :class:`ExactPosterior` < 0.01 (the
    Monte Carlo error, about :math:`0.5/\\sqrt{\\mathrm{ESS}}` with ESS of the order of the 20,000 states, is below 0.004;
    measured 0.0022), the path marginals likewise; the diagnostics report convergence."""
    model = _linear(4)
    exact = ExactPosterior(model).features()
    out = collapsed_mc3(model, n_samples=5000, burn_in=2000, thin=20, n_chains=4, seed=0)
    marginals = out.marginals()
    assert rmse_pearson(marginals["edge"], exact["edge"])[0] < 0.01
    assert rmse_pearson(marginals["path"], exact["path"])[0] < 0.01
    assert out.rhat < 1.01 and out.chain_spread < 0.03 and 0 < out.acceptance < 1
    assert out.thetas.shape == (20000, 16) and not (out.thetas[~out.graphs.flatten(1)] != 0).any()


def test_gold_standard_matches_the_exact_posterior_at_d4():
    """:func:`gold_standard` with 4 chains x 200k steps: edge and path RMSE < 0.01 (as above; measured 0.0011 and 0.0004),
    ``expected_edges`` the sum of the edge marginals; chain spread < 0.05: the range of 4 chains' marginals is about 2
    standard errors of one chain's, :math:`2 \\cdot 0.5 / \\sqrt{\\mathrm{ESS}}` with an ESS of a few thousand (measured 0.028)."""
    model = _linear(4, seed=1)
    exact = ExactPosterior(model).features()
    gold = gold_standard(model, n_chains=4, n_steps=200_000, seed=0, progress=False)
    assert rmse_pearson(gold.edge, exact["edge"])[0] < 0.01 and rmse_pearson(gold.path, exact["path"])[0] < 0.01
    assert gold.expected_edges == pytest.approx(float(exact["edge"].sum()), abs=0.03)
    assert gold.rhat < 1.01 and gold.chain_spread < 0.05 and (gold.n_chains, gold.n_steps) == (4, 200_000)


def test_bdeu_edge_marginals_match_brute_force_enumeration_at_d3():
    """A categorical model, scored by BDeu: the 25 DAGs of d = 3 enumerated with ``bdeu_local_scores`` and the Erdos-Renyi
    prior by hand; 4 chains x 5,000 states, edge RMSE < 0.015 (Monte Carlo error about 0.004; measured 0.0036).
    No :math:`\\theta` is drawn (the model's MLP has no conjugate posterior)."""
    model = _categorical()
    dags = enumerate_dags(3)
    local = bdeu_local_scores(model.data, model.n_states)
    codes = torch.tensor([_codes(g) for g in dags])  # [25, 3]
    log_pi = local(torch.arange(3).repeat(len(dags)), codes.flatten()).view(-1, 3).sum(1) + dags.sum((1, 2)) * model.log_edge_odds
    exact = weighted_features(dags, (log_pi - log_pi.logsumexp(0)).exp())["edge"]
    out = collapsed_mc3(model, n_samples=5000, burn_in=500, thin=10, n_chains=4, seed=1)
    assert out.thetas is None
    assert rmse_pearson(out.marginals()["edge"], exact)[0] < 0.015


def test_max_parents_restricts_the_posterior_and_the_diagnostics_flag_a_stuck_run():
    """With ``max_parents = 1`` every sample has at most one parent per node. Data seed 0: the edge marginals match
    ``ExactPosterior(model, max_parents=1)`` (RMSE < 0.01 as above; measured 0.0018). Data seed 2: the true graph's
    node 3 has three parents; under the limit the single-edge moves between its one-parent modes pass through graphs
    of far lower posterior mass, the chains stay apart (measured edge RMSE 0.55), and the diagnostics say so: R-hat
    infinite, chain spread 1."""
    for seed, mixes in ((0, True), (2, False)):
        model = _linear(4, seed=seed)
        exact = ExactPosterior(model, max_parents=1).features()
        out = collapsed_mc3(model, n_samples=4000, burn_in=1000, thin=20, n_chains=4, seed=0, max_parents=1)
        assert int(out.graphs.sum(1).max()) <= 1
        if mixes:
            assert rmse_pearson(out.marginals()["edge"], exact["edge"])[0] < 0.01 and out.rhat < 1.01
        else:
            assert out.rhat == np.inf and out.chain_spread == 1.0


def test_a_run_is_a_function_of_its_seed():
    model = _linear(3)
    a, b, c = (collapsed_mc3(model, n_samples=50, burn_in=10, thin=3, n_chains=2, seed=s) for s in (5, 5, 6))
    assert torch.equal(a.graphs, b.graphs) and torch.equal(a.thetas, b.thetas) and not torch.equal(a.graphs, c.graphs)


# ---------------------------------------------------------------- diagnostics


def _codes_of(indicator: np.ndarray) -> np.ndarray:
    """Edge 0 -> 1 of a d = 2 chain set as ``indicator [C, S]``: parent codes ``[C, S, 2]``."""
    return np.stack([np.zeros_like(indicator), indicator], -1).astype(np.int64)


def test_split_rhat_is_bda3_on_the_edge_indicators():
    """Against BDA3 eqs. 11.3-11.4 written out on the draws (the halves as separate sequences); stuck chains give infinity, agreeing constants 1."""
    rng = np.random.default_rng(0)
    x = (rng.random((3, 40)) < np.array([[0.2], [0.5], [0.6]])).astype(float)
    halves = np.concatenate([x[:, :20], x[:, 20:]])  # [6, 20]
    n = 20
    W, B = halves.var(1, ddof=1).mean(), n * halves.mean(1).var(ddof=1)
    assert split_rhat(_codes_of(x)) == pytest.approx(np.sqrt(((n - 1) / n * W + B / n) / W), rel=1e-12)
    assert split_rhat(_codes_of(np.array([[0] * 10, [1] * 10]))) == np.inf
    assert split_rhat(_codes_of(np.ones((2, 10)))) == 1.0
    assert np.isnan(split_rhat(_codes_of(np.ones((2, 3)))))


# ---------------------------------------------------------------- registry and inputs


def test_registry_runs_it_with_the_budget_and_refuses_an_mlp_model():
    model = _linear(4)
    samples, extra = sample("mc3-collapsed", model, BUDGET)
    # 40 samples over 2 chains, thinned 60 // 20 = 3 after 30 steps of burn-in: the same call made by hand
    direct = collapsed_mc3(model, n_samples=20, burn_in=30, thin=3, n_chains=2, seed=3)
    assert torch.equal(samples.graphs, direct.graphs) and torch.equal(samples.thetas, direct.thetas)
    assert set(extra) == {"acceptance", "rhat", "chain_spread"}
    limited, _ = sample("mc3-collapsed", model, dataclasses.replace(BUDGET, max_parents=1))
    assert int(limited.graphs.sum(1).max()) <= 1
    categorical, _ = sample("mc3-collapsed", _categorical(), BUDGET)
    assert categorical.thetas is None and categorical.graphs.shape == (40, 3, 3)
    mlp = make_model("mlp", torch.randn(30, 3, generator=torch.Generator().manual_seed(0)))
    assert sample("mc3-collapsed", mlp, BUDGET) == no_closed_form(mlp) != ""
    assert "\n" not in no_closed_form(mlp)


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"n_samples": 0}, "n_samples must be an integer >= 1, got 0"),
        ({"burn_in": -1}, "burn_in must be an integer >= 0, got -1"),
        ({"thin": 1.5}, "thin must be an integer >= 1, got 1.5"),
        ({"n_chains": 0}, "n_chains must be an integer >= 1, got 0"),
        ({"max_parents": 0}, "max_parents must be None or an integer >= 1, got 0"),
    ],
)
def test_collapsed_mc3_rejects_bad_inputs(kw, match):
    with pytest.raises(ValueError, match=match):
        collapsed_mc3(_linear(3), **kw)


def test_bad_models_and_gold_standard_inputs_raise():
    with pytest.raises(ValueError, match="collapsed_mc3: collapsed MC3 needs a closed-form local score.*MLPGaussian has none"):
        collapsed_mc3(make_model("mlp", torch.randn(30, 3, generator=torch.Generator().manual_seed(0))))
    with pytest.raises(ValueError, match="need 2 <= d <= 62 nodes, got d = 1"):
        collapsed_mc3(LinearGaussian(torch.randn(10, 1, dtype=torch.float64)))
    with pytest.raises(ValueError, match="gold_standard: n_steps must be an integer >= 1, got 0"):
        gold_standard(_linear(3), n_steps=0)
    with pytest.raises(ValueError, match="gold_standard: thin must be in 1..n_steps = 10, got 20"):
        gold_standard(_linear(3), n_steps=10, thin=20)
