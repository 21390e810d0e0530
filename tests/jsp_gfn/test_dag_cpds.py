"""The CPD models behind one interface (gflownet_measure/jsp_gfn/bayesnets/cpds.py, cpd_base.py; docs/cpd_models.md): parameter
counts and layouts, likelihoods against loops over rows and nodes, inactive coordinates, mini-batches and their
gradients, the parameter prior, simulated nonlinear data, one-line errors, and the worked example of the docs.

Tolerances: every value is float64 and compared with the same quantity summed in another order, so the bound is a
few hundred ulps of the largest term (rel 1e-10 on sums of ~10^3 terms; the linear Gram form cancels terms about
1e3 times larger than its result, whence 1e-9 there)."""
import math
import re
from pathlib import Path

import pytest
import torch
from scipy import integrate

from conftest import dag
from gflownet_measure.jsp_gfn.bayesnets.cpd_base import CPDModel
from gflownet_measure.jsp_gfn.bayesnets.cpds import CPD_MODELS, CategoricalMLP, MLPGaussian, ZeroInflatedMLP, make_model, mlp_outputs
from gflownet_measure.jsp_gfn.bayesnets.dags import transitive_closure
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er, simulate_mlp
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

pytestmark = pytest.mark.usefixtures("one_thread")

DOC = Path(__file__).resolve().parents[2] / "docs" / "cpd_models.md"


def _doc_example() -> type:
    """The class of the worked example in docs/cpd_models.md, 'How to plug in a new CPD model' (its one python block)."""
    section = DOC.read_text().split("## How to plug in a new CPD model", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section, re.S)
    namespace: dict = {}
    exec(compile(code, str(DOC), "exec"), namespace)
    return namespace["BiasedLinearGaussian"]


def _continuous(n=12, d=4, seed=0):
    return simulate_mlp(d, 1.0, n, 0, obs_std=0.3, seed=seed).train


def _categorical(n=12, d=4, k=3, seed=0):
    return torch.randint(0, k, (n, d), generator=torch.Generator().manual_seed(seed))


# every model on a small data set: (name, factory)
MODELS = {
    "lingauss": lambda: LinearGaussian(_continuous(), obs_var=0.09, prior_var=2.0),
    "mlp": lambda: MLPGaussian(_continuous(), obs_var=0.09, prior_var=2.0, hidden=3),
    "categorical-mlp": lambda: CategoricalMLP(_categorical(), prior_var=2.0, hidden=4),
    "zi-mlp": lambda: ZeroInflatedMLP(torch.where(_continuous() > 0.5, 0.0, _continuous()), prior_var=2.0, hidden=3),
    "lingauss-interventions": lambda: LinearGaussian(_continuous(), obs_var=0.09, prior_var=2.0, interventions=_categorical(k=2, seed=5).bool()),
    "categorical-interventions": lambda: CategoricalMLP(_categorical(), prior_var=2.0, hidden=4, interventions=_categorical(k=2, seed=5).bool()),
    "doc-example": lambda: _doc_example()(_continuous(), obs_var=0.09, prior_var=2.0),
}
ADJ = dag(4, [(0, 1), (0, 2), (1, 2), (3, 2)])  # node 2 has three parents, node 3 none


def _theta(model, *shape, seed=0) -> torch.Tensor:
    return torch.randn(*shape, model.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


# ---------------------------------------------------------------- layout


def test_parameter_counts():
    assert MLPGaussian(torch.randn(3, 20, dtype=torch.float64)).n_params == 2220  # d (5d + 11), JSP-GFN section 5.2
    cat = CategoricalMLP(torch.randint(0, 3, (5, 11)))
    assert cat.n_states == 3 and cat.n_params == 6545  # d (16 dK + 16 + 16K + K), d = 11, K = 3
    assert LinearGaussian(torch.randn(3, 6, dtype=torch.float64)).n_params == 36
    assert CategoricalMLP(torch.zeros(4, 2)).n_states == 2  # at least two states


@pytest.mark.parametrize("name", MODELS)
def test_interface_and_block_index(name):
    model = MODELS[name]()
    assert isinstance(model, CPDModel) and model.kind in ("continuous", "categorical")
    index = model.block_index()
    assert index.shape == (model.d, model.block) and index.dtype == torch.long
    assert torch.equal(index.flatten().sort().values, torch.arange(model.n_params))  # disjoint blocks covering 0..P-1
    # node j's active pattern follows its own parents only: changing column j of adj changes block j only
    base, other = model.active(ADJ), model.active(ADJ.clone().index_put_((torch.tensor(3), torch.tensor(1)), torch.tensor(True)))
    changed = (base != other).nonzero()[:, 0]
    assert len(changed) and torch.isin(changed, index[1]).all()
    assert model.active(ADJ[None].expand(2, 3, 4, 4)).shape == (2, 3, model.n_params)


def test_linear_layout_is_row_major():
    model = MODELS["lingauss"]()
    assert model.block_index()[2].tolist() == [2, 6, 10, 14]  # column 2: i * d + 2
    assert torch.equal(model.active(ADJ), ADJ.flatten())


# ---------------------------------------------------------------- likelihoods by hand


def _log_normal(x, mean, var):
    return -0.5 * (x - mean) ** 2 / var - 0.5 * math.log(2 * math.pi * var)


def _by_hand(name, model, theta) -> float:
    """log P(D | G, theta) with a loop over rows and nodes, reading the blocks by their documented layout."""
    d, x, total = model.d, model.data, 0.0
    for j in range(d):
        parents = ADJ[:, j]
        if name.startswith("lingauss"):
            w = torch.tensor([float(theta[i * d + j]) if parents[i] else 0.0 for i in range(d)], dtype=torch.float64)
        else:
            blk = theta[j * model.block:(j + 1) * model.block]
        for n in range(model.n):
            if getattr(model, "interventions", None) is not None and model.interventions[n, j]:
                continue  # a perfect intervention on node j drops its term from row n
            if name.startswith("lingauss"):
                total += _log_normal(float(x[n, j]), float(w @ x[n]), model.obs_var)
            elif name == "doc-example":
                total += _log_normal(float(x[n, j]), float((blk[:d] * parents) @ x[n] + blk[d]), model.obs_var)
            else:
                categorical = model.kind == "categorical"
                H, k = model.hidden, (model.n_states if categorical else 1)
                e = torch.nn.functional.one_hot(x[n], k).flatten().double() if categorical else x[n]
                w1 = blk[:H * d * k].view(H, d, k) * parents[None, :, None]  # columns of non-parents masked
                b1, w2 = blk[H * d * k:H * d * k + H], blk[H * d * k + H:H * d * k + H + k * H].view(k, H)
                b2 = blk[H * d * k + H + k * H:H * d * k + H + k * H + k]
                out = w2 @ torch.relu(w1.reshape(H, d * k) @ e + b1) + b2
                if name == "mlp":
                    total += _log_normal(float(x[n, j]), float(out[0]), model.obs_var)
                elif name == "zi-mlp":  # alpha = sigmoid(a), sigma = exp(s): the last two entries of the block
                    alpha, var = 1 / (1 + math.exp(-float(blk[-2]))), math.exp(2 * float(blk[-1]))
                    v = float(x[n, j])
                    total += math.log(alpha) if v == 0 else math.log(1 - alpha) + _log_normal(v, float(out[0]), var)
                else:
                    total += float(out.log_softmax(0)[x[n, j]])
    return total


@pytest.mark.parametrize("name", MODELS)
def test_log_likelihood_against_loops(name):
    model = MODELS[name]()
    theta = _theta(model)
    assert float(model.log_likelihood(ADJ, theta)) == pytest.approx(_by_hand(name, model, theta), rel=1e-10)


@pytest.mark.parametrize("name", MODELS)
def test_broadcasting_samples_against_graphs(name):
    model = MODELS[name]()
    adj = torch.stack([ADJ, dag(4, [(2, 3)]), dag(4, [])])  # [B = 3]
    theta = _theta(model, 2, 3)  # [S = 2, B = 3, P]
    ll, reward = model.log_likelihood(adj, theta), model.log_reward(adj, theta)
    assert ll.shape == reward.shape == (2, 3) and ll.dtype == torch.float64
    for s in range(2):
        for b in range(3):
            assert float(ll[s, b]) == pytest.approx(float(model.log_likelihood(adj[b], theta[s, b])), rel=1e-12)
            assert float(reward[s, b]) == pytest.approx(float(model.log_reward(adj[b], theta[s, b])), rel=1e-12)
    assert model.log_likelihood(adj, theta.float()).dtype == torch.float32  # theta's dtype out, float64 inside


@pytest.mark.parametrize("name", MODELS)
def test_inactive_coordinates_have_no_effect(name):
    model = MODELS[name]()
    theta = _theta(model)
    inactive = ~model.active(ADJ)
    assert inactive.any()
    for filler in (torch.randn(model.n_params, dtype=torch.float64) * 100, torch.full((model.n_params,), math.nan, dtype=torch.float64)):
        other = torch.where(inactive, filler, theta).requires_grad_(True)
        reward = model.log_reward(ADJ, other)
        assert reward.item() == model.log_reward(ADJ, theta).item()  # bit for bit: the inactive entries are never read
        (grad,) = torch.autograd.grad(reward, other)
        assert torch.isfinite(grad).all() and (grad[inactive] == 0).all()


# ---------------------------------------------------------------- mini-batches (JSP-GFN eq. 13)


@pytest.mark.parametrize("name", MODELS)
def test_minibatches_of_a_partition_average_to_the_full_data_value_and_gradient(name):
    """N = 12 rows in 4 disjoint batches of M = 3: the mean of the (N / M)-scaled estimates is the full sum, and so is
    the mean of their gradients (the estimate is linear in the per-row terms)."""
    model = MODELS[name]()
    theta = (_theta(model) * 0.5).requires_grad_(True)
    full = model.log_likelihood(ADJ, theta)
    (full_grad,) = torch.autograd.grad(full, theta)
    perm = torch.randperm(model.n, generator=torch.Generator().manual_seed(1))
    estimates = torch.stack([model.log_likelihood(ADJ, theta, rows=perm[b * 3:(b + 1) * 3]) for b in range(4)])
    mean = estimates.mean()
    (mean_grad,) = torch.autograd.grad(mean, theta)
    estimates, mean, full = estimates.detach(), mean.item(), full.item()
    assert float(estimates.std()) > 1e-3 * abs(full)  # the batches differ: the check bites
    assert mean == pytest.approx(full, rel=1e-9)
    assert torch.allclose(mean_grad, full_grad, rtol=1e-9, atol=1e-9 * float(full_grad.abs().max()))
    with torch.no_grad():
        assert model.log_reward(ADJ, theta, rows=perm).item() == pytest.approx(model.log_reward(ADJ, theta).item(), rel=1e-9)


# ---------------------------------------------------------------- the parameter prior


@pytest.mark.parametrize("name", MODELS)
def test_log_prior_theta_is_the_normal_on_the_active_coordinates(name):
    model = MODELS[name]()
    theta = _theta(model)
    active = model.active(ADJ)
    expected = torch.distributions.Normal(torch.tensor(0.0, dtype=torch.float64), math.sqrt(2.0)).log_prob(theta[active]).sum()
    assert float(model.log_prior_theta(ADJ, theta)) == pytest.approx(float(expected), rel=1e-12)


def test_log_prior_theta_integrates_to_one_on_a_one_edge_graph():
    model = LinearGaussian(torch.randn(5, 2, dtype=torch.float64), prior_var=2.0)
    adj = dag(2, [(0, 1)])

    def density(t):
        theta = torch.tensor([0.0, t, 0.0, 0.0], dtype=torch.float64)  # the edge 0 -> 1 at flat index 0 * 2 + 1
        return math.exp(float(model.log_prior_theta(adj, theta)))

    total, _ = integrate.quad(density, -math.inf, math.inf, epsabs=0, epsrel=1e-12)
    assert total == pytest.approx(1.0, rel=1e-10)  # quad's error ~1e-12 on a smooth Gaussian
    assert float(model.log_prior_theta(dag(2, []), torch.randn(4, dtype=torch.float64))) == 0.0  # Theta_G is a point


# ---------------------------------------------------------------- simulated nonlinear data


def test_simulate_mlp_is_seeded_acyclic_finite_and_has_the_noise_variance():
    a, b, c = (simulate_mlp(6, 1.0, 40, 10, seed=s) for s in (3, 3, 4))
    assert torch.equal(a.train, b.train) and torch.equal(a.valid, b.valid) and torch.equal(a.theta, b.theta) and torch.equal(a.adj, b.adj)
    assert not torch.equal(a.train, c.train)
    assert a.train.shape == (40, 6) and a.valid.shape == (10, 6) and a.theta.shape == (6 * 41,) and a.names[0] == "x0"
    assert torch.equal(a.adj, simulate_er(6, 1.0, 40, 10, seed=3).adj)  # the same Erdos-Renyi draw as the linear data
    big = simulate_mlp(6, 1.0, 20000, 0, obs_std=0.1, seed=5)
    reach = transitive_closure(big.adj)
    assert big.adj.any() and not (reach & reach.T & ~torch.eye(6, dtype=torch.bool)).any()
    assert torch.isfinite(big.train).all()
    model = MLPGaussian(big.train)
    assert (big.theta[~model.active(big.adj)] == 0).all()
    resid = big.train - mlp_outputs(big.theta.view(6, model.block), big.train, 5, 1)[..., 0]
    assert ((resid.var(0) / 0.01 - 1).abs() < 0.05).all()  # sample variance of 20000 normals: relative SE 1%, 5 SE


# ---------------------------------------------------------------- factory and errors


def test_make_model_builds_every_registered_model():
    cont, cat = _continuous(), _categorical()
    for name, cls in CPD_MODELS.items():
        model = make_model(name, cat if cls.kind == "categorical" else cont, 0.04, 3.0, "erdos_renyi", 1.0)
        assert type(model) is cls and model.prior_var == 3.0 and model.log_edge_odds != 0.0
        assert not hasattr(model, "obs_var") or model.obs_var == 0.04  # a categorical or zero-inflated model has no fixed noise variance
    assert make_model("mlp", cont, hidden=7).hidden == 7
    assert make_model("lingauss", cat.double()).kind == "continuous"  # data that look categorical: allowed


@pytest.mark.parametrize("call, message", [
    (lambda: make_model("probit", _continuous()), r"unknown CPD model 'probit'; choose one of \('lingauss', 'mlp', 'categorical-mlp', 'zi-mlp'\)"),
    (lambda: make_model("lingauss", _continuous(), hidden=3), r"'lingauss' takes no option \['hidden'\]"),
    (lambda: make_model("categorical-mlp", _continuous()), "data must be integer states"),
    (lambda: CategoricalMLP(-_categorical() - 1), "data must be integer states"),
    (lambda: CategoricalMLP(_categorical(k=3), n_states=2), "n_states must be an integer >= 2 above the largest state"),
    (lambda: MLPGaussian(_continuous(), hidden=0), "hidden must be an integer >= 1"),
    (lambda: MLPGaussian(_continuous(), obs_var=0.0), "obs_var must be finite and > 0"),
    (lambda: MLPGaussian(_continuous(), graph_prior="dense"), "graph_prior must be one of"),
    (lambda: MODELS["mlp"]().log_likelihood(ADJ, torch.zeros(5), rows=torch.arange(13)), r"1 <= M <= N = 12 rows; got M = 13"),
    (lambda: MODELS["mlp"]().log_likelihood(ADJ, torch.zeros(MODELS["mlp"]().n_params), rows=torch.zeros(2, 2, dtype=torch.long)), "rows must be a 1-d long tensor"),
    (lambda: MODELS["categorical-mlp"]().log_reward(ADJ, torch.zeros(5)), r"theta must be flat \[\.\.\., 268\]"),
    (lambda: MODELS["lingauss"]().log_reward(ADJ, torch.zeros(4, 4)), r"theta must be flat \[\.\.\., 16\]"),
    (lambda: MODELS["mlp"]().active(torch.zeros(3, 3, dtype=torch.bool)), r"adj must be \[\.\.\., 4, 4\]"),
    (lambda: simulate_mlp(0, 1.0, 10, 0), "simulate_mlp: need integers d >= 1"),
    (lambda: simulate_mlp(3, 1.0, 10, 0, hidden=0), "simulate_mlp: hidden must be an integer >= 1"),
])
def test_errors_are_one_line_value_errors(call, message):
    with pytest.raises(ValueError, match=message) as info:
        call()
    assert "\n" not in str(info.value)
