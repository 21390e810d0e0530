"""Evaluation metrics: distances to exact distributions and log Z estimates."""
from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = ["l1_distance", "log_z_bounds", "log_weights"]


def l1_distance(p: Tensor, q: Tensor) -> float:
    """:math:`\\sum_x |p(x) - q(x)|` between two probability vectors (in ``[0, 2]``)."""
    return float((p.double() - q.double()).abs().sum())


def log_weights(log_R: Tensor, log_pf: Tensor, log_pb: Tensor, mask: Tensor) -> Tensor:
    """:math:`w = \\log R(x) + \\sum_t \\log P_B - \\sum_t \\log P_F` per trajectory ``[B]`` (Lahlou et al. 2023, section 4.2)."""
    return log_R + ((log_pb - log_pf) * mask).sum(0)


def log_z_bounds(w: Tensor) -> tuple[float, float]:
    """``(mean w, log-mean-exp w)``: the evidence lower bound and the importance-weighted estimate of :math:`\\log Z`.

    By Jensen both are below :math:`\\log Z` in expectation; the second is consistent as ``K`` grows.
    """
    w = w.double()
    return float(w.mean()), float(torch.logsumexp(w, 0) - math.log(len(w)))
