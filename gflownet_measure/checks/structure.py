"""The pointwise conditions of Definition 1: reachability (eq. 1), an absorbing sink (eq. 2), no parent of the source
(eq. 5), a sink mass in {0, 1} (eq. 6) and finite absorption (eq. 7)."""

from __future__ import annotations

import torch
from torch import Tensor

from ..densities import Policy, UniformPolicy
from ..exact import index_of
from ..graph import PointedGraph
from ..measures import Measure
from .integration import nu_states
from .results import CONDITIONS, CheckResult

__all__ = ["check_reachability", "check_absorbing_sink", "check_source_has_no_parent", "check_sink_mass", "check_finite_absorption"]


def _walk_policy(kernel, fallback: Policy | None) -> Policy:
    return fallback if fallback is not None else UniformPolicy(kernel)


def _enumerated(graph: PointedGraph) -> bool:
    """:math:`\\nu` is a list of atoms, so eq. 1 and eq. 7 can be searched exactly (not pieces, not a sampling rule)."""
    return isinstance(graph.nu, Measure) and not graph.nu.pieces


def _atom_states(graph: PointedGraph) -> Tensor:
    """The atoms ``[S, D]`` of an :func:`_enumerated` :math:`\\nu`."""
    nu = graph.nu
    assert isinstance(nu, Measure), "exact searches run on a listed nu (_enumerated)"
    return nu.atoms.x[0][nu.atoms.mask[0]].float()


def _source_mask(graph: PointedGraph, states: Tensor) -> Tensor:
    """``[S]`` bool: the row of ``states`` (the atoms of nu) that is :math:`s_0`; where the exact searches start."""
    return index_of(states, graph.source[None].float()) == torch.arange(len(states))


def _successors(states: Tensor, atoms) -> Tensor:
    """``[S]`` bool: the rows of ``states`` among the non-sink ``atoms`` of a kernel (one step of an exact search)."""
    nxt = index_of(states, atoms.x[atoms.mask & ~atoms.sink])
    out = torch.zeros(len(states), dtype=torch.bool)
    out[nxt[nxt >= 0]] = True
    return out


def _some(states: Tensor, k: int = 3) -> str:
    """The first ``k`` distinct rows of ``states`` as lists, for a message (walks that end at one state name it once)."""
    rows = list(dict.fromkeys(map(tuple, states.tolist())))
    return ", ".join(str(list(v)) for v in rows[:k]) + (", ..." if len(rows) > k else "")


def _walk(graph: PointedGraph, policy: Policy, x: Tensor, forward: bool) -> tuple[Tensor, str]:
    """Walks from the states ``x`` with ``policy`` for at most ``N`` steps: forward until the sink, backward until :math:`s_0`.

    Returns the states where the walks ended (the terminal states, forward) and ``""``, or a message naming the first
    state that is a dead end (the walk's kernel is the zero measure there, not at :math:`s_0`) or still walking after ``N`` steps.
    """
    kernel, name, goal = (graph.kappa, "kappa", "the sink") if forward else (graph.kappa_b, "kappa_b", "s0")
    why = "a dead end: no move and no stop" if forward else "no parent, so s is unreachable from s0"
    x, done = x.clone(), torch.zeros(len(x), dtype=torch.bool) if forward else graph.is_source(x)
    with torch.no_grad():
        for _ in range(graph.max_length):
            rows = (~done).nonzero()[:, 0]
            if not len(rows):
                break
            s = x[rows]
            dead = kernel(s).is_zero()
            if dead.any():
                return x, f"{name}(s, .) = 0 at s={_some(s[dead])} ({int(dead.sum())} of {len(s)} walking states), which is not {goal}: {why}"
            nx, sink = policy(s).sample()
            nx = nx.to(x.dtype)
            if forward:
                done[rows] = sink
                x[rows[~sink]] = nx[~sink]
            else:
                x[rows] = nx
                done[rows] = graph.is_source(nx)
    if not done.all():
        return x, f"{int((~done).sum())} of {len(x)} walks have not reached {goal} after N={graph.max_length} steps, e.g. at s={_some(x[~done])}"
    return x, ""


def check_reachability(graph: PointedGraph, n: int, pb: Policy | None = None) -> CheckResult:
    """eq. 1: every state of :math:`\\nu` is reachable from :math:`s_0`.

    Exact search when :math:`\\nu` is a list of atoms; otherwise (pieces, or a sampled :math:`\\nu`) backward walks with
    ``pb`` (uniform by default) from states drawn from :math:`\\nu`, which must reach :math:`s_0` within ``N`` steps. The walks start at states that need not
    be terminal, so the reward, a density on the terminal states only, is not evaluated.
    """
    name = CONDITIONS["reachability"]
    if _enumerated(graph):
        states = _atom_states(graph)
        seen = _source_mask(graph, states)
        frontier = seen.clone()
        for _ in range(graph.max_length):
            frontier = _successors(states, graph.kappa(states[frontier]).atoms) & ~seen
            seen |= frontier
        missing = int((~seen).sum())
        detail = f"{missing} of {len(states)} states unreachable from s0 (exact search)" + (f": {_some(states[~seen])}" if missing else "")
        return CheckResult(name, missing, 0, missing == 0, detail)
    x = nu_states(graph, n)
    _, failure = _walk(graph, _walk_policy(graph.kappa_b, pb), x, forward=False)
    return CheckResult(name, float(bool(failure)), 0, not failure, failure or f"backward walks from {len(x)} sampled states reach s0")


def check_absorbing_sink(graph: PointedGraph, n: int) -> CheckResult:
    """eq. 2: :math:`\\kappa(\\bot, \\cdot) = \\delta_\\bot`, i.e. no state lists the sink among its parents."""
    s = nu_states(graph, n)
    a = graph.kappa_b(s).atoms
    bad = (a.sink & a.mask).any(1)
    detail = f"{int(bad.sum())} of {len(s)} states have the sink as a parent" + (f" (first: s={s[bad][0].tolist()})" if bad.any() else "")
    return CheckResult(CONDITIONS["absorbing"], int(bad.sum()), 0, not bool(bad.any()), detail)


def check_source_has_no_parent(graph: PointedGraph) -> CheckResult:
    """eq. 5: :math:`\\kappa_b(s_0, \\cdot) = 0`."""
    zero = bool(graph.kappa_b(graph.source[None]).is_zero()[0])
    return CheckResult(CONDITIONS["source"], 0.0 if zero else 1.0, 0, zero, "s0 has no parent" if zero else "s0 has parents")


def check_sink_mass(graph: PointedGraph, n: int) -> CheckResult:
    """eq. 6: :math:`\\kappa(s, \\{\\bot\\}) \\in \\{0, 1\\}` for every state."""
    s = nu_states(graph, n)
    a = graph.kappa(s).atoms
    mass = torch.where(a.sink & a.mask, a.log_mass.double().exp(), torch.zeros_like(a.log_mass, dtype=torch.float64)).sum(1)
    off = torch.minimum(mass, (mass - 1).abs())
    i = int(off.argmax())
    err = float(off[i])
    detail = "max distance of the sink mass to {0, 1}" + (f": {float(mass[i]):.6g} at s={s[i].tolist()}" if err > 1e-9 else "")
    return CheckResult(CONDITIONS["sink mass"], err, 1e-9, err <= 1e-9, detail)


def check_finite_absorption(graph: PointedGraph, n: int, pf: Policy | None = None) -> CheckResult:
    """eq. 7: :math:`\\kappa^N(s_0, \\cdot)` is concentrated on the sink (no dead ends, no cycles longer than ``N``).

    Exact propagation for ``N`` steps when :math:`\\nu` is a list of atoms; otherwise (pieces, or a sampled :math:`\\nu`)
    ``n`` forward walks with ``pf`` (uniform by default), whose terminal states (where the walks stop) get their reward evaluated.
    """
    name = CONDITIONS["absorption"]
    if _enumerated(graph):
        states = _atom_states(graph)
        frontier = _source_mask(graph, states)
        dead = []
        for _ in range(graph.max_length):
            m = graph.kappa(states[frontier])
            dead.append(states[frontier][m.is_zero()])
            frontier = _successors(states, m.atoms)
        dead = torch.cat(dead).unique(dim=0)
        alive = int(frontier.sum())
        detail = f"N={graph.max_length}: {alive} states still reachable after N steps" + (f" ({_some(states[frontier])})" if alive else "")
        detail += f", {len(dead)} dead ends" + (f" ({_some(dead)})" if len(dead) else "") + " (exact)"
        return CheckResult(name, alive + len(dead), 0, alive + len(dead) == 0, detail)
    terminal, failure = _walk(graph, _walk_policy(graph.kappa, pf), graph.source.expand(n, -1), forward=True)
    if not failure:
        graph.checked_log_reward(terminal)  # raises, naming the state, where the reward is NaN or +inf on a terminal state
    return CheckResult(name, float(bool(failure)), 0, not failure, failure or f"N={graph.max_length}: {n} forward walks reached the sink")
