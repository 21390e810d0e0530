"""The output of the structure-learning baselines (:mod:`.bootstrap`, :mod:`.dibs`) and its acyclicity check."""
from __future__ import annotations

from typing import NamedTuple

from torch import Tensor

from environments.dag_params.dags import transitive_closure

__all__ = ["BaselineSamples", "acyclic"]


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


def acyclic(graphs: Tensor) -> Tensor:
    """``[K]`` bool: graph ``k`` of ``graphs [K, d, d]`` has no directed cycle (no ``i != j`` reaching each other)."""
    reach = transitive_closure(graphs)
    return (reach & reach.mT).sum((-2, -1)) == graphs.shape[-1]
