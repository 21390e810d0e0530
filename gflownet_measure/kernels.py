"""Reference kernels kappa(s, .) and kappa_b(s', .) (Lahlou et al. 2023, Definition 1).

A kernel maps a batch of (non-sink) states to a batch of reference measures
(:class:`~gflownet_measure.measures.Measure`): atoms for discrete children or parents and for the
sink, charted pieces for continuous moves. Policies are densities with respect to these measures.

Two paths give the same measures. ``kernel(s)`` materialises them, every atom's state in a ``[B, K, D]``
block: the reference, and what the theory checks integrate. :meth:`Kernel.outline` is what the policies
use: by default the same call; a kernel with a fast path returns its atoms' masks, masses and sink flags
with the states left implicit (:class:`ImplicitAtoms`) and answers the two questions a policy asks of them
with its own formulas: the state of one named atom (:meth:`Kernel.child`, for a draw) and the atom that
holds a given state (:meth:`Kernel.atom_of`, for a log-density).
"""

from __future__ import annotations

import functools
from abc import ABC, abstractmethod

import torch
from torch import Tensor

from .measures import Atoms, Measure, Piece

__all__ = ["Kernel", "ImplicitAtoms", "Materialised", "FiniteKernel", "atoms_measure"]


class Kernel(ABC):
    """:math:`\\kappa(s, \\cdot)` for a batch of states ``s [B, D]`` (never called on the sink).

    ``__call__`` is the one method to write. The fast path is optional: :meth:`outline`, :meth:`child` and
    :meth:`atom_of` fall back to the materialised measure, and a kernel with a fast path overrides the three
    (``docs/math.md``, 'The fast path of a kernel').
    """

    @abstractmethod
    def __call__(self, s: Tensor) -> Measure:
        """The reference measures :math:`\\kappa(s_b, \\cdot)`, ``b = 1..B``, every atom's state built."""

    def outline(self, s: Tensor) -> Measure:
        """The same measures as the policies see them: ``self(s)`` by default; with a fast path, the atoms as
        :class:`ImplicitAtoms` (``log_mass``, ``mask`` and ``sink`` ``[B, K]``, no states) and the pieces as ``self(s)`` has them."""
        return self(s)

    def child(self, s: Tensor, k: Tensor) -> Tensor:
        """The states :math:`x_{b, k_b}` ``[B, D]`` of the atom slots ``k [B]`` of :math:`\\kappa(s_b, \\cdot)`: a present slot, or the
        last slot where a policy drew a piece (the draw then overwrites that row)."""
        return self(s).atoms.take(k)

    def atom_of(self, s: Tensor, x: Tensor, sink: Tensor) -> Tensor:
        """``[B]`` long: the atom slot of :math:`\\kappa(s_b, \\cdot)` that holds ``(x_b, sink_b)``
        (:meth:`~gflownet_measure.measures.Atoms.locate`), -1 if none. A fast path may name a slot absent at ``s_b``:
        :meth:`ImplicitAtoms.locate` checks presence against its mask."""
        return self(s).atoms.locate(x, sink)

    def boundaries(self, s: Tensor) -> Tensor | None:
        """Where :math:`s \\mapsto \\kappa(s, \\cdot)` may jump inside a piece of :math:`\\nu`: ``[B, L]`` level functions whose
        zero sets are the known boundaries (a jump between two states where one of them changes sign, or is 0, is declared);
        ``None`` (the default): none. Eq. 3 asks only that :math:`s \\mapsto \\kappa(s, B)` be measurable, so a kernel may
        switch components across a boundary (the quarter disc's forced exit); declaring it tells the eq. 3 row
        (:mod:`gflownet_measure.checks.continuity`) that a jump there is meant. A policy's jumps are declared by its kernel's."""
        return None


class ImplicitAtoms(Atoms):
    """The atoms of :math:`\\kappa(s, \\cdot)` with their states left to ``kernel``.

    ``log_mass``, ``mask`` and ``sink`` ``[B, K]`` are those of :class:`~gflownet_measure.measures.Atoms`; :meth:`take`
    builds the named children only (:meth:`Kernel.child`); :meth:`locate` is :meth:`Kernel.atom_of` restricted to present
    slots; ``x [B, K, D]``, for a reader that needs every state (the checks, flow matching), is the materialised
    ``kernel(s)``'s, built on first use.
    """

    kernel: Kernel
    s: Tensor

    def __init__(self, kernel: Kernel, s: Tensor, log_mass: Tensor, mask: Tensor, sink: Tensor):
        for name, value in (("kernel", kernel), ("s", s), ("log_mass", log_mass), ("mask", mask), ("sink", sink)):
            object.__setattr__(self, name, value)  # the fields of a frozen dataclass

    @functools.cached_property
    def x(self) -> Tensor:
        return self.kernel(self.s).atoms.x

    def take(self, k: Tensor) -> Tensor:
        return self.kernel.child(self.s, k)

    def locate(self, x: Tensor, sink: Tensor) -> Tensor:
        k = self.kernel.atom_of(self.s, x, sink)
        present = (k >= 0) & self.mask.gather(1, k.clamp(min=0)[:, None])[:, 0]
        return torch.where(present, k, -1)


class Materialised(Kernel):
    """``kernel`` on its materialised path only (:meth:`Kernel.outline`, :meth:`Kernel.child`, :meth:`Kernel.atom_of` fall back
    to ``kernel(s)``), every other attribute ``kernel``'s: the reference a fast path is tested and timed against."""

    def __init__(self, kernel: Kernel):
        self.kernel = kernel

    def __call__(self, s: Tensor) -> Measure:
        return self.kernel(s)

    def boundaries(self, s: Tensor) -> Tensor | None:
        return self.kernel.boundaries(s)

    def __getattr__(self, name: str):
        if name == "kernel":  # not set yet (a copy being built): no recursion
            raise AttributeError(name)
        return getattr(self.kernel, name)


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
