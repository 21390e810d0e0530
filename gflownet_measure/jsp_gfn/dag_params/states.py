"""States of the DAG x Theta space as flat vectors ``[adj (d*d) | theta (P) | stopped]`` (:mod:`~gflownet_measure.jsp_gfn.dag_params.space`)."""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

__all__ = ["ActiveFn", "split", "join"]

ActiveFn = Callable[[Tensor], Tensor]
"""``adj [..., d, d] bool -> [..., P] bool``: the coordinates of :math:`\\Theta_G` (a CPD model's ``active``)."""


def split(s: Tensor, d: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(adj [B, d, d] bool, theta [B, P], stopped [B] bool)`` of states ``s [B, d^2 + P + 1]``."""
    dd = d * d
    return s[:, :dd].reshape(-1, d, d) > 0.5, s[:, dd:-1], s[:, -1] > 0.5


def join(adj: Tensor, n_params: int, theta: Tensor | None = None, stopped: Tensor | None = None, dtype=torch.float32) -> Tensor:
    """The states ``[B, d^2 + P + 1]`` of ``adj [B, d, d]``, ``theta [B, P]`` (default 0; ``P`` = ``n_params``) and ``stopped [B]`` (default False)."""
    B = adj.shape[0]
    theta = torch.zeros(B, n_params, dtype=dtype) if theta is None else theta.to(dtype)
    stopped = torch.zeros(B, dtype=dtype) if stopped is None else stopped.to(dtype)
    return torch.cat([adj.to(dtype).flatten(1), theta, stopped[:, None]], 1)
