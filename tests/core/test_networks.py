"""MLPPolicy options (gflownet_measure.networks): a torso shared between P_F and P_B (tied), free parameters at the source, kernel mismatch."""
import pytest
import torch

from environments import hypergrid
from gflownet_measure.networks import MLPPolicy
from gflownet_measure.objectives import GFlowNet
from gflownet_measure.training import make_optimizer

CFG = hypergrid.HypergridConfig(height=4)


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
