"""MLPPolicy (gflownet_measure.networks): a torso shared between P_F and P_B (tied), free parameters at the source, kernel
mismatch, heads matched with their charts, and a learned policy on every bounded chart the core ships."""
import math

import pytest
import torch

from gflownet_measure.charts import AffineChart, ArcChart, PolarChart
from gflownet_measure.environments import hypergrid
from gflownet_measure.heads import BetaHead, BetaMixtureHead, VonMisesHead
from gflownet_measure.kernels import Kernel
from gflownet_measure.measures import Atoms, Box, Measure, Piece
from gflownet_measure.networks import MLPPolicy, StateFlow
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


def test_a_state_flow_on_the_policy_torso_shares_its_layers_and_keeps_its_own_rate(graph):
    """StateFlow(shared_torso=pf.torso): the torso's weights are P_F's (one copy, trained at the policy's rate), the flow's
    head is its own (at lr_flow), and log F's gradient reaches the shared torso."""
    torch.manual_seed(0)
    pf = MLPPolicy(graph.kappa, graph.encode, 8, 3, hidden=16, n_layers=2)
    log_F = StateFlow(graph.encode, 8, shared_torso=pf.torso)
    assert log_F.net[0] is pf.torso[0] and log_F.net[-1].in_features == 16
    gfn = GFlowNet(pf, None, log_F)
    opt = make_optimizer(gfn, 1e-3, 1e-1, lr_flow=1e-2)
    rates = {g["name"]: (g["lr"], len(g["params"])) for g in opt.param_groups}
    assert rates["log_F"] == (1e-2, 2) and sum(n for _, n in rates.values()) == len(list(gfn.parameters()))  # the head: weight and bias
    log_F(torch.tensor([[1.0, 2.0]])).sum().backward()
    assert pf.torso[0].weight.grad is not None and pf.out.weight.grad is None


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


class PieceAndSink(Kernel):
    """:math:`\\kappa(s, \\cdot) = \\delta_\\bot + (\\varphi_s)_\\#(|J|\\,du)`: one chart's piece at every state, and the sink."""

    def __init__(self, chart):
        self.chart = chart

    def __call__(self, s):
        B = s.shape[0]
        yes = torch.ones(B, 1, dtype=torch.bool)
        return Measure(Atoms(s[:, None], torch.zeros(B, 1, dtype=s.dtype), yes, yes), (Piece(self.chart, s, yes[:, 0]),))


def _arc_bounds(s):
    return 0.1 + 0.2 * s[:, 0], 0.7 + 0.2 * s[:, 1]


TWO_PI = 2 * math.pi
SMOOTH = {"c_min": 1.5, "c_span": 2.0}  # Beta concentrations in [1.5, 3.5]: densities Gauss-Legendre integrates to ~1e-9
CHARTS_AND_HEADS = {
    "backward-arc-on-[-1,0]": (AffineChart(Box((-1.0,), (0.0,)), slots=(0,), scale=2.0, relative=True, period=TWO_PI), lambda d: BetaHead(1, domain=d, **SMOOTH)),
    "circle": (AffineChart(Box((0.0,), (TWO_PI,)), slots=(0,), relative=True, period=TWO_PI), lambda d: VonMisesHead(d)),
    "torus-negative-scale": (AffineChart(Box((0.0, 0.0), (TWO_PI, TWO_PI)), slots=(0, 1), scale=-1.0, relative=True, period=TWO_PI), lambda d: VonMisesHead(d)),
    "clockwise-arc": (AffineChart(Box((0.0,), (1.0,)), slots=(1,), scale=-2.0, period=TWO_PI), lambda d: BetaMixtureHead(1, 2, domain=d, **SMOOTH)),
    "lebesgue-box": (AffineChart(Box((0.0, -1.0), (2.0, 3.0)), slots=(1, 2)), lambda d: BetaMixtureHead(2, 2, domain=d, **SMOOTH)),
    "quarter-disc": (PolarChart(0.25), lambda d: BetaMixtureHead(2, 2, **SMOOTH)),
    "parents-arc": (ArcChart(0.25, _arc_bounds, direction=-1), lambda d: BetaHead(1, **SMOOTH)),
}


@pytest.mark.parametrize("name", CHARTS_AND_HEADS)
def test_a_learned_policy_on_every_bounded_chart_samples_scores_and_integrates_to_one(name, one_thread):
    """A learned policy (MLPPolicy, float64) whose head lives on its chart's box: sampled transitions lie on the kernel
    and have finite log-densities and gradients, and :math:`\\int p\\, d\\kappa = \\pi_\\bot + \\pi_c \\int_U q_c\\, du = 1`
    at 8 states by tensor-product Gauss-Legendre (64 nodes per coordinate). Tolerance 1e-6: the worst error over 3
    seeds was 1.5e-8 (the torus: torch's log I_0 of the von Mises is a polynomial approximation, off by up to 3.3e-8
    per coordinate; the Betas, whose concentrations >= 1.5 leave only :math:`u^{1/2}`-type edges, 2e-9), while a head
    on a wrong box or a missing :math:`-\\sum_i \\log(h_i - l_i)` is off by a constant factor."""
    torch.manual_seed(0)
    chart, make_head = CHARTS_AND_HEADS[name]
    kernel = PieceAndSink(chart)
    policy = MLPPolicy(kernel, lambda s: s, 3, 1, [make_head(chart.domain)], hidden=16, n_layers=1).double()
    s = torch.rand(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    density = policy(s)
    x, sink = density.sample()
    log_p = density.log_prob(x, sink)  # raises if a transition is off the kernel
    assert torch.isfinite(log_p).all()
    log_p.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in policy.parameters() if p.grad is not None)
    nodes = kernel(s).weighted_points(64 ** chart.domain.dim, "quadrature")
    M = nodes.x.shape[1]
    with torch.no_grad():
        log_q = policy(s.repeat_interleave(M, 0)).log_prob(nodes.x.reshape(8 * M, -1), nodes.sink.reshape(-1)).reshape(8, M)
    integral = (nodes.log_w + log_q).exp().sum(1)
    assert torch.allclose(integral, torch.ones(8, dtype=torch.float64), atol=1e-6, rtol=0), integral


def test_a_head_on_another_box_than_its_chart_is_a_clear_error():
    """A 2-dimensional head on a 1-dimensional chart, a [0, 1] head on a [0, 1/2] chart, a head without a box: a ValueError
    naming the head, its box, the piece's chart and its domain, before any arithmetic (not a torch shape error later)."""
    one_d = AffineChart(Box((0.0,), (1.0,)), slots=(0,))
    s = torch.rand(4, 3)
    pf = MLPPolicy(PieceAndSink(one_d), lambda s: s, 3, 1, [BetaHead(2)], hidden=8, n_layers=1)
    with pytest.raises(ValueError, match=r"^head 0 \(BetaHead\(k=2\), on \[0, 1\]\^2\) does not match piece 0's chart AffineChart with domain \[0, 1\]\^1: a head's dimension and box must be its chart's$"):
        pf(s)
    half = AffineChart(Box((0.0,), (0.5,)), slots=(0,), scale=2.0)
    with pytest.raises(ValueError, match=r"head 0 \(BetaHead\(k=1\), on \[0, 1\]\^1\) does not match piece 0's chart AffineChart with domain \[0, 0.5\]\^1"):
        MLPPolicy(PieceAndSink(half), lambda s: s, 3, 1, [BetaHead(1)], hidden=8, n_layers=1)(s)
    MLPPolicy(PieceAndSink(half), lambda s: s, 3, 1, [BetaHead(1, domain=half.domain)], hidden=8, n_layers=1)(s)  # its box: fine
    headless = torch.nn.Linear(1, 1)
    headless.n_params = 2
    with pytest.raises(ValueError, match=r"head 0 \(Linear\) declares no domain box"):
        MLPPolicy(PieceAndSink(one_d), lambda s: s, 3, 1, [headless], hidden=8, n_layers=1)(s)
