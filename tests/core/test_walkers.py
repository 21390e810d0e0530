"""The core's :class:`~gflownet_measure.walkers.Walkers` (Algorithm 1's parallel environments, Deleu et al. 2023): moves in
the kernel's support, restarts at s0 after the sink, checkpoints, the distribution of completed trajectories, and eq. 7.

Every stochastic test is seeded (deterministic); the stated tolerances are what an unseeded run passes with high
probability (5 binomial standard errors per state, a chi-square test at level 1e-3)."""
from __future__ import annotations

import io
from dataclasses import replace

import pytest
import torch
from scipy.stats import chi2
from torch import nn

from conftest import random_jsp_policies
from gflownet_measure.densities import UniformPolicy, uniform_density
from gflownet_measure.environments import dag_params as dp
from gflownet_measure.environments import hypergrid
from gflownet_measure.graph import PointedGraph
from gflownet_measure.kernels import FiniteKernel
from gflownet_measure.measures import Atoms, Measure, counting
from gflownet_measure.rollout import sample_forward
from gflownet_measure.walkers import Step, Walkers

pytestmark = pytest.mark.usefixtures("one_thread")


def _grid(height: int = 3, ndim: int = 2):
    """A small hypergrid and a forward policy with every weight drawn N(0, 0.5^2), so that it is far from uniform."""
    cfg = hypergrid.HypergridConfig(height=height, ndim=ndim)
    graph = hypergrid.make_graph(cfg)
    torch.manual_seed(0)
    pf, _ = hypergrid.make_policies(graph, replace(cfg, hidden=16))
    for p in pf.parameters():
        nn.init.normal_(p, std=0.5)
    return graph, pf


def _dag3():
    _, graph, pf, _ = random_jsp_policies(dp.DagParamsConfig(d=3, hidden=16))
    return graph, pf


@pytest.mark.parametrize("space", ["hypergrid", "dag"])
@pytest.mark.parametrize("epsilon", [0.0, 0.5])
def test_moves_lie_in_the_kernel_support_and_walkers_restart_at_the_source(space, epsilon):
    """Over 40 steps of 32 walkers (with and without uniform exploration): every move has a finite P_F density w.r.t. the
    kernel (atoms, and on the DAG space the Theta piece of varying dimension); a walker that moved into the sink is back
    at s0 with its move count reset and starts its next move there; the others sit at the state they moved to."""
    graph, pf = _grid() if space == "hypergrid" else _dag3()
    walkers = Walkers(graph, 32)
    assert torch.equal(walkers.states, graph.source.expand(32, -1)) and (walkers.moves == 0).all()
    torch.manual_seed(1)
    previous_sink = torch.zeros(32, dtype=torch.bool)
    sinks = 0
    for _ in range(40):
        moves_before = walkers.moves.clone()
        step = walkers.step(pf, epsilon)
        assert isinstance(step, Step) and step.x.shape == step.s.shape == (32, graph.state_dim) and step.sink.dtype == torch.bool
        with torch.no_grad():
            log_p = pf(step.s).log_prob(step.x, step.sink)
        assert torch.isfinite(log_p).all()
        assert (graph.kappa(step.s).component_of(step.x, step.sink) >= 0).all()
        assert graph.is_source(step.s[previous_sink]).all()  # restarted walkers move on from s0
        sink = step.sink
        assert graph.is_source(walkers.states[sink]).all() and (walkers.moves[sink] == 0).all()
        assert torch.equal(walkers.states[~sink], step.x[~sink]) and torch.equal(walkers.moves[~sink], moves_before[~sink] + 1)
        previous_sink, sinks = sink, sinks + int(sink.sum())
    assert sinks > 0


def test_state_dict_round_trip_resumes_the_same_walks():
    """The walkers' states and move counts are buffers: a fresh ``Walkers`` loaded from a ``state_dict`` (also through
    ``torch.save``) holds the same trajectories in progress and, from the same random state, continues them identically."""
    graph, pf = _dag3()
    torch.manual_seed(2)
    a = Walkers(graph, 16)
    for _ in range(3):
        a.step(pf, 0.3)
    assert (a.moves > 0).any() and not graph.is_source(a.states).all()
    saved = {k: v.clone() for k, v in a.state_dict().items()}
    assert set(saved) == {"states", "moves"}
    b = Walkers(graph, 16)
    b.load_state_dict(saved)
    assert torch.equal(b.states, a.states) and torch.equal(b.moves, a.moves)
    rng = torch.get_rng_state()
    steps_a = [a.step(pf, 0.3) for _ in range(5)]
    torch.set_rng_state(rng)
    steps_b = [b.step(pf, 0.3) for _ in range(5)]
    for sa, sb in zip(steps_a, steps_b):
        assert all(torch.equal(u, v) for u, v in zip(sa, sb))
    assert torch.equal(a.states, b.states) and torch.equal(a.moves, b.moves)
    buffer = io.BytesIO()
    torch.save(a.state_dict(), buffer)
    buffer.seek(0)
    c = Walkers(graph, 16)
    c.load_state_dict(torch.load(buffer))
    assert torch.equal(c.states, a.states) and torch.equal(c.moves, a.moves)


def test_walkers_need_at_least_one_walker():
    graph, _ = _grid()
    with pytest.raises(ValueError, match="at least one walker"):
        Walkers(graph, 0)


def _exact_terminal(graph, pf, epsilon: float) -> tuple[torch.Tensor, torch.Tensor]:
    """The grid's states ``[S, D]`` and the exact law ``[S]`` of the terminal state under the behaviour policy
    :math:`(1 - \\epsilon) P_F + \\epsilon U` (``U`` uniform over the present atoms), by a forward pass in order of
    :math:`|x|_1` (every move adds 1)."""
    states = graph.nu.atoms.x[0]
    order = states.sum(1).argsort()
    states = states[order]
    index = {tuple(s.tolist()): i for i, s in enumerate(states)}
    with torch.no_grad():
        density = pf(states)
        probs = (1 - epsilon) * density.log_probs.exp().double() + epsilon * uniform_density(density.measure).log_probs.exp().double()
    m = density.measure
    reach = torch.zeros(len(states), dtype=torch.float64)
    reach[0] = 1.0
    terminal = torch.zeros(len(states), dtype=torch.float64)
    for i in range(len(states)):
        for k in range(m.atoms.count):
            if not m.atoms.mask[i, k]:
                continue
            if m.atoms.sink[i, k]:
                terminal[i] += reach[i] * probs[i, k]
            else:
                reach[index[tuple(m.atoms.x[i, k].tolist())]] += reach[i] * probs[i, k]
    return states, terminal


@pytest.mark.parametrize("epsilon", [0.0, 0.3])
def test_completed_trajectories_have_the_law_of_rollouts(epsilon):
    """Hypergrid H = 3, D = 2 (9 terminal states), a random policy, with and without exploration. The first 8 trajectories
    completed by each of 500 walkers (4,000; only the first 8 per walker, so that the walks still long in progress when
    the loop ends bias nothing) and 4,000 rollouts of ``sample_forward`` with the same epsilon: each matches the exact
    terminal law within 5 binomial standard errors per state plus one count, and a two-sample chi-square test of
    homogeneity does not reject at level 1e-3 (seeded)."""
    graph, pf = _grid()
    states, p = _exact_terminal(graph, pf, epsilon)
    assert abs(float(p.sum()) - 1) < 1e-6
    index = {tuple(s.tolist()): i for i, s in enumerate(states)}
    n, per = 500, 8
    K = n * per
    walkers = Walkers(graph, n)
    torch.manual_seed(3)
    done = torch.zeros(n, dtype=torch.long)
    ends = []
    while bool((done < per).any()):
        s, _, sink = walkers.step(pf, epsilon)
        ends.append(s[sink & (done < per)])
        done += sink.long()
    ends = torch.cat(ends)
    assert len(ends) == K
    rolled = sample_forward(graph, pf, K, epsilon=epsilon).terminal

    def counts(x):
        return torch.bincount(torch.tensor([index[tuple(v.tolist())] for v in x]), minlength=len(states)).double()

    walked, rolled = counts(ends), counts(rolled)
    se = (p * (1 - p) / K).sqrt()
    for c in (walked, rolled):
        assert ((c / K - p).abs() <= 5 * se + 1.0 / K).all(), (c / K - p).abs().max()
    used = (walked + rolled) > 0
    table = torch.stack([walked[used], rolled[used]])  # [2, cells]
    expected = table.sum(1, keepdim=True) * table.sum(0, keepdim=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    assert statistic < chi2.ppf(1 - 1e-3, int(used.sum()) - 1), statistic


def _graph_of(neighbours, to_sink, max_length: int) -> PointedGraph:
    """A finite pointed graph on the nodes ``[i]`` (``0`` = s0) with the given out-neighbours and sink atoms."""
    n = len(neighbours)
    parents = [[i for i in range(n) if j in neighbours[i]] for j in range(n)]
    terminable = torch.tensor([[float(i)] for i in range(n) if to_sink[i]])
    terminal = counting(terminable) if len(terminable) else Measure(Atoms.empty(1, 1))
    return PointedGraph(
        name="finite",
        source=torch.zeros(1),
        kappa=FiniteKernel(neighbours, to_sink),
        kappa_b=FiniteKernel(parents),
        nu=counting(torch.arange(n, dtype=torch.float32)[:, None]),
        terminal=terminal,
        log_reward=lambda x: torch.zeros(len(x)),
        max_length=max_length,
        encode=lambda s: s,
    )


def test_a_walk_that_never_reaches_the_sink_raises_after_max_length_moves():
    """eq. 7: on the cycle 0 -> 1 -> 0 (no sink) with max_length = 5, four steps pass and the fifth raises; on the chain
    0 -> 1 -> 2 -> sink every walk takes exactly 3 moves, so max_length = 3 never raises (over 30 steps) and
    max_length = 2 raises at the second move."""
    cycle = _graph_of([[1], [0]], [False, False], max_length=5)
    walkers = Walkers(cycle, 3)
    pf = UniformPolicy(cycle.kappa)
    for _ in range(4):
        walkers.step(pf)
    assert (walkers.moves == 4).all()
    with pytest.raises(RuntimeError, match="5 moves without reaching the sink"):
        walkers.step(pf)

    chain = [[1], [2], []], [False, False, True]
    ok = Walkers(_graph_of(*chain, max_length=3), 4)
    sinks = sum(int(ok.step(UniformPolicy(ok.graph.kappa)).sink.sum()) for _ in range(30))
    assert sinks == 4 * 10  # every third move of every walker
    short = Walkers(_graph_of(*chain, max_length=2), 4)
    short.step(UniformPolicy(short.graph.kappa))
    with pytest.raises(RuntimeError, match="2 moves without reaching the sink"):
        short.step(UniformPolicy(short.graph.kappa))
