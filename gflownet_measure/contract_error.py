"""The one-line error of the shape contracts (:mod:`gflownet_measure.contracts`), and how a probe raises it: below the
graph, whose :meth:`~gflownet_measure.graph.PointedGraph.checked_log_reward` is one of them."""

from __future__ import annotations

from torch import Tensor

__all__ = ["ContractError", "require", "shape_of"]


class ContractError(ValueError):
    """An object a user wrote returned a tensor of the wrong shape or dtype, or a log-reward that is NaN or ``+inf``.

    Its message is one line: the object, what it returned, what is expected."""


def shape_of(t: object) -> str:
    """``[B, K]`` for a tensor, the type's name for anything else."""
    return str(list(t.shape)) if isinstance(t, Tensor) else type(t).__name__


def require(ok: bool, message: str) -> None:
    """A :class:`ContractError` with the one-line ``message`` unless ``ok``."""
    if not ok:
        raise ContractError(message)
