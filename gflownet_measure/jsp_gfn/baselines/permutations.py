"""Distributions over permutation matrices for BCD Nets (Cundy, Grover & Ermon 2021, section 3.2): Gumbel-Sinkhorn
relaxation, Hungarian hard samples with a straight-through gradient, and the exact log-permanent.

A permutation matrix here is ``P [d, d]`` with ``P[a, i] = 1`` iff node ``i`` sits at position ``a``; logits
:math:`\\theta [d, d]` score the same pairs. The Gumbel-Matching distribution (Mena et al. 2018) draws

.. math:: P = \\arg\\max_{P} \\langle \\theta + \\epsilon, P \\rangle_F, \\qquad \\epsilon_{ai} \\sim \\mathrm{Gumbel}(0, 1),

solved by the Hungarian algorithm (``scipy.optimize.linear_sum_assignment``); its relaxation, the Gumbel-Sinkhorn
matrix :math:`S((\\theta + \\epsilon) / \\tau)`, is the limit of alternate row and column normalisations (Sinkhorn
1964) of :math:`\\exp((\\theta + \\epsilon) / \\tau)`, doubly stochastic and tending to the hard sample as
:math:`\\tau \\to 0` (:data:`SINKHORN_SWEEPS` of them here, :func:`sinkhorn`). BCD Nets' forward pass uses the hard sample and its backward pass the relaxation
(straight-through): :math:`P_{\\mathrm{hard}} + S - \\mathrm{sg}(S)`.

Its density is approximated, as in BCD Nets, by the Gibbs distribution with the same logits,

.. math:: \\log q(P \\mid \\theta) \\approx \\langle \\theta, P \\rangle_F - \\log \\operatorname{perm}(e^{\\theta}),

where the paper approximates the permanent by the Bethe permanent; here it is exact, a log-sum-exp over the
:math:`d!` permutations, so ``d`` is at most :data:`MAX_PERMUTATION_D` (5,040 permutations at ``d = 7``).
"""

from __future__ import annotations

import itertools
import math

import torch
from scipy.optimize import linear_sum_assignment
from torch import Tensor

__all__ = ["MAX_PERMUTATION_D", "all_permutations", "log_permanent", "sinkhorn", "hungarian", "gumbel_noise", "gumbel_permutations"]

MAX_PERMUTATION_D = 7
"""The largest ``d`` whose permanent is enumerated (``d! = 5,040`` terms per matrix)."""
SINKHORN_SWEEPS = 10
"""Row and column normalisations of the Gumbel-Sinkhorn relaxation (Mena et al. 2018 use 20; :func:`sinkhorn`)."""


def all_permutations(d: int) -> Tensor:
    """``[d!, d]`` long: row ``k`` is the ``k``-th permutation :math:`\\sigma` of ``0..d-1`` in lexicographic order (node :math:`\\sigma(a)` at position ``a``)."""
    if not 1 <= d <= MAX_PERMUTATION_D:
        raise ValueError(
            f"all_permutations: d must be in 1..{MAX_PERMUTATION_D} (the permanent is enumerated; the paper's Bethe approximation for larger d is not implemented); got {d}"
        )
    return torch.tensor(list(itertools.permutations(range(d))), dtype=torch.long)


def log_permanent(logits: Tensor, perms: Tensor) -> Tensor:
    """:math:`\\log \\operatorname{perm}(e^{\\theta}) = \\log \\sum_{\\sigma} \\exp \\sum_a \\theta_{a \\sigma(a)}` ``[...]`` for ``logits [..., d, d]``, ``perms`` from :func:`all_permutations`."""
    d = logits.shape[-1]
    picked = logits[..., torch.arange(d), perms]  # [..., d!, d]: theta[a, sigma(a)]
    return torch.logsumexp(picked.sum(-1), -1)


def sinkhorn(log_alpha: Tensor, sweeps: int = SINKHORN_SWEEPS) -> Tensor:
    """``[..., d, d]``: :math:`\\exp(\\log\\alpha)` after ``sweeps`` alternate row and column normalisations (in log space), columns summing to 1.

    A fixed number of sweeps, not BCD Nets' tolerance of 0.01 on the marginals: at ``tau = 0.2`` a batch of 64
    near-tied matrices can take over 100 sweeps to meet it, and the backward pass through them then dominated a step
    (15 ms of about 20 at ``d = 5``). Only the straight-through gradient reads this matrix; the forward pass uses the
    exact hard permutation.
    """
    x = log_alpha
    for _ in range(sweeps):
        x = x - torch.logsumexp(x, -1, keepdim=True)
        x = x - torch.logsumexp(x, -2, keepdim=True)
    return x.exp()


def hungarian(scores: Tensor) -> Tensor:
    """``[B, d, d]`` 0/1 in ``scores``' dtype: per matrix the permutation :math:`\\arg\\max_P \\langle \\text{scores}, P \\rangle_F` (``linear_sum_assignment``)."""
    out = torch.zeros_like(scores)
    for b, s in enumerate(scores.detach().cpu().numpy()):
        rows, cols = linear_sum_assignment(s, maximize=True)
        out[b, torch.from_numpy(rows), torch.from_numpy(cols)] = 1.0
    return out


def gumbel_noise(like: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """Standard Gumbel draws :math:`-\\log(-\\log u)`, :math:`u \\sim U(0, 1)`, of ``like``'s shape and dtype."""
    u = torch.rand(like.shape, dtype=like.dtype, generator=generator).clamp(min=torch.finfo(like.dtype).tiny)
    return -torch.log(-torch.log(u))


def gumbel_permutations(logits: Tensor, tau: float, generator: torch.Generator | None = None) -> Tensor:
    """``[B, d, d]``: one Gumbel-Matching draw per ``logits [B, d, d]``, the hard permutation in the forward pass and the
    gradient of the Gumbel-Sinkhorn matrix :math:`S((\\theta + \\epsilon)/\\tau)` in the backward pass (module docstring)."""
    if not (math.isfinite(tau) and tau > 0):
        raise ValueError(f"gumbel_permutations: tau must be finite and > 0; got {tau!r}")
    noisy = logits + gumbel_noise(logits, generator)
    soft = sinkhorn(noisy / tau)
    return hungarian(noisy) + soft - soft.detach()
