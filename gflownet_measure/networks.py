"""Networks: MLP torsos, the MLP policy over a kernel's components and coordinate heads, and the state flow."""

from __future__ import annotations

import functools
from typing import Callable, Sequence, TypeGuard, cast

import torch
from torch import Tensor, nn
from torch.distributions import Distribution

from .densities import KernelDensity, Policy
from .heads import check_head
from .kernels import Kernel

__all__ = ["MLPPolicy", "StateFlow", "mlp", "tied", "torso"]


def torso(n_in: int, hidden: int, n_layers: int, act=nn.ELU) -> nn.Sequential:
    """``n_layers`` Linear+activation blocks of width ``hidden`` (empty for ``n_layers = 0``)."""
    layers, width = [], n_in
    for _ in range(n_layers):
        layers += [nn.Linear(width, hidden), act()]
        width = hidden
    return nn.Sequential(*layers)


def _width(body: nn.Sequential, n_in: int) -> int:
    """Output width of a torso: its last Linear's, or the input's when it has none."""
    linears = [m for m in body if isinstance(m, nn.Linear)]
    return linears[-1].out_features if linears else n_in


def mlp(n_in: int, hidden: int, n_layers: int, n_out: int, act=nn.ELU) -> nn.Sequential:
    """A :func:`torso` then a linear head of ``n_out`` (``n_layers = 0``: linear)."""
    body = torso(n_in, hidden, n_layers, act)
    return nn.Sequential(*body, nn.Linear(_width(body, n_in), n_out))


def _head_rows(head: nn.Module, raw: Tensor, rows: Tensor) -> Distribution:
    return head(raw[rows])


class MLPPolicy(Policy):
    """A torso on ``encode(s)`` and a linear layer giving atom and piece logits, then one head per piece.

    Args:
        kernel: the reference kernel the density is taken against.
        encode: state features ``[B, F]``.
        n_in: ``F``.
        n_atoms: number of atom slots ``K`` the kernel returns (fixed per space).
        heads: one coordinate head per piece (``n_params`` raw outputs -> Distribution), e.g. :class:`~gflownet_measure.heads.BetaHead`,
            each declaring the box ``domain`` its density lives on, which must be its piece's chart domain:
            :func:`~gflownet_measure.heads.check_head` raises ``ValueError`` otherwise, at every call (a comparison of
            bounds; no arithmetic on the outputs).
        hidden, n_layers: the torso's width and number of Linear+ELU blocks.
        shared_torso: another policy's torso to use instead of a new one (e.g. a learned P_B tied
            to P_F, Lahlou et al. 2023 section 4.1); its parameters are then trained by both.
        source: when given, the raw outputs at this state are free parameters (initialised to 0)
            instead of the network's, as the public quarter-disc code does at :math:`s_0`.
        offset: ``s -> [B, n_out]`` added to the raw outputs at ``s`` (a fixed function of the state, e.g. the torus's
            absolute von Mises locations, :func:`gflownet_measure.environments.torus.absolute_locations`); none if None.
    """

    source: Tensor | None  # a registered buffer (nn.Module's __getattr__ would type it Tensor | Module)

    def __init__(
        self,
        kernel: Kernel,
        encode: Callable[[Tensor], Tensor],
        n_in: int,
        n_atoms: int,
        heads: Sequence[nn.Module] = (),
        hidden: int = 128,
        n_layers: int = 2,
        shared_torso: nn.Sequential | None = None,
        source: Tensor | None = None,
        offset: Callable[[Tensor], Tensor] | None = None,
    ):
        super().__init__(kernel)
        self.offset = offset
        self.encode, self.n_atoms = encode, n_atoms
        self.heads = nn.ModuleList(heads)
        n_out = n_atoms + len(heads) + sum(cast(int, h.n_params) for h in heads)  # a head's int attribute, typed Tensor | Module by nn.Module
        self.torso = shared_torso if shared_torso is not None else torso(n_in, hidden, n_layers)
        self.out = nn.Linear(_width(self.torso, n_in), n_out)
        self.register_buffer("source", source)
        self.source_out = nn.Parameter(torch.zeros(n_out)) if source is not None else None

    def forward(self, s: Tensor, features: Tensor | None = None) -> KernelDensity:
        """The density at ``s``; ``features`` are :meth:`features` of ``s`` when already computed (a tied policy's pass)."""
        m = self.kernel.outline(s)
        return KernelDensity(m, *self.parameters_at(s, m, features))

    def _at_source(self, s: Tensor) -> Tensor | None:
        return (s == self.source.to(s.dtype)).all(1) if self.source is not None else None

    def features(self, s: Tensor, at_source: Tensor | None = None) -> Tensor:
        """The torso's output ``[B, H]`` at ``s``; zero at the source rows (``at_source``, found when not given), whose raw outputs are free parameters (the torso skips them)."""
        at_source = self._at_source(s) if at_source is None else at_source
        if at_source is None or not at_source.any():
            return self.torso(self.encode(s))
        inner = (~at_source).nonzero()[:, 0]
        h = self.torso(self.encode(s[inner]))
        return torch.zeros(len(s), h.shape[1], dtype=h.dtype, device=h.device).index_put((inner,), h)

    def parameters_at(self, s, measure, features: Tensor | None = None):
        if measure.atoms.count != self.n_atoms or len(measure.pieces) != len(self.heads):
            raise ValueError(
                f"MLPPolicy has {self.n_atoms} atom logits and {len(self.heads)} heads, but its kernel returns {measure.atoms.count} atom slots and {len(measure.pieces)} pieces"
            )
        for c, (head, piece) in enumerate(zip(self.heads, measure.pieces)):
            check_head(c, head, piece.chart)
        at_source, source_out = self._at_source(s), self.source_out  # both set, or both None (no ``source``)
        n_source = 0 if at_source is None or source_out is None else int(at_source.sum())
        if source_out is not None and 0 < n_source == len(s):  # the first step of a rollout: free parameters only, no network pass
            out = source_out.expand(len(s), -1)
        else:
            out = self.out(self.features(s, at_source) if features is None else features)
            if at_source is not None and source_out is not None and n_source:
                out = torch.where(at_source[:, None], source_out.expand_as(out), out)
        if self.offset is not None:
            out = out + self.offset(s).to(out.dtype)
        n_logits = self.n_atoms + len(self.heads)
        logits, rest = out[:, :n_logits], out[:, n_logits:]
        coords = []
        for h in self.heads:
            coords.append(functools.partial(_head_rows, h, rest[:, : h.n_params]))
            rest = rest[:, h.n_params :]
        return logits, coords


def tied(pf: Policy, pb: Policy) -> TypeGuard[MLPPolicy]:
    """Whether ``pb`` shares ``pf``'s torso and state encoding, so that one :meth:`MLPPolicy.features` pass serves both
    (both are then :class:`MLPPolicy`)."""
    return isinstance(pf, MLPPolicy) and isinstance(pb, MLPPolicy) and pf.torso is pb.torso and pf.encode is pb.encode


class StateFlow(nn.Module):
    """:math:`\\log F(s)`, a log-density of the state flow w.r.t. :math:`\\nu`, from an MLP on ``encode(s)``: its own
    ``n_layers`` blocks of width ``hidden`` (activation ``act``), or ``shared_torso`` (e.g. a policy's :attr:`MLPPolicy.torso`, whose layers it then
    trains too) under a linear head of its own."""

    def __init__(
        self, encode: Callable[[Tensor], Tensor], n_in: int, hidden: int = 128, n_layers: int = 2, shared_torso: nn.Sequential | None = None, act=nn.ELU
    ):
        super().__init__()
        self.encode = encode
        body = torso(n_in, hidden, n_layers, act) if shared_torso is None else shared_torso
        self.net = nn.Sequential(*body, nn.Linear(_width(body, n_in), 1))  # the same layer objects: a shared torso stays shared

    def forward(self, s: Tensor) -> Tensor:
        return self.net(self.encode(s))[:, 0]
