"""MLPPolicy options: a torso shared between P_F and P_B (tied), free parameters at the source, kernel mismatch."""
import pytest
import torch

from environments import hypergrid
from gflownet_measure.objectives import GFlowNet
from gflownet_measure.policies import MLPPolicy
from gflownet_measure.training import make_optimizer

CFG = {k: s.default for k, s in hypergrid.SETTINGS.items()} | {"height": 4}


@pytest.fixture
def graph():
    return hypergrid.make_graph(CFG)


def test_shared_torso_is_trained_once_by_both_policies(graph):
    torch.manual_seed(0)
    pf = MLPPolicy(graph.kappa, graph.encode, 8, 3, hidden=16, n_layers=2)
    pb = MLPPolicy(graph.kappa_b, graph.encode, 8, 2, shared_torso=pf.torso)
    gfn = GFlowNet(pf, pb)
    names = [n for n, _ in gfn.named_parameters()]
    assert not any(n.startswith("pb.torso") for n in names)  # listed once, under P_F
    opt = make_optimizer(gfn, 1e-3, 1e-1)  # Adam refuses a parameter in two groups
    assert sum(len(g["params"]) for g in opt.param_groups) == len(names)
    s = torch.tensor([[1.0, 2.0], [3.0, 1.0]])
    pb(s).log_prob(s - torch.tensor([[1.0, 0.0], [1.0, 0.0]]), torch.zeros(2, dtype=torch.bool)).sum().backward()
    assert pf.torso[0].weight.grad is not None and pf.out.weight.grad is None  # P_B's loss reaches the shared torso only


def test_free_parameters_at_the_source(graph):
    torch.manual_seed(0)
    pf = MLPPolicy(graph.kappa, graph.encode, 8, 3, hidden=16, n_layers=2, source=graph.source)
    s = torch.tensor([[0.0, 0.0], [1.0, 2.0]])
    before = pf(s).log_probs.clone()
    assert torch.allclose(before[0], torch.full((3,), -torch.log(torch.tensor(3.0))))  # zero-initialised: uniform at s0
    with torch.no_grad():
        pf.source_out[0] = 2.0
        pf.torso[0].weight.add_(1.0)
    after = pf(s).log_probs
    assert after[0, 0] > before[0, 0]  # s0 follows its own parameters
    assert torch.allclose(after[0], torch.log_softmax(torch.tensor([2.0, 0.0, 0.0]), 0))  # and not the network
    assert not torch.allclose(after[1], before[1])  # other states follow the network


def test_policy_that_does_not_fit_its_kernel_is_a_clear_error(graph):
    pf = MLPPolicy(graph.kappa, graph.encode, 8, 2)  # the forward kernel has 3 atom slots (2 moves + sink)
    with pytest.raises(ValueError, match="2 atom logits and 0 heads, but its kernel returns 3 atom slots"):
        pf(torch.zeros(1, 2))


def test_the_density_of_a_draw_is_the_density_at_its_point():
    """``log_prob_of(draw)`` (no locating) equals ``log_prob(x)`` (locate, then invert the chart) on a space
    with atoms and two kinds of charted pieces, with and without uniform exploration."""
    from environments import quarter_disc
    from gflownet_measure.config import resolve
    from gflownet_measure.rollout import sample_forward

    torch.manual_seed(0)
    cfg = resolve(quarter_disc.SETTINGS, {})
    g = quarter_disc.make_graph(cfg)
    pf, _ = quarter_disc.make_policies(g, cfg, hidden=16, n_layers=1)
    s = sample_forward(g, pf, 256).states[:3].flatten(0, 1)
    s = s[~g.kappa(s).is_zero()]
    with torch.no_grad():
        d = pf(s)
        for eps in (0.0, 0.5):
            x, sink, drawn = d.draw(eps)
            assert torch.allclose(d.log_prob_of(drawn), d.log_prob(x, sink), atol=3e-5)  # two float32 paths to one density: 6e-6 apart measured


def test_gumbel_max_draws_the_softmax_and_never_an_absent_component():
    """50,000 Gumbel-max draws per row against softmax(logits): a chi-square test at p > 1e-3 (a correct sampler fails
    one seed in a thousand); the -inf logit (an absent component) is never drawn; sample shapes lead."""
    from scipy import stats

    from gflownet_measure.policies import gumbel_max

    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, float("-inf"), 2.0], [3.0, float("-inf"), 0.0, -1.0]])
    j = gumbel_max(logits.expand(50000, -1, -1))
    assert j.shape == (50000, 2)
    for row in range(2):
        counts = torch.bincount(j[:, row], minlength=4)
        p = torch.softmax(logits[row].double(), 0)
        assert counts[p == 0].sum() == 0
        present = p > 0
        assert stats.chisquare(counts[present].numpy(), (50000 * p[present]).double().numpy()).pvalue > 1e-3


def test_gumbel_max_never_draws_an_absent_component_even_when_a_uniform_is_zero(monkeypatch):
    """torch.rand can return exactly 0 (about once in 2^24 float32 draws; a T = 100 SDE run of 1,500 batches of 300 draws
    more than that): the draw must still be a present component, here the only one."""
    from gflownet_measure.policies import gumbel_max

    monkeypatch.setattr(torch, "rand", lambda shape, dtype=None, device=None: torch.zeros(shape, dtype=dtype))
    logits = torch.tensor([[float("-inf"), 0.0], [float("-inf"), -3.0]])
    assert gumbel_max(logits).tolist() == [1, 1]
