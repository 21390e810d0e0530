"""Shape contracts where a user's objects enter: each probe calls one object on given states and raises a one-line
:class:`~gflownet_measure.contract_error.ContractError` (importable from here too) naming the object, what it returned
and what is expected. The log-reward's probe is the graph's own,
:meth:`~gflownet_measure.graph.PointedGraph.checked_log_reward`, which the rollouts run.

Without them a wrong shape is silent or surfaces far away: a log-reward ``[B, 1]`` against the ``[B]`` terms of a loss
broadcasts to a ``[B, B]`` residual and trains to a wrong :math:`\\log Z`; atoms of the wrong width or a policy whose
``n_in`` is not the width of ``encode`` are raw torch errors inside the rows of unrelated conditions. For states
``s [B, D]`` (``D = graph.state_dim``):

================================  ========================================================================================
object                            contract
================================  ========================================================================================
``graph.source``                  ``[D]``, floating point
``kappa(s)``, ``kappa_b(s)``      atoms ``x [B, K, D]``, ``log_mass``, ``mask``, ``sink`` ``[B, K]`` (``mask``, ``sink`` bool);
                                  each piece ``context [B, D]``, ``mask [B]`` bool, and its chart's contract
a chart :math:`\\varphi_s`         writes coordinates ``0..D-1`` only (``slots``, ``fixed``, ``advance``); at ``u [B, k]`` in its
                                  box, ``_embed`` is ``[B, len(slots)]``, ``inverse`` ``[B, k]``, ``log_abs_det_jacobian`` ``[B]``
``nu``, ``terminal``              the contract of a kernel's measures at :math:`s_0` (a batch of one)
``encode(s)``                     ``[B, F]``, floating point; ``F`` is the input width ``n_in`` of every network on it
an :class:`MLPPolicy`             as many atom logits and heads as its kernel has atom slots and pieces
``log_reward(x)``                 ``[B]``, floating point, at terminal states ``x``; every value finite or ``-inf``
================================  ========================================================================================
"""

from __future__ import annotations

import math
from typing import Callable

import torch
from torch import Tensor, nn

from .boxes import Box
from .charts import Chart
from .contract_error import ContractError, require, shape_of
from .graph import PointedGraph
from .measures import Measure
from .networks import MLPPolicy, StateFlow
from .sampled import SampledMeasure

__all__ = ["ContractError", "check_measure", "check_chart", "check_reference", "check_encode", "check_network", "check_policy_kernel", "check_states"]


def _inside(box: Box, b: int, dtype: torch.dtype) -> Tensor:
    """``[b, k]``: one point of ``box`` repeated: the midpoint of a bounded coordinate, one unit inside a half-line, 0 on the line."""
    u = [
        (lo + hi) / 2 if math.isfinite(lo) and math.isfinite(hi) else lo + 1 if math.isfinite(lo) else hi - 1 if math.isfinite(hi) else 0.0
        for lo, hi in zip(box.low, box.high)
    ]
    return torch.tensor(u, dtype=dtype).expand(b, -1)


def check_chart(chart: Chart, name: str, s: Tensor) -> None:
    """The contract of ``chart`` anchored at the states ``s [B, D]``, at one point ``u`` of its box (0 on the
    coordinates it leaves inactive there)."""
    B, D = s.shape
    k, slots = chart.domain.dim, tuple(chart.slots)
    written = sorted({*slots, *chart.fixed, *chart.advance})
    require(
        all(0 <= i < D for i in written),
        f"{name}: writes coordinates {written} (slots, fixed, advance) of states of width {D}; expected coordinates 0 to {D - 1}",
    )
    u = _inside(chart.domain, B, s.dtype)
    active = chart.active(s)
    u = u if active is None else torch.where(active, u, torch.zeros_like(u))
    y = chart._embed(s, u)
    require(
        isinstance(y, Tensor) and y.shape == (B, len(slots)),
        f"{name}: _embed returned {shape_of(y)} for {B} anchors and u [{B}, {k}]; expected [{B}, {len(slots)}], one value per slot {list(slots)}",
    )
    x = chart.forward(s, u)
    back = chart.inverse(s, x)
    require(
        isinstance(back, Tensor) and back.shape == (B, k),
        f"{name}: inverse returned {shape_of(back)} for {B} states; expected [{B}, {k}], the coordinates of its box",
    )
    log_j = chart.log_abs_det_jacobian(s, u)
    require(isinstance(log_j, Tensor) and log_j.shape == (B,), f"{name}: log_abs_det_jacobian returned {shape_of(log_j)} for u [{B}, {k}]; expected [{B}]")


def check_measure(measure: Measure, name: str, s: Tensor) -> None:
    """The contract of the measures ``measure`` a kernel returned at the states ``s [B, D]`` (or of a batch-one measure, ``s = s0[None]``)."""
    B, D = s.shape
    a = measure.atoms
    K = a.mask.shape[-1] if isinstance(a.mask, Tensor) and a.mask.dim() else 0
    for field, value, expected in (("mask", a.mask, (B, K)), ("sink", a.sink, (B, K)), ("log_mass", a.log_mass, (B, K)), ("x", a.x, (B, K, D))):
        require(
            isinstance(value, Tensor) and value.shape == expected,
            f"{name}: atoms.{field} is {shape_of(value)} at {B} states of width {D}; expected {list(expected)}"
            + (f" (one state of width {D} per atom slot)" if field == "x" else f" (B = {B} states, K = {K} atom slots)"),
        )
    for field, value in (("mask", a.mask), ("sink", a.sink)):
        require(value.dtype == torch.bool, f"{name}: atoms.{field} has dtype {value.dtype}; expected torch.bool")
    for c, p in enumerate(measure.pieces):
        piece = f"{name} piece {c} ({type(p.chart).__name__})"
        require(
            isinstance(p.context, Tensor) and p.context.shape == (B, D), f"{piece}: context is {shape_of(p.context)}; expected [{B}, {D}], the anchor states"
        )
        require(
            isinstance(p.mask, Tensor) and p.mask.shape == (B,) and p.mask.dtype == torch.bool,
            f"{piece}: mask is {shape_of(p.mask)} of dtype {getattr(p.mask, 'dtype', None)}; expected [{B}] of torch.bool",
        )
        if p.mask.any():
            check_chart(p.chart, piece, p.context[p.mask])


def check_reference(graph: PointedGraph) -> None:
    """The contracts of ``graph.source`` and of its listed measures ``nu`` and ``terminal`` (what the states to probe
    the rest are drawn from); a sampled measure's draws are ``[n, D]``."""
    s0 = graph.source
    require(
        isinstance(s0, Tensor) and s0.dim() == 1 and s0.is_floating_point(),
        f"{graph.name}: source is {shape_of(s0)} of dtype {getattr(s0, 'dtype', None)}; expected one floating-point state [D]",
    )
    for name, measure in (("nu", graph.nu), ("terminal", graph.terminal)):
        if isinstance(measure, SampledMeasure):
            x = measure.states(2)
            require(x.dim() == 2 and x.shape[1] == len(s0), f"{name} ({measure.label}): states returned {shape_of(x)}; expected [n, {len(s0)}]")
        else:
            check_measure(measure, name, s0[None])


def check_encode(encode: Callable[[Tensor], Tensor], name: str, s: Tensor) -> int:
    """The width ``F`` of ``encode(s)``, after its contract: ``[B, F]``, floating point."""
    e = encode(s)
    require(
        isinstance(e, Tensor) and e.dim() == 2 and len(e) == len(s),
        f"{name}: encode returned {shape_of(e)} for {len(s)} states; expected [{len(s)}, F], F features per state",
    )
    require(e.is_floating_point(), f"{name}: encode returned dtype {e.dtype}; expected a floating-point tensor")
    return e.shape[1]


def _input_width(network: MLPPolicy | StateFlow) -> int:
    """The number of features the first linear layer of ``network`` takes (an :class:`MLPPolicy` without a torso: its output layer)."""
    layers = [m for m in (network.torso if isinstance(network, MLPPolicy) else network.net) if isinstance(m, nn.Linear)]
    if isinstance(network, MLPPolicy):
        layers.append(network.out)
    return layers[0].in_features


def check_network(network: nn.Module, name: str, s: Tensor) -> None:
    """The contract of an :class:`MLPPolicy` or :class:`StateFlow` at the states ``s`` (nothing for other modules): its
    input width is that of its own ``encode``, and an :class:`MLPPolicy` has as many atom logits and heads as its kernel
    has atom slots and pieces."""
    if not isinstance(network, (MLPPolicy, StateFlow)):
        return
    label, n_in = f"{name} ({type(network).__name__})", _input_width(network)
    width = check_encode(network.encode, label, s)
    require(width == n_in, f"{label}: its network takes n_in={n_in} features, but encode returned [{len(s)}, {width}]; expected n_in={width}")
    if isinstance(network, MLPPolicy):
        m = network.kernel(s)
        require(
            (network.n_atoms, len(network.heads)) == (m.atoms.count, len(m.pieces)),
            f"{label}: has {network.n_atoms} atom logits and {len(network.heads)} heads; expected {m.atoms.count} and {len(m.pieces)}, the atom slots and pieces its kernel returns",
        )


POLICY_KERNELS = {"P_F": ("kappa", "kappa_b"), "P_B": ("kappa_b", "kappa")}
"""A policy's name -> (the kernel its densities are relative to, the other one)."""


def check_policy_kernel(graph: PointedGraph, name: str, network: nn.Module) -> None:
    """A :class:`ContractError` where the policy ``name`` (``P_F`` or ``P_B``) holds as its ``kernel`` the graph's other
    kernel: P_F is a density w.r.t. :math:`\\kappa`, P_B w.r.t. :math:`\\kappa_b`, and one built on the other kernel
    keeps every shape while its densities are relative to the wrong measure."""
    own, other = POLICY_KERNELS.get(name, ("", ""))
    kernel = getattr(network, "kernel", None)
    if own and kernel is not None and getattr(graph, own) is not getattr(graph, other) and kernel is getattr(graph, other):
        raise ContractError(
            f"{name} is built on graph.{other}, not graph.{own}: a policy is a density w.r.t. its own reference kernel (P_F w.r.t. kappa, P_B w.r.t. kappa_b); build it on graph.{own}"
        )


def check_states(graph: PointedGraph, states: Tensor, terminal: Tensor, networks: dict[str, nn.Module | None]) -> str:
    """Every contract at the non-sink ``states [B, D]`` and the ``terminal`` states ``[M, D]`` (after :func:`check_reference`):
    both kernels, ``encode``, the log-reward and ``networks`` (name -> policy, state flow or ``None``); a one-line summary."""
    kernels = {"kappa(s, .)": graph.kappa(states), "kappa_b(s, .)": graph.kappa_b(states)}
    for name, measure in kernels.items():
        check_measure(measure, name, states)
    width = check_encode(graph.encode, graph.name, states)
    for name, network in networks.items():
        if network is not None:
            check_policy_kernel(graph, name, network)
            check_network(network, name, states)
    if len(terminal):
        graph.checked_log_reward(terminal)
    parts = ", ".join(f"{n.split('(')[0]} {m.atoms.count} atom slots and {len(m.pieces)} piece(s)" for n, m in kernels.items())
    return (
        f"{len(states)} states of width {graph.state_dim}, {len(terminal)} terminal: {parts}, encode width {width}, log_reward [{len(terminal)}] finite or -inf"
    )
