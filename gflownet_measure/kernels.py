"""Reference kernels kappa(s, .) and kappa_b(s', .) (Lahlou et al. 2023, Definition 1).

A kernel maps a batch of (non-sink) states to a batch of reference measures
(:class:`~gflownet_measure.measures.Measure`): atoms for discrete children or parents and for the
sink, charted pieces for continuous moves. Policies are densities with respect to these measures.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import torch
from torch import Tensor

from .measures import Atoms, Measure, Piece

__all__ = ["Kernel", "FiniteKernel", "atoms_measure"]


class Kernel(ABC):
    """:math:`\\kappa(s, \\cdot)` for a batch of states ``s [B, D]`` (never called on the sink)."""

    @abstractmethod
    def __call__(self, s: Tensor) -> Measure:
        """The reference measures :math:`\\kappa(s_b, \\cdot)`, ``b = 1..B``."""


def atoms_measure(x: Tensor, mask: Tensor, sink: Tensor | None = None, pieces: tuple[Piece, ...] = ()) -> Measure:
    """Counting measure on the candidate states ``x [B, K, D]`` where ``mask [B, K]`` (``sink [B, K]`` marks the sink atom), plus ``pieces``."""
    sink = torch.zeros_like(mask) if sink is None else sink
    return Measure(Atoms(x, torch.zeros(mask.shape, dtype=x.dtype, device=x.device), mask, sink), tuple(pieces))


class FiniteKernel(Kernel):
    """Counting measure on neighbour lists of a finite graph whose states are ``[i]`` (node ids as floats).

    .. math:: \\kappa(i, \\cdot) = \\sum_{j \\in N(i)} \\delta_j \\;(+\\, \\delta_\\bot \\text{ if } i \\text{ is terminable})

    ``neighbours[i]`` lists node ids; ``to_sink[i]`` adds the sink atom. Used for small random
    DAGs in tests and for users' own discrete spaces.
    """

    def __init__(self, neighbours: list[list[int]], to_sink: list[bool] | None = None):
        n = len(neighbours)
        to_sink = to_sink or [False] * n
        width = max([len(v) for v in neighbours] + [0]) + 1
        ids = torch.zeros(n, width)
        mask = torch.zeros(n, width, dtype=torch.bool)
        sink = torch.zeros(n, width, dtype=torch.bool)
        for i, nb in enumerate(neighbours):
            ids[i, : len(nb)] = torch.tensor(nb, dtype=torch.float32)
            mask[i, : len(nb)] = True
            if to_sink[i]:
                mask[i, -1] = sink[i, -1] = True
        self.ids, self.mask, self.sink = ids, mask, sink

    def __call__(self, s: Tensor) -> Measure:
        i = s[:, 0].long()
        return atoms_measure(self.ids[i].to(s.dtype)[..., None], self.mask[i], self.sink[i])
