"""The shipped Sachs et al. 2005 data (block recovery, the interventions visible in it, tertiles), interventional
likelihoods against hand computations, intervention files, and the zero-inflated Normal density against a direct one."""
import math

import numpy as np
import pytest
import torch
from scipy import stats

from gflownet_measure.jsp_gfn.bayesnets.cpds import CategoricalMLP, ZeroInflatedMLP, make_model
from gflownet_measure.jsp_gfn.bayesnets.datasets.csv_files import load_data
from gflownet_measure.jsp_gfn.bayesnets.datasets.sachs import (
    BLOCK_SIZES,
    CONDITIONS,
    PROTEINS,
    block_of_rows,
    boundary_jumps,
    consensus_graph,
    discretise,
    load_raw,
    sachs_split,
)
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_zi
from gflownet_measure.jsp_gfn.dag_params import DagParamsConfig, make_problem


@pytest.fixture(scope="module")
def log_raw():
    return np.log(load_raw())


def test_the_shipped_data_and_consensus_graph():
    raw = load_raw()
    assert raw.shape == (7466, 11) and (raw > 0).all() and sum(BLOCK_SIZES) == 7466
    adj = consensus_graph()
    assert adj.sum() == 18 and not adj.diagonal().any()
    assert adj[PROTEINS.index("praf"), PROTEINS.index("pmek")] and adj[PROTEINS.index("pmek"), PROTEINS.index("p44/42")]


def test_the_block_boundaries_are_where_the_medians_jump(log_raw):
    """Each boundary of BLOCK_SIZES, searched for within 60 rows either side by the peak of the median jump: 7 of the 8
    land exactly, the last (PMA -> beta2-cAMP) 3 rows away (measured); a wrong block size would miss by its error."""
    bounds = np.cumsum(BLOCK_SIZES)[:-1]
    found = np.array([c - 60 + int(np.argmax(boundary_jumps(log_raw, np.arange(c - 60, c + 61)))) for c in bounds])
    assert (np.abs(found - bounds) <= 3).all() and (found == bounds).sum() >= 7


def test_the_interventions_are_visible_in_their_blocks(log_raw):
    """Median log intensity of a condition minus that of anti-CD3/CD28 alone (block 1), from the published protocol:
    U0126 blocks MEK, so its substrate p44/42 (ERK) drops (measured -1.7); psitectorigenin inhibits PIP2 (-3.1)."""
    blocks = block_of_rows()
    median = np.stack([np.median(log_raw[blocks == k], 0) for k in range(9)])
    shift = median - median[0]
    keys = [c.key for c in CONDITIONS]
    assert shift[keys.index("u0126"), PROTEINS.index("p44/42")] < -1.0
    assert shift[keys.index("psitect"), PROTEINS.index("PIP2")] < -1.0
    assert np.abs(shift[keys.index("icam2")]).max() < 1.0  # ICAM-2 is a general co-stimulus: no protein moves by e-fold


def test_tertiles_and_the_split():
    split = sachs_split("u0126,ly294002", 600, 3, seed=0)
    assert split.train.shape == (4200, 11) and split.heldout.shape == (1200, 11)
    counts = torch.stack([torch.bincount(split.train[:, j], minlength=3) for j in range(11)])
    assert (counts >= 1350).all() and (counts <= 1450).all()  # tertiles of 4,200 rows: 1,400 each, up to ties at the cuts (intensities have 3 significant digits; measured 1,381 to 1,411)
    assert split.train_interventions.sum(0)[PROTEINS.index("PKC")] == 1200  # G06976 and PMA
    assert split.heldout_interventions.sum(0)[PROTEINS.index("pmek")] == 600 and split.heldout_interventions.sum() == 1200
    with pytest.raises(ValueError, match="leaves state"):
        discretise(np.array([[0.0, 1.0]] * 9 + [[1.0, 2.0]]), n_states=3, names=["a", "b"])
    with pytest.raises(ValueError, match="unknown condition 'foo'"):
        sachs_split("foo")


def _softmax_log(logits, k):
    return logits[k] - math.log(sum(math.exp(v) for v in logits))


def test_the_interventional_likelihood_against_a_hand_computation():
    """d = 2, K = 2, H = 1, G = {0 -> 1}: node 0 has logits W2 relu(b1) + b2, node 1 W2 relu(W1 onehot(x_0) + b1) + b2;
    a row intervening on node 1 drops node 1's term, a row intervening on node 0 drops node 0's."""
    data = torch.tensor([[0, 1], [1, 1], [1, 0]])
    mask = torch.tensor([[False, False], [False, True], [True, False]])
    model = CategoricalMLP(data, hidden=1, n_states=2, interventions=mask)
    assert model.block == 1 * 4 + 1 + 2 + 2
    # node 0's block: W1 (1 x 4; inactive, no parents) | b1 | W2 (2 x 1) | b2 (2); node 1's: W1 reads x_0's one-hot (columns 0, 1)
    theta = torch.tensor([9.0, 9.0, 9.0, 9.0, 0.5, 1.0, -2.0, 0.3, 0.1, 0.7, -0.4, 0.0, 0.0, 0.2, 1.5, -1.0, 0.0, 0.4], dtype=torch.float64)
    adj = torch.tensor([[False, True], [False, False]])
    h0 = max(0.0, 0.5)
    logits0 = [1.0 * h0 + 0.3, -2.0 * h0 + 0.1]

    def logits1(x0):
        h = max(0.0, (0.7 if x0 == 0 else -0.4) + 0.2)
        return [1.5 * h + 0.0, -1.0 * h + 0.4]

    hand = _softmax_log(logits0, 0) + _softmax_log(logits1(0), 1)  # row 0: both terms
    hand += _softmax_log(logits0, 1)  # row 1: node 1 intervened
    hand += _softmax_log(logits1(1), 0)  # row 2: node 0 intervened
    assert model.log_likelihood(adj, theta).item() == pytest.approx(hand, abs=1e-12)
    assert model.log_likelihood(adj, theta, torch.tensor([2])).item() == pytest.approx(3 * _softmax_log(logits1(1), 0), abs=1e-12)  # (N / M) x its row
    observational = CategoricalMLP(data, hidden=1, n_states=2)
    assert observational.log_likelihood(adj, theta).item() < model.log_likelihood(adj, theta).item()  # two more terms, each < 0


def test_interventions_from_a_column_or_a_file(tmp_path):
    rows = "a,b,intervention\n0,1,\n1,0,b\n1,1,none\n0,0,a;b\n"
    (tmp_path / "d.csv").write_text(rows)
    data, names, mask = load_data(tmp_path / "d.csv")
    assert names == ["a", "b"] and data.shape == (4, 2)
    assert mask.tolist() == [[False, False], [False, True], [False, False], [True, True]]
    (tmp_path / "plain.csv").write_text("a,b\n0,1\n1,0\n1,1\n0,0\n")
    (tmp_path / "i.csv").write_text("a,b\n0,0\n0,1\n0,0\n1,1\n")
    assert load_data(tmp_path / "plain.csv", str(tmp_path / "i.csv"))[2].tolist() == mask.tolist()
    (tmp_path / "bad.csv").write_text("a,b,intervention\n0,1,c\n1,0,\n")
    with pytest.raises(ValueError, match="unknown target 'c' at data row 1"):
        load_data(tmp_path / "bad.csv")


def test_the_linear_gaussian_posterior_under_interventions_reads_only_the_observed_rows():
    """Perfect interventions in the linear-Gaussian model: node j's closed-form marginal log N(x_{O_j, j}; 0, sigma^2 I +
    sigma_0^2 X_{O_j, P} X_{O_j, P}^T) (JSP-GFN eq. D.24 on the rows O_j that do not intervene on j), computed here
    directly with scipy, equals the model's, and a model without interventions differs from it (float64: 1e-9)."""
    from scipy.stats import multivariate_normal

    x = torch.randn(9, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    mask = torch.zeros(9, 3, dtype=torch.bool)
    mask[:3, 2] = True  # rows 0-2 intervene on node 2
    mask[5, 0] = True
    model = make_model("lingauss", x, obs_var=0.2, prior_var=1.5, interventions=mask)
    for node, parents in ((2, (0, 1)), (0, (1,)), (1, ())):
        rows = ~mask[:, node]
        xp = x[rows][:, list(parents)].numpy()
        cov = 0.2 * np.eye(int(rows.sum())) + 1.5 * xp @ xp.T
        direct = multivariate_normal(np.zeros(len(cov)), cov).logpdf(x[rows, node].numpy())
        assert model.local_log_marginal(node, parents) == pytest.approx(direct, abs=1e-9)
    assert make_model("lingauss", x, obs_var=0.2, prior_var=1.5).local_log_marginal(2, (0, 1)) != pytest.approx(model.local_log_marginal(2, (0, 1)), abs=1e-3)


def test_the_zero_inflated_density_against_a_direct_one():
    """log f = log alpha at an exact zero, log(1 - alpha) + log N(x; MLP(x), sigma^2) elsewhere (reference delta_0 + Lebesgue)."""
    sim = simulate_zi(3, 1.0, 40, 0, alpha=0.3, obs_std=0.5, seed=1, hidden=4)
    x = sim.train
    assert 0.15 < (x == 0).double().mean() < 0.45  # 120 Bernoulli(0.3) dropouts: 0.3 +- 3 SE (0.042)
    model = ZeroInflatedMLP(x, hidden=4)
    assert model.block == (3 + 2) * 4 + 3
    theta = torch.randn(model.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    blocks = torch.where(model.active(sim.adj), theta, 0.0).view(3, model.block)
    direct = 0.0
    for n in range(len(x)):
        for j in range(3):
            w1, b1 = blocks[j, :12].view(4, 3), blocks[j, 12:16]
            w2, b2, a, s = blocks[j, 16:20], blocks[j, 20], blocks[j, 21], blocks[j, 22]
            mean = float(w2 @ torch.relu(w1 @ x[n] + b1) + b2)
            alpha = 1 / (1 + math.exp(-float(a)))
            v = float(x[n, j])
            direct += math.log(alpha) if v == 0 else math.log(1 - alpha) + stats.norm.logpdf(v, mean, math.exp(float(s)))
    assert model.log_likelihood(sim.adj, theta).item() == pytest.approx(direct, rel=1e-10)
    assert model.log_likelihood(sim.adj, sim.theta).item() > model.log_likelihood(sim.adj, theta).item()  # the true parameters fit better


def test_sachs_problem_and_bad_input(tmp_path):
    problem = make_problem(DagParamsConfig(data="sachs", model="categorical-mlp", sachs_rows=100, subsample=300))
    assert problem.model.n == 300 and problem.model.n_params == 6545 and problem.heldout.n == 200 and problem.true_adj.sum() == 18
    (tmp_path / "real.csv").write_text("a,b\n0.5,1\n1,0\n")
    with pytest.raises(ValueError, match="integer states"):
        make_problem(DagParamsConfig(data=str(tmp_path / "real.csv"), model="categorical-mlp"))
    assert make_problem(DagParamsConfig(data=str(tmp_path / "real.csv"), model="categorical-mlp", bins=2)).model.data.tolist() == [[0, 1], [1, 0]]
