"""The linear-Gaussian network of JSP-GFN (``gflownet_measure/jsp_gfn/bayesnets/linear_gaussian.py``, ``exact.py``): closed forms
against direct densities, quadrature and autograd; the mini-batch likelihood; simulated and CSV data; and the
exact posterior against its own samples."""

import math

import numpy as np
import pytest
import torch
from scipy import integrate

from conftest import dag
from gflownet_measure.jsp_gfn.bayesnets.dags import enumerate_dags, transitive_closure
from gflownet_measure.jsp_gfn.bayesnets.datasets.csv_files import load_csv
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

pytestmark = pytest.mark.usefixtures("one_thread")


def model_on(d=4, n=30, obs_std=0.5, seed=0, **kw):
    return LinearGaussian(simulate_er(d, 1.0, n, 0, obs_std=obs_std, seed=seed).train, **kw)


@pytest.mark.parametrize("node, parents", [(2, ()), (2, (1,)), (1, (0, 2, 3)), (1, [True, False, True, False]), (3, torch.tensor([1, 1, 0, 0]))])
def test_local_log_marginal_is_the_gaussian_with_weights_integrated_out(node, parents):
    model = model_on(obs_var=0.25, prior_var=2.0)  # non-default variances, so swapping them would show
    index = list(parents) if isinstance(parents, tuple) else [i for i, p in enumerate(parents) if p]
    x_p = model.data[:, index]  # [N, k]
    cov = 0.25 * torch.eye(model.n, dtype=torch.float64) + 2.0 * x_p @ x_p.T
    direct = torch.distributions.MultivariateNormal(torch.zeros(model.n, dtype=torch.float64), cov).log_prob(model.data[:, node])
    # float64; the N x N Cholesky and the k x k Woodbury form differ by round-off only
    assert model.local_log_marginal(node, parents) == pytest.approx(float(direct), rel=1e-11, abs=1e-9)


def test_log_joint_graph_equals_quadrature_of_the_reward_over_the_one_weight():
    data = simulate_er(3, 1.0, 50, 0, seed=2).train  # noise std 0.1, the JSP-GFN setting: a narrow posterior
    model = LinearGaussian(data, obs_var=0.01, graph_prior="erdos_renyi", edges_per_node=0.25)  # p = 1/4: log P(G) = -log 3
    adj = dag(3, [(0, 1)])
    mean, cov = model.theta_posterior(adj)
    m, sd = float(mean[0 * 3 + 1]), math.sqrt(float(cov[1, 0, 0]))  # flat index i * d + j of the edge 0 -> 1

    def log_f(t):
        theta = torch.zeros(9, dtype=torch.float64)
        theta[0 * 3 + 1] = t
        return float(model.log_likelihood(adj, theta) + model.log_prior_theta(adj, theta))

    peak = log_f(m)
    integral, err = integrate.quad(lambda t: math.exp(log_f(t) - peak), m - 15 * sd, m + 15 * sd, points=[m], epsabs=0, epsrel=1e-12)
    expected = peak + math.log(integral) + float(model.log_prior_graph(adj))
    # quad's relative error ~1e-12 and the Gaussian tails beyond 15 sd are ~1e-50
    assert float(model.log_joint_graph(adj)) == pytest.approx(expected, abs=1e-8)
    assert float(model.log_prior_graph(adj)) == pytest.approx(-math.log(3))


def test_theta_posterior_is_the_stationary_point_and_inverse_curvature_of_the_reward():
    model = model_on(d=4, n=40, obs_std=0.3, seed=1, obs_var=0.09, prior_var=0.5)
    adj = dag(4, [(0, 2), (1, 2), (2, 3), (0, 3)])
    mean, cov = model.theta_posterior(adj)

    def log_f(theta):
        return model.log_likelihood(adj, theta) + model.log_prior_theta(adj, theta)

    theta = mean.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(log_f(theta), theta)
    hess = torch.autograd.functional.hessian(log_f, mean).view(4, 4, 4, 4)  # [i, j, i', j'] of the flat [d * d, d * d]
    mean = mean.view(4, 4)
    scale = hess.abs().max()
    assert grad.abs().max() < 1e-10 * scale  # zero gradient at the mean, up to float64 round-off of O(scale) terms
    for j in range(4):
        parents = adj[:, j].nonzero()[:, 0]
        for j2 in range(4):
            if j2 != j:
                assert (hess[:, j, :, j2] == 0).all()  # the columns' weights are independent a posteriori
        if len(parents):
            block = hess[parents, j][:, parents, j]  # = -V_j^{-1}
            assert torch.allclose(-torch.linalg.inv(block), cov[j][parents][:, parents], rtol=1e-9, atol=0)
        others = torch.ones(4, dtype=torch.bool)
        others[parents] = False
        assert (mean[others, j] == 0).all() and (cov[j][others] == 0).all() and (cov[j][:, others] == 0).all()


def test_sample_and_log_prob_theta_posterior_match_the_gaussian():
    model = model_on(d=3, n=30, seed=4, obs_var=0.25)
    adj = dag(3, [(0, 1), (2, 1), (0, 2)])
    mean, cov = model.theta_posterior(adj)
    n = 4000
    flat = model.sample_theta_posterior(adj.expand(n, 3, 3), torch.Generator().manual_seed(0))
    assert flat.shape == (n, 9)
    theta, mean = flat.view(n, 3, 3), mean.view(3, 3)  # flat index i * d + j: a row-major view
    assert (theta[:, ~adj] == 0).all()
    se = (cov.diagonal(dim1=1, dim2=2).T / n).sqrt()  # [d, d]: standard error of each sample mean
    assert ((theta.mean(0) - mean).abs() <= 5 * se + 1e-15).all()  # 5 SE: < 1e-5 two-sided per entry
    # node 1's two parents are correlated in the data (r = 0.91), so a wrong square root of V_1 would show
    p = adj[:, 1]
    v = cov[1][p][:, p]
    sample_cov = torch.cov(theta[:, p, 1].T)
    se_cov = ((v.diagonal()[:, None] * v.diagonal()[None, :] + v.square()) / n).sqrt()  # Gaussian sample-covariance SE
    assert ((sample_cov - v).abs() < 5 * se_cov).all() and v[0, 1].abs() > 0.5 * v.diagonal().prod().sqrt()
    ref = sum(torch.distributions.MultivariateNormal(mean[adj[:, j], j], cov[j][adj[:, j]][:, adj[:, j]]).log_prob(theta[:, adj[:, j], j]) for j in (1, 2))
    assert torch.allclose(model.log_prob_theta_posterior(adj.expand(n, 3, 3), flat), ref, rtol=1e-11, atol=1e-10)


def test_minibatch_log_likelihood_is_unbiased_and_exact_on_all_rows():
    model = model_on(d=3, n=40, seed=5, obs_var=0.25)
    gen = torch.Generator().manual_seed(0)
    adj = dag(3, [(0, 1), (1, 2)])[None]
    theta = torch.randn(1, 9, dtype=torch.float64, generator=gen)
    full = float(model.log_likelihood(adj, theta)[0])
    estimates = torch.stack([model.log_likelihood(adj, theta, rows=torch.randperm(40, generator=gen)[:5])[0] for _ in range(4000)])
    se = float(estimates.std()) / math.sqrt(len(estimates))
    assert se > 0.01 * abs(full) / math.sqrt(len(estimates))  # the estimates do vary
    assert abs(float(estimates.mean()) - full) < 5 * se  # 5 SE: a failure rate < 1e-6 for this seeded run
    all_rows = model.log_likelihood(adj, theta, rows=torch.randperm(40, generator=gen))
    assert float(all_rows[0]) == pytest.approx(full, rel=1e-13)
    # a leading sample dimension broadcasts against the graphs
    thetas = torch.randn(2, 1, 9, dtype=torch.float64, generator=gen)
    both = model.log_likelihood(adj, thetas)
    assert both.shape == (2, 1) and all(float(both[s, 0]) == pytest.approx(float(model.log_likelihood(adj, thetas[s])[0]), rel=1e-14) for s in range(2))


def test_simulate_er_is_seeded_acyclic_and_has_the_noise_variance():
    a, b, c = simulate_er(5, 1.0, 50, 20, seed=7), simulate_er(5, 1.0, 50, 20, seed=7), simulate_er(5, 1.0, 50, 20, seed=8)
    assert torch.equal(a.train, b.train) and torch.equal(a.valid, b.valid) and torch.equal(a.adj, b.adj) and torch.equal(a.theta, b.theta)
    assert not torch.equal(a.train, c.train)
    assert a.train.shape == (50, 5) and a.valid.shape == (20, 5) and a.train.dtype == torch.float64 and a.names == ["x0", "x1", "x2", "x3", "x4"]
    big = simulate_er(5, 1.0, 20000, 0, obs_std=0.1, seed=9)
    reach = transitive_closure(big.adj)
    assert not (reach & reach.T & ~torch.eye(5, dtype=torch.bool)).any()
    assert big.theta.shape == (25,) and big.adj.any() and ((big.theta != 0) == big.adj.flatten()).all()
    resid = big.train - big.train @ big.theta.view(5, 5)  # the noise E = X (I - Theta); flat theta is row-major
    # sample variance of 20000 normals has relative SE sqrt(2 / 20000) = 1%: 5 SE
    assert ((resid.var(0) / 0.01 - 1).abs() < 0.05).all()


@pytest.mark.parametrize("d, k", [(5, 2.0), (3, 0.0)])
def test_erdos_renyi_prior_refuses_p_outside_0_1(d, k):
    with pytest.raises(ValueError, match="erdos_renyi prior needs 0 < p"):
        LinearGaussian(torch.zeros(3, d, dtype=torch.float64), graph_prior="erdos_renyi", edges_per_node=k)
    with pytest.raises(ValueError, match="graph_prior must be one of"):
        LinearGaussian(torch.zeros(3, d, dtype=torch.float64), graph_prior="edge")


def test_load_csv_round_trips(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text("a,b,c\n1.5,-2,3e-1\n0,4,5\n")
    data, names = load_csv(path)
    assert names == ["a", "b", "c"] and data.dtype == torch.float64
    assert torch.equal(data, torch.tensor([[1.5, -2.0, 0.3], [0.0, 4.0, 5.0]], dtype=torch.float64))


@pytest.mark.parametrize(
    "text, message",
    [
        (None, "no such file"),
        ("", "empty"),
        ("a,b\n1,2\n,4\n", "missing value .* column 'a', first at data row 2"),
        ("a,b\n1,2\n3,NaN\n", "missing value .* column 'b', first at data row 2"),
        ("a,b\n1,x1\n3,4\n", "non-numeric cell 'x1' in column 'b', data row 1"),
        ("a\n1\n2\n", "at least 2 columns"),
        ("a,b\n1,2\n", "at least 2 data rows"),
        ("a,b,a\n1,2,3\n4,5,6\n", r"duplicate column names \['a'\]"),
        ("a,b\n1,2\n3,4,5\n", "data row 2 has 3 cells"),
    ],
)
def test_load_csv_names_the_problem(tmp_path, text, message):
    path = tmp_path / "data.csv"
    if text is not None:
        path.write_text(text)
    with pytest.raises(ValueError, match=message):
        load_csv(path)


@pytest.fixture(scope="module")
def exact3():
    """A diffuse posterior on d = 3 (N = 20, unit noise): edge marginals between 0.13 and 0.53, so sampling checks bite."""
    data = simulate_er(3, 1.0, 20, 0, obs_std=1.0, seed=1).train
    return ExactPosterior(LinearGaussian(data, obs_var=1.0, graph_prior="erdos_renyi", edges_per_node=0.5))


def test_exact_posterior_normalises_and_its_evidence_sums_the_local_scores(exact3):
    model = exact3.model
    assert float(exact3.log_prob.exp().sum()) == pytest.approx(1.0, abs=1e-12)
    # log Z from the scalar local scores, graph by graph, independently of the batched path
    per_graph = torch.tensor(
        [
            sum(model.local_log_marginal(j, tuple(adj[:, j].nonzero()[:, 0].tolist())) for j in range(3)) + float(model.log_prior_graph(adj))
            for adj in enumerate_dags(3)
        ],
        dtype=torch.float64,
    )
    assert exact3.log_normaliser() == pytest.approx(float(torch.logsumexp(per_graph, 0)), abs=1e-10)
    assert torch.allclose(exact3.log_prob_graph(exact3.dags), per_graph - torch.logsumexp(per_graph, 0), atol=1e-10)
    with pytest.raises(ValueError, match="not a DAG"):
        exact3.log_prob_graph(dag(3, [(0, 1), (1, 0)])[None])


def test_exact_samples_match_the_edge_marginals_and_the_theta_metric_expected(exact3):
    n = 20000
    adj, theta = exact3.sample(n, torch.Generator().manual_seed(0))
    p = exact3.features()["edge"]
    freq = adj.double().mean(0)
    # binomial SE; the 1/n floor keeps the bound meaningful where p(1 - p) is tiny (the diagonal is exactly 0)
    se = ((p * (1 - p) + 1 / n) / n).sqrt()
    assert ((freq - p).abs() < 5 * se).all()
    metric = exact3.theta_metric(adj, theta)
    assert abs(float(metric.mean()) - exact3.theta_metric_expected()) < 5 * float(metric.std()) / math.sqrt(n)
    joint = exact3.log_prob_joint(adj, theta)
    assert torch.allclose(joint, exact3.log_prob_graph(adj) - metric, atol=1e-12)


def test_exact_features_are_consistent():
    post = ExactPosterior(model_on(d=4, n=20, obs_std=1.0, seed=3, obs_var=1.0))
    f = post.features()
    assert set(f) == {"edge", "path", "markov"}
    assert (f["path"] >= f["edge"] - 1e-15).all()  # every edge is a path
    assert torch.allclose(f["markov"], f["markov"].T) and (f["markov"] >= torch.maximum(f["edge"], f["edge"].T) - 1e-15).all()
    assert np.allclose(f["edge"].diagonal(), 0) and float(f["edge"].max()) <= 1.0


def test_mean_field_gap_is_the_kl_of_the_best_factorised_gaussian():
    model = model_on(d=4, n=40, obs_std=0.3, seed=1, obs_var=0.09)
    adj = dag(4, [(0, 2), (1, 2), (2, 3), (0, 3), (1, 3)])  # nodes 2 and 3 have correlated parent weights
    mean, cov = model.theta_posterior(adj)
    mean = mean.view(4, 4)
    expected = 0.0
    for j, parents in ((2, [0, 1]), (3, [0, 1, 2])):
        v = cov[j][parents][:, parents]
        p = torch.distributions.MultivariateNormal(mean[parents, j], v)
        best = 1.0 / torch.linalg.inv(v).diagonal()  # the KL(q || p)-optimal factorised variances
        q = torch.distributions.MultivariateNormal(mean[parents, j], torch.diag(best))
        kl = float(torch.distributions.kl_divergence(q, p))
        for factor in (0.8, 1.25):  # any other factorised variances are worse
            other = torch.distributions.MultivariateNormal(mean[parents, j], torch.diag(best * factor))
            assert float(torch.distributions.kl_divergence(other, p)) > kl
        expected += kl
    assert expected > 1e-3  # the check bites: the weights are correlated
    assert float(model.mean_field_gap(adj)) == pytest.approx(expected, rel=1e-10)
    # one parent per child: nothing lost. 0 in exact arithmetic; in float64 log (V^-1)_11 - log det V^-1 of a 1 x 1 block
    # goes through two routines (log of the diagonal, torch's LU log-determinant) and may differ by an ulp (-4.4e-16 on
    # some machines), so the bound is roundoff of terms of order 1-10, far below the correlated case's 1e-3 above
    assert float(model.mean_field_gap(dag(4, [(0, 1), (1, 2)]))) == pytest.approx(0.0, abs=1e-12)


def test_mean_field_log_prob_is_the_normalised_evidence_lower_bound_of_the_best_factorised_theta():
    exact = ExactPosterior(model_on(d=3, n=30, obs_std=0.3, seed=4, obs_var=0.09))
    model, dags = exact.model, exact.dags
    log_mf = exact.mean_field_log_prob()
    assert float(log_mf.exp().sum()) == pytest.approx(1.0, abs=1e-12)
    # Monte Carlo of E_q[log R - log q] with q the best factorised Gaussian, graph by graph, against log P(G) P(D | G) - gap
    gen = torch.Generator().manual_seed(0)
    n = 4000
    elbo = []
    for adj in dags:
        mean, cov = model.theta_posterior(adj)
        mean = mean.view(3, 3)
        sd = torch.zeros(3, 3, dtype=torch.float64)
        for j in range(3):
            parents = adj[:, j].nonzero()[:, 0]
            if len(parents):
                sd[parents, j] = torch.linalg.inv(cov[j][parents][:, parents]).diagonal().rsqrt()
        theta = mean + sd * torch.randn(n, 3, 3, dtype=torch.float64, generator=gen)
        log_q = torch.distributions.Normal(mean[adj], sd[adj]).log_prob(theta[:, adj]).sum(1)
        w = model.log_reward(adj.expand(n, 3, 3), theta.flatten(1)) - log_q
        elbo.append((float(w.mean()), float(w.std()) / math.sqrt(n)))
    est, se = torch.tensor(elbo, dtype=torch.float64).unbind(1)
    expected = model.log_joint_graph(dags) - model.mean_field_gap(dags)
    assert ((est - expected).abs() < 5 * se + 1e-9).all()  # 5 standard errors; exact (w constant) where q is the posterior
    assert torch.allclose(log_mf, expected - torch.logsumexp(expected, 0), atol=1e-12)
    assert float((exact.log_prob - log_mf).abs().max()) > 1e-3  # the bias is visible on this data
    f, g = exact.features(), exact.mean_field_features()
    assert set(g) == set(f) and not torch.allclose(f["edge"], g["edge"], atol=1e-4)


def test_the_exact_posterior_sums_to_one_where_the_scores_dwarf_log_n():
    """Data in huge units (x 1e12: log-joints of about -1e25, beside which log 3 vanishes in float64): tied graphs share
    the mass, every marginal stays a probability (the plain ``log_w - logsumexp(log_w)`` gave each of 3 ties 1)."""
    data = simulate_er(3, 1.0, 50, 10, seed=0).train * 1e12
    exact = ExactPosterior(LinearGaussian(data))
    assert abs(float(exact.log_prob.exp().sum()) - 1.0) < 1e-12
    edge = exact.features()["edge"]
    assert bool(((edge >= 0) & (edge <= 1 + 1e-12)).all()), edge
