"""Rollouts, trajectories and the replay buffer on the hypergrid."""
from dataclasses import replace

import pytest
import torch

from gflownet_measure.buffers import ReplayBuffer
from gflownet_measure.environments import hypergrid
from gflownet_measure.rollout import log_densities, rollout, sample_backward, sample_forward, score


@pytest.fixture
def grid():
    cfg = hypergrid.HypergridConfig(height=5, ndim=3)
    torch.manual_seed(0)
    g = hypergrid.make_graph(cfg)
    pf, pb = hypergrid.make_policies(g, replace(cfg, backward="learned"))
    return g, pf, pb


def _assert_valid(g, traj):
    """Every step moves +1 along one axis, trajectories start at s0, and the sink position is the length."""
    assert (traj.states[0] == g.source).all()
    steps = traj.states[1:] - traj.states[:-1]  # [T, B, D]
    moving = traj.mask & ~traj.sink[1:]
    assert ((steps.sum(-1) == 1) & (steps.abs().sum(-1) == 1))[moving].all()
    assert (steps[traj.sink[1:]] == 0).all()
    cols = torch.arange(traj.sink.shape[1])
    assert (traj.sink[1:] >= traj.sink[:-1]).all()  # once at the sink, always at the sink
    assert traj.sink[traj.length, cols].all() and not traj.sink[traj.length - 1, cols].any()  # first reached at position length
    assert torch.equal(traj.log_R, g.log_reward(traj.terminal))


def test_forward_and_backward_trajectories_are_valid(grid):
    g, pf, pb = grid
    fwd = sample_forward(g, pf, 64, epsilon=0.5)
    _assert_valid(g, fwd)
    bwd = sample_backward(g, pb, fwd.terminal)
    _assert_valid(g, bwd)
    assert torch.equal(bwd.terminal, fwd.terminal)
    assert torch.equal(bwd.length, fwd.terminal.sum(-1).long() + 1)  # |x|_1 moves, then the stop


def test_log_densities_match_the_policies(grid):
    g, pf, pb = grid
    traj = sample_forward(g, pf, 8)
    log_pf, log_pb = log_densities(traj, pf, pb)
    b = 0
    for t in range(int(traj.length[b])):
        s, nx, ns = traj.states[t, b : b + 1], traj.states[t + 1, b : b + 1], traj.sink[t + 1, b : b + 1]
        assert torch.isclose(log_pf[t, b], pf(s).log_prob(nx, ns)[0])
        expected = torch.tensor(0.0) if ns else pb(nx).log_prob(s, torch.zeros(1, dtype=torch.bool))[0]
        assert torch.isclose(log_pb[t, b], expected)
    assert (log_pf[~traj.mask] == 0).all() and (log_pb[~traj.mask] == 0).all()


def test_batched_scores_with_exploration_equal_the_scored_rollout(grid):
    """With epsilon-uniform exploration, ``score`` gives the mixture density log q = log((1 - eps) P_F + eps U) that a
    scored ``rollout`` records step by step, on the same trajectories (same seed)."""
    g, pf, pb = grid
    torch.manual_seed(4)
    traj, expected = rollout(g, pf, 64, pb=pb, epsilon=0.3)
    torch.manual_seed(4)
    again = sample_forward(g, pf, 64, epsilon=0.3)
    assert torch.equal(again.states, traj.states)
    got = score(again, pf, pb, epsilon=0.3)
    for name, a, b in zip(expected._fields, got, expected):
        assert torch.allclose(a, b, atol=1e-5), name
    assert not torch.allclose(got.log_q[traj.mask], got.log_pf[traj.mask].detach())


def test_sampled_trajectories_are_ordinary_tensors(grid):
    """The samplers walk under inference mode but hand back ordinary tensors: a loss takes gradients through them and a
    buffer writes into them (inference tensors raise on both)."""
    g, pf, pb = grid
    fwd = sample_forward(g, pf, 16)
    bwd = sample_backward(g, pb, fwd.terminal)
    for traj in (fwd, bwd):
        tensors = [traj.states, traj.sink, traj.log_R] + ([traj.draw.comp, *(u for u in traj.draw.u if u is not None)] if traj.draw is not None else [])
        assert not any(t.is_inference() for t in tensors)
        log_pf, log_pb = log_densities(traj, pf, pb)
        (log_pf.sum() + log_pb.sum()).backward()
        traj.states[0] += 0  # in place, outside inference mode
    assert fwd.draw is not None and all(p.grad is not None for p in pf.parameters())


def test_transition_outside_the_kernel_is_an_error(grid):
    g, pf, _ = grid
    with pytest.raises(ValueError, match="outside the reference kernel"):
        pf(torch.zeros(1, 3)).log_prob(torch.tensor([[2.0, 0.0, 0.0]]), torch.zeros(1, dtype=torch.bool))


def test_non_finite_policy_density_is_reported(grid):
    g, pf, pb = grid
    traj = sample_forward(g, pf, 4)
    with torch.no_grad():
        pf.out.bias.fill_(float("nan"))
    with pytest.raises(ValueError, match="log P_F is not finite"):
        log_densities(traj, pf, pb)


def test_nan_reward_is_reported(grid):
    g, pf, _ = grid
    broken = g.__class__(**{**g.__dict__, "log_reward": lambda x: torch.full((len(x),), float("nan"))})
    with pytest.raises(ValueError, match="log_reward is nan"):
        sample_forward(broken, pf, 4)


def test_walks_longer_than_max_length_are_an_error(grid):
    """eq. 7 in practice: a graph that claims walks of at most 2 steps while the grid's take up to 13 (H = 5, D = 3)."""
    g, pf, pb = grid
    short = g.__class__(**{**g.__dict__, "max_length": 2})
    torch.manual_seed(0)
    with pytest.raises(RuntimeError, match="did not reach the sink within max_length=2"):
        sample_forward(short, pf, 256, epsilon=1.0)  # uniform moves: some walk leaves s0 more than twice
    far = torch.full((4, 3), 4.0)  # the far corner: 12 moves from s0
    with pytest.raises(RuntimeError, match="backward trajectories did not reach s0 within 2 steps"):
        sample_backward(short, pb, far)


def test_replay_buffer_round_trip_and_ring(grid):
    g, pf, _ = grid
    buf = ReplayBuffer(10, g.max_length, g.state_dim)
    a = sample_forward(g, pf, 6)
    buf.add(a)
    torch.manual_seed(1)
    s = buf.sample(6)
    assert len(buf) == 6
    assert sorted(map(tuple, s.terminal.tolist())) == sorted(map(tuple, a.terminal.tolist()))
    _assert_valid(g, s)
    buf.add(sample_forward(g, pf, 6))
    assert len(buf) == 10 and buf.head == 2
    with pytest.raises(ValueError):
        ReplayBuffer(0, 3, 2)


def test_replay_buffer_keeps_the_last_of_an_oversized_batch_and_refuses_long_trajectories(grid):
    g, pf, _ = grid
    buf = ReplayBuffer(4, g.max_length, g.state_dim)
    a = sample_forward(g, pf, 9)
    buf.add(a)  # 9 into 4 slots: the last 4, each once (duplicate ring indices would keep an arbitrary writer)
    assert len(buf) == 4
    assert sorted(map(tuple, buf.sample(4).terminal.tolist())) == sorted(map(tuple, a.terminal[-4:].tolist()))
    assert buf.states.dtype == torch.float64 and torch.equal(buf.states[:, : a.states.shape[0]], a.states[:, -4:].transpose(0, 1).double())
    short = ReplayBuffer(4, 1, g.state_dim)
    with pytest.raises(ValueError, match="do not fit a replay buffer of max_length 1"):
        short.add(a)
