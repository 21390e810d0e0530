"""The solver head of JSP-GFN (:mod:`gflownet_measure.jsp_gfn.dag_params.solver`), the models' derivatives in theta it reads, and the
path-wise length-2 penalty of eq. C.21.

- The solver's mean is the exact conditional posterior mean of a linear-Gaussian model (JSP-GFN eq. D.24), and at
  initialisation its scale the mean-field one, :math:`1/\\Lambda_{pp}`.
- Closed-form curvature products equal autograd's (linear: the exact Hessian; MLPs: the Gauss-Newton matrix built from
  the outputs' Jacobian), with interventions and on a mini-batch of rows.
- The head's density is a density: ``check_graph`` passes with it (eq. 15-16 included).
- The penalty's gradient in the network's weights matches central finite differences.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from conftest import random_jsp_policies
from gflownet_measure.checks import check_graph
from gflownet_measure.environments import dag_params as dp
from gflownet_measure.jsp_gfn.bayesnets.cpds import CategoricalMLP, MLPGaussian, ZeroInflatedMLP
from gflownet_measure.jsp_gfn.bayesnets.dags import enumerate_dags
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er, simulate_mlp, simulate_zi
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.dag_params.objective import _sampled_terms
from gflownet_measure.jsp_gfn.dag_params.solver import refine_mean

pytestmark = pytest.mark.usefixtures("one_thread")


def _graphs(d: int, n: int, seed: int) -> torch.Tensor:
    """``n`` DAGs on ``d <= 5`` nodes drawn uniformly (with replacement) from the enumeration, ``[n, d, d]`` bool."""
    dags = enumerate_dags(d)
    return dags[torch.randint(len(dags), (n,), generator=torch.Generator().manual_seed(seed))]


def _models(d: int = 4):
    """One model of each kind on small simulated data, with interventions on some rows."""
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(30, d, generator=g) < 0.2
    lin = simulate_er(d, 1.0, 30, 0, seed=1).train
    mlp = simulate_mlp(d, 1.0, 30, 0, seed=1, hidden=3).train
    zi = simulate_zi(d, 1.0, 30, 0, seed=1, hidden=3).train
    cat = torch.randint(0, 3, (30, d), generator=g)
    return {
        "lingauss": LinearGaussian(lin, interventions=mask),
        "mlp": MLPGaussian(mlp, hidden=3, interventions=mask),
        "zi-mlp": ZeroInflatedMLP(zi, hidden=3, interventions=mask),
        "categorical-mlp": CategoricalMLP(cat, hidden=3, interventions=mask),
    }


def test_solver_mean_is_the_exact_conditional_posterior_mean_of_a_linear_model():
    """Linear CG per node block on a quadratic reaches the maximiser in as many steps as the block has weights: d - 1 = 4
    steps at d = 5 in float64, so the tolerance (1e-8 relative to the mean's size) is rounding, not convergence."""
    model = LinearGaussian(simulate_er(5, 1.0, 50, 0, seed=2).train, prior_var=0.5)
    adj = _graphs(5, 16, 0)
    start = torch.randn(16, 25, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) * model.active(adj)
    groups = torch.arange(25) % 5  # theta[i d + j] belongs to node j
    mean = refine_mean(lambda x: model.log_reward_and_grad(adj, x), lambda x, v: model.log_reward_hvp(adj, x, v), model.curvature(adj, start), start, 4, groups)
    exact = torch.stack([model.theta_posterior(a)[0] for a in adj])
    assert (mean - exact).abs().max() <= 1e-8 * (1 + exact.abs().max())
    assert (mean[~model.active(adj)] == 0).all()


def test_solver_head_starts_at_the_mean_field_optimum_of_a_linear_model():
    """At initialisation (rho = 0) the head's mean is the posterior mean and its variances 1 / Lambda_pp, the best
    factorised Gaussian; the float32 network output bounds the agreement (1e-4 relative)."""
    cfg = dp.DagParamsConfig(d=4, hidden=8, theta_head="solver", solver_steps=30)
    problem = dp.make_problem(cfg)
    pf, _ = dp.make_policies(dp.make_graph(cfg, problem), cfg, problem)
    model, adj = problem.model, _graphs(4, 8, 1)
    out = pf.network(adj.float())
    for b in range(len(adj)):
        mean, cov = model.theta_posterior(adj[b])
        on = model.active(adj[b])
        assert torch.allclose(out.theta.mean[b].double()[on], mean[on], rtol=1e-4, atol=1e-4)
        block = model.block_index()
        for j in range(4):
            pa = adj[b][:, j].nonzero()[:, 0]
            if len(pa):
                prec = torch.linalg.inv(cov[j][pa][:, pa])
                assert torch.allclose(out.theta.scale[b, block[j, pa]].double(), prec.diagonal().rsqrt(), rtol=1e-4)


@pytest.mark.parametrize("name", ["lingauss", "mlp", "zi-mlp", "categorical-mlp"])
@pytest.mark.parametrize("rows", [None, torch.tensor([0, 3, 4, 7, 11, 20])])
def test_curvature_products_match_autograd(name, rows):
    """Linear: the closed-form product is the exact Hessian's (autograd's double backward). MLPs: the product and the
    diagonal are the Gauss-Newton matrix's, J^T F J + I / sigma_0^2, with J the outputs' Jacobian (autograd) and F the
    Fisher information written out per model below. Float64 throughout: agreement to 1e-8 relative."""
    model = _models()[name]
    adj = _graphs(4, 3, 5)
    g = torch.Generator().manual_seed(7)
    theta = torch.randn(3, model.n_params, dtype=torch.float64, generator=g) * model.active(adj)
    v = torch.randn(3, model.n_params, dtype=torch.float64, generator=g)
    on = model.active(adj)
    hv = model.log_reward_hvp(adj, theta, v, rows)
    diag = model.curvature(adj, theta, rows)
    for b in range(3):
        if name == "lingauss":
            H = -torch.autograd.functional.hessian(lambda t: model.log_reward(adj[b], t, rows), theta[b])
        else:
            H = _gauss_newton(model, adj[b], theta[b], rows) + torch.diag(on[b].double() / model.prior_var)
        H = H * on[b][:, None] * on[b][None, :]
        scale = 1 + H.abs().max()
        assert torch.allclose(hv[b], H @ (v[b] * on[b]), atol=1e-8 * scale)
        assert torch.allclose(diag[b][on[b]], H.diagonal()[on[b]], atol=1e-8 * scale)


def _gauss_newton(model, adj, theta, rows):
    """:math:`\\sum_n J_n^\\top F_n J_n` from autograd's Jacobian of the CPD outputs (and the per-node extras), ``[P, P]``."""
    x, scale = model._rows(rows)
    w = (~model.interventions[rows if rows is not None else slice(None)]).double()  # [M, d]

    def outputs(t):
        return model._outputs(adj, t, x)  # [M, d, O]

    J = torch.autograd.functional.jacobian(outputs, theta)  # [M, d, O, P]
    out = outputs(theta)
    if isinstance(model, CategoricalMLP):
        p = out.softmax(-1)
        F = torch.diag_embed(p) - p[..., :, None] * p[..., None, :]  # [M, d, K, K]
    elif isinstance(model, ZeroInflatedMLP):
        s = model._extras(theta)[..., 1]
        F = ((x != 0).double() * (-2 * s).exp())[..., None, None]
    else:
        F = torch.full(out.shape + (1,), 1.0 / model.obs_var, dtype=torch.float64)
    G = torch.einsum("mjop,mjoq,mjqr->pr", J, F * w[..., None, None], J)
    if isinstance(model, ZeroInflatedMLP):  # the extras a_j, s_j by their Fisher diagonal
        a = model._extras(theta)[..., 0]
        alpha = torch.sigmoid(a)
        block = model.block
        for j in range(model.d):
            G[j * block + block - 2, j * block + block - 2] += (alpha[j] * (1 - alpha[j]) * w[:, j]).sum()
            G[j * block + block - 1, j * block + block - 1] += (2 * (x[:, j] != 0).double() * w[:, j]).sum()
    return G * scale


@pytest.mark.slow
def test_check_graph_passes_with_the_solver_head():
    """The solver head's P_phi(theta | G) is a density on Theta_G: Definition 1 and eq. 15-16 pass at d = 3 with its
    weights randomised (the checks' own tolerances: exact on atoms, Monte Carlo with 5 standard errors on Theta_G; 128
    nodes per piece as in test_dag_space's check of the amortised head)."""
    _, graph, pf, pb = random_jsp_policies(dp.DagParamsConfig(d=3, hidden=8, theta_head="solver", solver_steps=3))
    report = check_graph(graph, pf, pb, n=128, n_functions=4)
    assert report.passed, str(report)


def test_solver_head_reads_fixed_rows():
    cfg = dp.DagParamsConfig(d=3, n_data=40, solver_rows=10, theta_head="solver")
    rows = dp.solver_rows(cfg, 40)
    assert torch.equal(rows, dp.solver_rows(cfg, 40)) and len(rows.unique()) == 10
    assert dp.solver_rows(dp.DagParamsConfig(d=3, solver_rows=0), 40) is None


@pytest.mark.slow
def test_full_solver_head_starts_at_the_exact_conditional_posterior():
    """lingauss-full with the solver head: at initialisation P_phi(theta | G) is N(m_j, V_j) of eq. D.24 per node, mean and
    covariance (float32 network outputs: 1e-4 relative), and check_graph passes with its weights randomised."""
    cfg = dp.DagParamsConfig(d=3, hidden=8, model="lingauss-full", theta_head="solver", solver_steps=2)
    problem = dp.make_problem(cfg)
    graph = dp.make_graph(cfg, problem)
    pf, pb = dp.make_policies(graph, cfg, problem)
    model, adj = problem.model, enumerate_dags(3)
    theta = pf.network(adj.float()).theta
    for b in range(len(adj)):
        mean, cov = model.theta_posterior(adj[b])
        on = model.active(adj[b])
        assert torch.allclose(theta.mean[b].double()[on], mean[on], rtol=1e-4, atol=1e-5)
        got = theta.covariance_matrix[b].double()
        for j in range(3):
            pa = adj[b][:, j].nonzero()[:, 0]
            idx = pa * 3 + j
            assert torch.allclose(got[idx][:, idx], cov[j][pa][:, pa], rtol=1e-3, atol=1e-7)
    torch.manual_seed(0)
    for p in pf.network.parameters():
        nn.init.normal_(p, std=0.3)
    report = check_graph(graph, pf, pb, n=128, n_functions=4)
    assert report.passed, str(report)


@pytest.mark.parametrize("head", ["amortised", "solver"])
def test_path_wise_penalty_gradient_matches_finite_differences(head):
    """d pen(G) / d phi by autograd (through theta = mu + sigma eps and through the density) against central differences
    with the same eps, on a float64 network, in the biases of the head's last layer: all of them for the amortised head,
    the scale half for the solver head (its mean passes the gradient to mu_0 straight through, by design, where finite
    differences see the solver's own dependence on mu_0). The step 1e-6 leaves a truncation error near 1e-10: tolerance
    1e-5 relative."""
    cfg = dp.DagParamsConfig(d=3, hidden=8, theta_head=head, solver_steps=2)
    problem = dp.make_problem(cfg)
    pf, _ = dp.make_policies(dp.make_graph(cfg, problem), cfg, problem)
    pf.network.double()
    torch.manual_seed(1)
    for p in pf.network.parameters():
        nn.init.normal_(p, std=0.3)
    adj = _graphs(3, 4, 2).double()
    model = problem.model

    def penalty() -> torch.Tensor:
        torch.manual_seed(5)  # the same eps at every evaluation
        out = pf.network(adj)
        return _sampled_terms(lambda a, t: model.log_reward(a > 0, t), out, adj > 0, torch.zeros(4, dtype=torch.float64), 3, True)[2].sum()

    weight = pf.network.theta_head.base.net[-1].bias if head == "solver" else pf.network.theta_head.net[-1].bias
    (grad,) = torch.autograd.grad(penalty(), weight)
    checked = range(len(weight)) if head == "amortised" else range(len(weight) // 2, len(weight))
    numeric = torch.zeros_like(weight)
    for k in checked:  # the penalty differentiates in theta inside: evaluated with autograd on, weights moved in place
        weight.data[k] += 1e-6
        up = penalty().detach()
        weight.data[k] -= 2e-6
        down = penalty().detach()
        weight.data[k] += 1e-6
        numeric[k] = (up - down) / 2e-6
    grad, numeric = grad[list(checked)], numeric[list(checked)]
    assert grad.abs().max() > 0
    assert torch.allclose(grad, numeric, rtol=1e-5, atol=1e-5 * float(numeric.abs().max()))
