"""Batched rollouts: forward with exploration, backward from terminal states, and log-densities."""
from __future__ import annotations

import torch
from torch import Tensor

from .graph import PointedGraph
from .policies import Policy
from .trajectories import Trajectories

__all__ = ["sample_forward", "sample_backward", "log_densities"]


@torch.no_grad()
def sample_forward(graph: PointedGraph, pf: Policy, n: int, epsilon: float = 0.0) -> Trajectories:
    """``n`` trajectories from :math:`s_0` with :math:`(1-\\epsilon) P_F + \\epsilon\\, U` until the sink.

    One policy call per step on the still-active rows. Raises if a trajectory has not reached the
    sink after ``graph.max_length`` steps (eq. 7 violated).
    """
    x = graph.source.expand(n, -1).clone()
    sink = torch.zeros(n, dtype=torch.bool)
    states, sinks = [x], [sink]
    for _ in range(graph.max_length):
        active = ~sink
        if not active.any():
            break
        nx, ns = pf(x[active]).sample(epsilon)
        x, sink = x.clone(), sink.clone()
        x[active] = torch.where(ns[:, None], x[active], nx.to(x.dtype))
        sink[active] = ns
        states.append(x)
        sinks.append(sink)
    if not sink.all():
        raise RuntimeError(f"{graph.name}: {int((~sink).sum())} of {n} trajectories did not reach the sink within max_length={graph.max_length} steps (eq. 7)")
    traj = Trajectories(torch.stack(states), torch.stack(sinks), torch.zeros(n))
    return traj._replace(log_R=graph.checked_log_reward(traj.terminal))


@torch.no_grad()
def sample_backward(graph: PointedGraph, pb: Policy, x: Tensor) -> Trajectories:
    """Trajectories ending at the terminal states ``x [B, D]``, drawn backwards with :math:`P_B` to :math:`s_0`.

    Returned time-forward, in the same layout as :func:`sample_forward`.
    """
    cur = x.clone()
    done = graph.is_source(cur)
    seq = [cur]
    for _ in range(graph.max_length):
        active = ~done
        if not active.any():
            break
        px, _ = pb(cur[active]).sample()
        cur = cur.clone()
        cur[active] = px.to(cur.dtype)
        done = done | graph.is_source(cur)
        seq.append(cur)
    if not done.all():
        raise RuntimeError(f"{graph.name}: {int((~done).sum())} backward trajectories did not reach s0 within {graph.max_length} steps")
    seq = torch.stack(seq)  # [S, B, D], seq[0] = x
    S = seq.shape[0]
    n_states = S - (torch.stack([graph.is_source(s) for s in seq]).cumsum(0) > 1).sum(0)  # states up to first s0
    t = torch.arange(S + 1)[:, None]  # positions 0..S
    idx = (n_states[None, :] - 1 - t).clamp(min=0)
    states = seq.gather(0, idx[..., None].expand(-1, -1, seq.shape[2]))
    return Trajectories(states, t >= n_states[None, :], graph.checked_log_reward(x)).trimmed()


def log_densities(traj: Trajectories, pf: Policy, pb: Policy) -> tuple[Tensor, Tensor]:
    """:math:`\\log P_F(s_{t+1}|s_t)` w.r.t. kappa and :math:`\\log P_B(s_t|s_{t+1})` w.r.t. kappa_b, ``[T, B]`` each.

    One batched call of each policy over all transitions. The backward density of the step into
    the sink is 0 (its role is played by log R, see :mod:`gflownet_measure.losses`); masked entries are 0.
    Raises ``ValueError`` if a density is NaN or infinite on a sampled transition.
    """
    mask = traj.mask
    s, nx, ns = traj.states[:-1][mask], traj.states[1:][mask], traj.sink[1:][mask]
    lpf = pf(s).log_prob(nx, ns)
    into = ~ns
    lpb_into = pb(nx[into]).log_prob(s[into], torch.zeros(int(into.sum()), dtype=torch.bool))
    for name, v in (("log P_F", lpf), ("log P_B", lpb_into)):
        if not torch.isfinite(v).all():
            bad = ~torch.isfinite(v)
            raise ValueError(f"{name} is not finite on {int(bad.sum())} sampled transitions (first value {v[bad][0].item()}); check the policy's density")
    log_pf = torch.zeros(mask.shape, dtype=lpf.dtype)
    log_pf[mask] = lpf
    lpb = torch.zeros(len(s), dtype=lpf.dtype)
    lpb[into] = lpb_into.to(lpf.dtype)
    log_pb = torch.zeros(mask.shape, dtype=lpf.dtype)
    log_pb[mask] = lpb
    return log_pf, log_pb
