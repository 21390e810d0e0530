"""Comparison metrics (gflownet_measure/jsp_gfn/bayesnets/structure_metrics.py): feature marginals, RMSE / Pearson r, E-SHD, AUROC."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from conftest import HYPOTHESIS, dag
from gflownet_measure.jsp_gfn.bayesnets.dags import FEATURES
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.structure_metrics import auroc, expected_shd, feature_metrics, rmse_pearson, sample_features
from gflownet_measure.jsp_gfn.dag_params.evaluation import conditional_theta_metrics, heldout_metrics

pytestmark = pytest.mark.usefixtures("one_thread")


# ---------------------------------------------------------------- features


def test_sample_features_on_hand_graphs():
    """Samples {0->1->2} twice and {2->0} once: edge 0->1 = 2/3; path 0~>2 = 2/3; 1 in MB(0) in the chain only;
    0 and 1 are co-parents of nothing. Repeated graphs are featurised once (the result cannot tell)."""
    chain, back = dag(3, [(0, 1), (1, 2)]), dag(3, [(2, 0)])
    f = sample_features(torch.stack([chain, back, chain]))
    assert set(f) == set(FEATURES) == {"edge", "path", "markov"}
    assert f["edge"].dtype == torch.float64 and f["edge"].shape == (3, 3)
    assert torch.allclose(f["edge"], torch.tensor([[0, 2, 0], [0, 0, 2], [1, 0, 0]], dtype=torch.float64) / 3)
    assert torch.allclose(f["path"], torch.tensor([[0, 2, 2], [0, 0, 2], [1, 0, 0]], dtype=torch.float64) / 3)
    assert torch.allclose(f["markov"], torch.tensor([[0, 2, 1], [2, 0, 2], [1, 2, 0]], dtype=torch.float64) / 3)
    v = dag(3, [(0, 2), (1, 2)])  # collider: 0 and 1 are co-parents
    assert sample_features(v[None])["markov"][0, 1] == 1


def test_exact_samples_reproduce_exact_features():
    """20,000 exact posterior draws (d = 3): empirical marginals within 4 SE (<= 0.0142) of the exact ones."""
    sim = simulate_er(3, 1.0, 20, 0, obs_std=1.0, seed=1)
    post = ExactPosterior(LinearGaussian(sim.train, obs_var=1.0))
    graphs, _ = post.sample(20000, generator=torch.Generator().manual_seed(0))
    exact = post.features()
    metrics = feature_metrics(graphs, exact)
    assert list(metrics) == ["edge_rmse", "edge_r", "path_rmse", "path_r", "markov_rmse", "markov_r"]
    for name in FEATURES:
        assert (sample_features(graphs)[name] - exact[name]).abs().max() < 4 * math.sqrt(0.25 / 20000)
        assert metrics[f"{name}_rmse"] < 0.01 and metrics[f"{name}_r"] > 0.99
    assert set(feature_metrics(graphs, {"path": exact["path"]})) == {"path_rmse", "path_r"}
    with pytest.raises(ValueError, match="unknown features"):
        feature_metrics(graphs, {"edges": exact["edge"]})


# ---------------------------------------------------------------- RMSE and Pearson r


def test_rmse_pearson_against_numpy_off_diagonal():
    est = np.array([[9.0, 0.2, 0.5], [0.1, -9.0, 0.9], [0.3, 0.7, 9.0]])  # the diagonal must be ignored
    ref = np.array([[0.0, 0.3, 0.4], [0.0, 0.0, 1.0], [0.1, 0.9, 0.0]])
    x, y = np.array([0.2, 0.5, 0.1, 0.9, 0.3, 0.7]), np.array([0.3, 0.4, 0.0, 1.0, 0.1, 0.9])
    rmse, r = rmse_pearson(torch.from_numpy(est), ref)
    assert math.isclose(rmse, math.sqrt(np.mean((x - y) ** 2)), rel_tol=1e-12)
    assert math.isclose(r, np.corrcoef(x, y)[0, 1], rel_tol=1e-12)
    assert rmse_pearson(ref, ref) == (0.0, 1.0)
    assert math.isclose(rmse_pearson(-ref, ref)[1], -1.0, rel_tol=1e-12)


def test_pearson_is_nan_only_for_a_constant_side():
    ref = np.array([[0.0, 0.3], [0.6, 0.0]])
    const = np.array([[0.7, 0.25], [0.25, 0.1]])  # constant off the diagonal (its diagonal differs)
    rmse, r = rmse_pearson(const, ref)
    assert math.isnan(r) and math.isclose(rmse, math.sqrt((0.05**2 + 0.35**2) / 2))
    assert math.isnan(rmse_pearson(ref, np.full((2, 2), 0.1))[1])
    third = np.full((3, 3), 1 / 3)  # a constant that is not exactly representable: still detected by max == min
    assert math.isnan(rmse_pearson(third, np.eye(3)[::-1])[1])
    with pytest.raises(ValueError, match=r"\[d, d\]"):
        rmse_pearson(np.zeros((2, 3)), np.zeros((2, 3)))


# ---------------------------------------------------------------- expected SHD


def test_expected_shd_counts_reversed_and_missing_edges_once():
    true = dag(3, [(0, 1), (1, 2)])
    same = true.clone()
    reversed_ = dag(3, [(1, 0), (1, 2)])  # one pair differs in both directions: 1
    missing = dag(3, [(0, 1)])  # 1
    extra_and_reversed = dag(3, [(1, 0), (1, 2), (0, 2)])  # 2
    assert expected_shd(same[None], true) == 0.0
    assert expected_shd(reversed_[None], true) == 1.0
    assert expected_shd(missing[None], true) == 1.0
    assert expected_shd(extra_and_reversed[None], true) == 2.0
    assert expected_shd(torch.stack([same, reversed_, missing, extra_and_reversed]), true) == 1.0
    with pytest.raises(ValueError, match="true_adj must be"):
        expected_shd(same[None], torch.zeros(4, 4))


@given(st.integers(2, 6), st.integers(0, 2**31 - 1))
@HYPOTHESIS
def test_expected_shd_matches_pairwise_definition(d, seed):
    rng = np.random.default_rng(seed)
    graphs, true = rng.random((5, d, d)) < 0.3, rng.random((d, d)) < 0.3
    diff = np.abs(graphs.astype(int) - true.astype(int))
    brute = np.mean([sum(min(1, diff[k, i, j] + diff[k, j, i]) for i in range(d) for j in range(i + 1, d)) for k in range(5)])
    assert math.isclose(expected_shd(torch.from_numpy(graphs), torch.from_numpy(true)), brute)


# ---------------------------------------------------------------- AUROC


def test_auroc_perfect_constant_and_single_class():
    true = dag(4, [(0, 1), (1, 2), (0, 3)])
    assert auroc(true.double(), true) == 1.0
    assert auroc(1.0 - true.double(), true) == 0.0
    assert auroc(torch.full((4, 4), 0.3), true) == 0.5  # every pair tied: one half each
    diag_only = torch.eye(4) * 5 + 0.2  # a diagonal that would rank first is ignored
    assert auroc(diag_only, true) == 0.5
    assert math.isnan(auroc(torch.rand(4, 4), torch.zeros(4, 4)))
    assert math.isnan(auroc(torch.rand(4, 4), 1 - torch.eye(4)))


@given(st.integers(2, 6), st.integers(0, 2**31 - 1), st.booleans())
@HYPOTHESIS
def test_auroc_matches_brute_force_pair_count(d, seed, coarse):
    """P(s_pos > s_neg) + 1/2 P(s_pos = s_neg) over all positive-negative pairs; ``coarse`` scores force ties."""
    rng = np.random.default_rng(seed)
    scores = rng.random((d, d))
    if coarse:
        scores = np.round(scores * 3) / 3
    true = rng.random((d, d)) < 0.4
    off = ~np.eye(d, dtype=bool)
    pos, neg = scores[off & true], scores[off & ~true]
    if len(pos) == 0 or len(neg) == 0:
        assert math.isnan(auroc(scores, true))
        return
    brute = np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])
    assert math.isclose(auroc(torch.from_numpy(scores), torch.from_numpy(true)), brute, rel_tol=1e-12, abs_tol=1e-12)


# ---------------------------------------------------------------- held-out fit


def test_heldout_metrics_against_a_direct_gaussian_density():
    """Two samples on d = 3: l_k = sum over rows and nodes of log N(x_j; (x W_k)_j, sigma^2), computed directly;
    heldout_nll is -mean(l), heldout_nll_bma is -log mean(e^l), at most heldout_nll."""
    sim = simulate_er(3, 1.0, 10, 7, obs_std=0.1, seed=2)
    heldout = LinearGaussian(sim.valid, obs_var=0.01)
    graphs = torch.stack([dag(3, [(0, 1)]), dag(3, [(0, 1), (1, 2)])])
    thetas = torch.randn(2, 3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) * graphs
    x = sim.valid
    ll = torch.stack([torch.distributions.Normal(x @ w, 0.1).log_prob(x).sum() for w in thetas])
    m = heldout_metrics(heldout, graphs, thetas.flatten(1))  # flat [K, d * d], row-major
    assert m["heldout_nll"] == pytest.approx(float(-ll.mean()), rel=1e-10)
    assert m["heldout_nll_bma"] == pytest.approx(float(-(torch.logsumexp(ll, 0) - math.log(2))), rel=1e-10)
    assert m["heldout_nll_bma"] <= m["heldout_nll"]


def test_conditional_theta_metrics_score_the_graphs_with_exact_parameters():
    """d = 4, N = 200 linear rows (sigma = 0.1): scored with theta* ~ P(theta | G, D), the true graph fits the held-out
    rows far better than the empty graph and better than itself with the zero parameters of an untrained head (each
    margin is hundreds of nats for unit-variance weights and sigma^2 = 0.01, far beyond the draws' spread);
    graph_log_joint is the mean of log P(G) P(D | G); a seeded generator repeats the draws."""
    sim = simulate_er(4, 1.0, 200, 100, obs_std=0.1, seed=3)
    model, heldout = LinearGaussian(sim.train, obs_var=0.01), LinearGaussian(sim.valid, obs_var=0.01)
    true, empty = sim.adj.bool(), torch.zeros(4, 4, dtype=torch.bool)
    assert true.any()
    both = torch.stack([true, empty])
    m = conditional_theta_metrics(model, heldout, both, true, torch.Generator().manual_seed(0))
    assert m["graph_log_joint"] == pytest.approx(float(model.log_joint_graph(both).mean()), rel=1e-12)
    assert m["graph_log_joint_true"] == pytest.approx(float(model.log_joint_graph(true[None])[0]), rel=1e-12)
    assert m == conditional_theta_metrics(model, heldout, both, true, torch.Generator().manual_seed(0))
    on_true = conditional_theta_metrics(model, heldout, true[None], generator=torch.Generator().manual_seed(1))
    on_empty = conditional_theta_metrics(model, heldout, empty[None], generator=torch.Generator().manual_seed(1))
    zero_head = heldout_metrics(heldout, true[None], torch.zeros(1, 16, dtype=torch.float64))
    assert "graph_log_joint_true" not in on_true
    assert on_true["heldout_nll_exact_theta"] < on_empty["heldout_nll_exact_theta"] - 100
    assert on_true["heldout_nll_exact_theta"] < zero_head["heldout_nll"] - 100
