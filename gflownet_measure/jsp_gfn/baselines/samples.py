"""The output of the structure-learning baselines (:mod:`.bootstrap`, :mod:`.dibs`, :mod:`.bcd`, :mod:`.vbg`), the check
of their counts, and the thinning of the MCMC chains that run for a wall-clock budget (:class:`EvenThinning`)."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from torch import Tensor

__all__ = ["BaselineSamples", "Clock", "clock", "EvenThinning", "check_counts", "check_seconds"]


class BaselineSamples(NamedTuple):
    """Samples of :math:`(G, \\theta)` from a structure-learning baseline, without an acceptance rate.

    ``graphs [K, d, d]`` bool (``graphs[k, i, j]``: edge ``i -> j``), every one acyclic; ``thetas``: what the
    baseline gives for the weights (see each function), or ``None`` where it gives none in this project's layout;
    ``seconds``: wall time of the run; ``discarded``: samples dropped because they were not DAGs (0 for the
    bootstraps, whose graphs are acyclic by construction), so ``K + discarded`` samples were drawn.
    """

    graphs: Tensor
    thetas: Tensor | None
    seconds: float
    discarded: int


def check_counts(owner: str, **counts) -> None:
    """A one-line ``ValueError`` naming ``owner`` and the first of ``counts`` (name = value) that is not an integer >= 1."""
    for name, value in counts.items():
        if int(value) != value or value < 1:
            raise ValueError(f"{owner}: {name} must be an integer >= 1; got {value!r}")


def check_seconds(owner: str, seconds: float | None, burn_in_fraction: float) -> None:
    """A one-line ``ValueError`` naming ``owner`` unless ``seconds`` is ``None`` or finite and > 0, and ``burn_in_fraction`` in [0, 1)."""
    if seconds is not None and not (isinstance(seconds, int | float) and math.isfinite(seconds) and seconds > 0):
        raise ValueError(f"{owner}: seconds must be None (a step budget) or a finite number > 0; got {seconds!r}")
    if not 0 <= burn_in_fraction < 1:
        raise ValueError(f"{owner}: burn_in_fraction must be in [0, 1); got {burn_in_fraction!r}")


class Clock(NamedTuple):
    """A wall-clock budget in place of a step count (MCMC baselines at matched wall clock): ``seconds`` for all chains,
    the first ``burn_in_fraction`` of each chain's steps discarded."""

    seconds: float
    burn_in_fraction: float

    def least(self, n_samples: int) -> int:
        """The fewest steps after which ``n_samples`` states follow the burn-in: :math:`\\lceil n / (1 - f) \\rceil`."""
        return math.ceil(n_samples / (1 - self.burn_in_fraction))

    def thinning(self, n_samples: int) -> EvenThinning:
        """An :class:`EvenThinning` with room for :math:`2 \\lceil n / (1 - f) \\rceil + 2` states: stopped at a kept state
        after :meth:`least` steps, at least ``n_samples`` of its states follow the burn-in."""
        return EvenThinning(2 * self.least(n_samples) + 2)


def clock(seconds: float | None, burn_in_fraction: float, owner: str) -> Clock | None:
    """``None`` (a step budget) or the :class:`Clock` of ``seconds``; a one-line ``ValueError`` naming ``owner`` for a bad value."""
    check_seconds(owner, seconds, burn_in_fraction)
    return None if seconds is None else Clock(float(seconds), float(burn_in_fraction))


class EvenThinning:
    """Evenly spaced states of a chain whose length is not known in advance (a chain run for a wall-clock budget).

    Step :math:`t = 1, 2, \\dots` is kept when :math:`t` is a multiple of ``thin`` (:meth:`due`); when ``capacity``
    states are kept, every other one is dropped and ``thin`` doubles, so the kept states remain those at the multiples
    of ``thin`` and stay at most ``capacity``, whatever the run's length. :meth:`take` discards a burn-in and picks
    ``n`` evenly spaced states of the rest.
    """

    def __init__(self, capacity: int):
        check_counts("EvenThinning", capacity=capacity)
        self.capacity, self.thin = max(2, int(capacity)), 1
        self.steps: list[int] = []
        self.states: list[Any] = []

    def due(self, step: int) -> bool:
        """Whether the state after ``step`` steps is kept."""
        return step % self.thin == 0

    def keep(self, step: int, state: Any) -> None:
        """Keep ``state`` (a copy the chain will not change) as the state after ``step`` steps; halve when full."""
        self.steps.append(step)
        self.states.append(state)
        if len(self.states) >= self.capacity:
            self.steps, self.states, self.thin = self.steps[1::2], self.states[1::2], 2 * self.thin

    def take(self, n: int, burn_in: int) -> list[Any]:
        """``n`` evenly spaced kept states after step ``burn_in`` (all of them where fewer are kept: at least one, the last)."""
        after = [s for t, s in zip(self.steps, self.states) if t > burn_in] or self.states[-1:]
        if len(after) <= n:
            return after
        return [after[i] for i in np.linspace(0, len(after) - 1, n).round().astype(int)]
