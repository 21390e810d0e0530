"""The output of the structure-learning baselines (:mod:`.bootstrap`, :mod:`.dibs`, :mod:`.bcd`, :mod:`.vbg`), and the check of their counts."""

from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

__all__ = ["BaselineSamples", "check_counts"]


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
