"""Heads whose squashed parameters sit at a bound: a warning, not a condition of the theory (issue 64).

A :class:`~gflownet_measure.heads.SquashedHead` (``BetaHead``, ``BetaMixtureHead``, ``VonMisesHead``) maps raw outputs to
parameters :math:`c_{min} + c_{span}\\,\\sigma(z)`. Where the target needs a concentration beyond
:math:`c_{min} + c_{span}`, training pushes :math:`z` outwards and settles on the sharpest law the head has: the loss
stays finite and the run converges, to a wrong :math:`\\log Z` (0.31 off on a two-branch space with ``c_span = 5``;
``BetaMixtureHead(1, 3, c_span=30)`` fixed it). Nothing about the graph is wrong, so this is no row of the
:class:`~gflownet_measure.checks.results.Report` and never turns a pass into a FAIL; :func:`saturation_warnings` gives
one line per head that sits at a bound at more than :data:`SATURATED_FRACTION` of the states it is used at, which
``check_graph`` adds to the report (``WARNING:`` lines) and a run's evaluations pass to :func:`warnings.warn`
(:func:`gflownet_measure.experiments.common.train_gflownet`).

How: every :class:`~gflownet_measure.heads.SquashedHead` module inside each policy is hooked (``register_forward_hook``,
so any policy that calls its heads as modules is covered, not only :class:`~gflownet_measure.networks.MLPPolicy`); the
policy is evaluated at the given states where its kernel is not zero, and the coordinate family of every piece present
is built at the rows where it is present, which calls the head on exactly those rows. Each row is one state; the head's
:meth:`~gflownet_measure.heads.SquashedHead.saturation` gives, per parameter and bound, the fraction of rows at the bound;
a line names the parameter at a bound most often, and how many others are there at more than half of the states.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple

import torch
from torch import Tensor

from ..densities import Policy
from ..heads import SATURATION_LEVEL, Saturation, SquashedHead

__all__ = ["SATURATED_FRACTION", "SaturationWarning", "head_saturation", "saturation_warnings"]

SATURATED_FRACTION = 0.5
"""A head is reported where one of its squashed parameters sits at a bound (:data:`~gflownet_measure.heads.SATURATION_LEVEL`)
at more than half of the states it is used at. A few states at a bound can be right (a reward that is sharp in one
corner); most of them means the head cannot reach the laws the target asks for over most of the space. A head used at
one state only (a policy's free parameters at :math:`s_0`) counts that state: 0% or 100%."""


class SaturationWarning(NamedTuple):
    """One head at one bound: its name in the policies (``"P_F head 0 (BetaHead(k=1, c_min=0.1, c_span=5))"``), the bound
    (``"cap"`` or ``"floor"``) and the line to print."""

    head: str
    bound: str
    message: str


def _head_name(label: str, name: str, head: SquashedHead) -> str:
    """``"P_F head 1 (BetaHead(k=1, c_min=0.1, c_span=5))"``: ``name`` is the module's path in its policy (``heads.1`` in an MLPPolicy)."""
    short = name.removeprefix("heads.")
    return f"{label} head {short} ({head.describe()})"


def head_saturation(label: str, policy: Policy, states: Tensor) -> list[tuple[str, SquashedHead, Saturation]]:
    """``(head name, head, saturation)`` for every squashed parameter and bound of every :class:`~gflownet_measure.heads.SquashedHead` of ``policy``
    over the states ``states [B, D]`` where its kernel is not zero (module docstring); empty where it has none."""
    heads = [(name, m) for name, m in policy.named_modules() if isinstance(m, SquashedHead)]
    if not heads or not len(states):
        return []
    seen: dict[int, list[Tensor]] = {id(m): [] for _, m in heads}
    hooks = [m.register_forward_hook(lambda mod, args, out: seen[id(mod)].append(args[0].detach())) for _, m in heads]
    try:
        with torch.no_grad():
            s = states[~policy.kernel(states).is_zero()]
            if len(s):
                density = policy(s)
                for c, piece in enumerate(density.measure.pieces):
                    if bool(piece.mask.any()):
                        density.coords[c](piece.mask)
    finally:
        for h in hooks:
            h.remove()
    out = []
    for name, head in heads:
        if seen[id(head)]:
            raw = torch.cat([r.reshape(-1, r.shape[-1]) for r in seen[id(head)]])
            out += [(_head_name(label, name, head), head, sat) for sat in head.saturation(raw)]
    return out


def saturation_warnings(policies: Mapping[str, Policy | None], states: Tensor, where: str, fraction: float = SATURATED_FRACTION) -> list[SaturationWarning]:
    """One warning per head of ``policies`` (label -> policy, ``None`` skipped) and bound where a squashed parameter sits
    at that bound at more than ``fraction`` of ``states`` (of those where the head is used); ``where`` says where the
    states come from (``"sampled from nu"``). Never raises: a policy that cannot be evaluated there gives no warning
    (the checks' rows report it)."""
    lines: list[SaturationWarning] = []
    for label, policy in policies.items():
        if policy is None:
            continue
        try:
            found = head_saturation(label, policy, states)
        except Exception:  # a broken policy: the shapes and normalisation rows say where
            continue
        for name in dict.fromkeys(n for n, _, _ in found):  # each head once, in the policy's order
            head = next(h for n, h, _ in found if n == name)
            for bound in ("cap", "floor"):
                sats = [s for n, _, s in found if n == name and s.bound == bound]
                above = [s for s in sats if s.fraction > fraction]
                if not above:
                    continue
                worst = max(above, key=lambda s: s.fraction)
                more = f" (and {len(above) - 1} more of its {len(sats)} squashed parameters)" if len(above) > 1 else ""
                near = f"within {1 - SATURATION_LEVEL:.0%} of its {bound} {'c_min + c_span' if bound == 'cap' else 'c_min'} = {worst.value:g}"
                message = (
                    f"{name}: {worst.parameter}{more} sits {near} at {worst.fraction:.0%} of the {worst.states} {'state' if worst.states == 1 else 'states'} {where} where the head is used; "
                    f"the target may need a law the head cannot reach, and training then settles on a wrong log Z without an error: {worst.remedy(head)}"
                )
                lines.append(SaturationWarning(name, bound, message))
    return lines
