"""Exact draws of DAGs with probability proportional to :math:`x^{|E|}`, by Robinson's recurrence over source layers.

Every DAG on ``d`` labelled nodes has one layer decomposition: layer 1 is its sources, layer 2 the sources of what is
left once layer 1 is removed, and so on; a node of layer :math:`j \\ge 2` has at least one parent in layer
:math:`j - 1` and any parents in earlier layers. With :math:`a_x(m, k)` the total weight :math:`\\sum_G x^{|E(G)|}`
of the DAGs on ``m`` labelled nodes with exactly ``k`` sources (Robinson 1973, weighted by edges; Kuipers and Moffa
2015 sample uniform DAGs from the unweighted one),

.. math:: a_x(m, m) = 1, \\qquad a_x(m, k) = \\binom{m}{k} \\sum_{s=1}^{m-k} \\big((1 + x)^k - 1\\big)^s (1 + x)^{k (m - k - s)}\\, a_x(m - k, s),

(the ``s`` sources of the rest each take a non-empty set of parents among the ``k``, the other nodes any set), and
:math:`Z_x(d) = \\sum_k a_x(d, k)`. :func:`draw_weighted_dags` draws the layer sizes from these terms, the node labels
by a uniform permutation, and the edges given the layers, so that :math:`P(G) = x^{|E(G)|} / Z_x(d)` exactly.
"""

from __future__ import annotations

import functools
import math

import torch
from torch import Tensor

__all__ = ["log_source_counts", "log_total", "draw_weighted_dags"]


@functools.lru_cache(maxsize=16)
def log_source_counts(d: int, log_x: float) -> Tensor:
    """``[d + 1, d + 1]`` float64: :math:`\\log a_x(m, k)` (module docstring) for ``m, k <= d``, ``-inf`` where ``k = 0`` or
    ``k > m``; cached (read it, never write it)."""
    log1x = math.log1p(math.exp(log_x))
    a = torch.full((d + 1, d + 1), -math.inf, dtype=torch.float64)
    for m in range(1, d + 1):
        for k in range(1, m + 1):
            choose = math.lgamma(m + 1) - math.lgamma(k + 1) - math.lgamma(m - k + 1)
            a[m, k] = choose + (0.0 if k == m else float(torch.logsumexp(_next_layer(a, k, m - k, log1x), 0)))
    return a


def log_total(d: int, log_x: float) -> float:
    """:math:`\\log Z_x(d) = \\log \\sum_G x^{|E(G)|}` over the DAGs on ``d`` labelled nodes (``x = 1``: their number)."""
    return float(torch.logsumexp(log_source_counts(d, log_x)[d, 1:], 0))


def _next_layer(a: Tensor, k: int, r: int, log1x: float) -> Tensor:
    """``[r]``: the log-weights of a next layer of ``s = 1..r`` nodes below a layer of ``k``, with ``r`` nodes left:
    :math:`s \\log((1 + x)^k - 1) + k (r - s) \\log(1 + x) + \\log a_x(r, s)`."""
    s = torch.arange(1, r + 1, dtype=torch.float64)
    return s * math.log(math.expm1(k * log1x)) + k * (r - s) * log1x + a[r, 1 : r + 1]


def _categorical(logits: Tensor, generator: torch.Generator | None) -> Tensor:
    """``[n]`` long: one index per row of ``logits [n, K]`` (unnormalised log-probabilities), by the inverse of its CDF."""
    u = torch.rand(len(logits), 1, generator=generator, dtype=torch.float64)
    return (torch.softmax(logits, 1).cumsum(1) < u).sum(1).clamp(max=logits.shape[1] - 1)


def _layers(n: int, d: int, a: Tensor, log1x: float, generator: torch.Generator | None) -> Tensor:
    """``[n, d]`` long: the layer of each position ``0..d-1`` (positions in layer order), for ``n`` draws."""
    layer = torch.zeros(n, d, dtype=torch.long)
    first = _categorical(a[d, 1:].expand(n, -1), generator) + 1
    done, size, depth = first.clone(), first.clone(), torch.zeros(n, dtype=torch.long)
    pos = torch.arange(d)
    while bool((done < d).any()):
        logits = torch.full((n, d), -math.inf, dtype=torch.float64)
        go = done < d
        for k, r in torch.stack([size, d - done], 1)[go].unique(dim=0).tolist():
            rows = (size == k) & (d - done == r)
            logits[rows, :r] = _next_layer(a, k, r, log1x)
        logits[~go, 0] = 0.0  # finished draws take a dummy step of size 1, discarded below
        s = _categorical(logits, generator) + 1
        depth = depth + go
        layer = torch.where(go[:, None] & (pos >= done[:, None]), depth[:, None], layer)
        done, size = torch.where(go, done + s, done), torch.where(go, s, size)
    return layer


def draw_weighted_dags(n: int, d: int, log_x: float, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """``n`` DAGs ``adj [n, d, d]`` bool, each with probability :math:`x^{|E|} / Z_x(d)` (module docstring), and
    :math:`\\log P(G)` ``[n]`` float64. ``generator`` drives every draw."""
    a = log_source_counts(d, log_x)
    log1x = math.log1p(math.exp(log_x))
    layer = _layers(n, d, a, log1x, generator)  # [n, d], non-decreasing along positions
    below = layer[:, :, None] + 1 == layer[:, None, :]  # [n, t, u]: t in the layer just above u's
    earlier = layer[:, :, None] + 1 < layer[:, None, :]
    p = math.exp(log_x - log1x)  # x / (1 + x): each free edge
    coin = torch.rand(n, d, d, generator=generator, dtype=torch.float64) < p
    # u's parents in the layer above: a non-empty set of weight x^|S|; its first member t is the first of that layer's
    # positions with probability x (1 + x)^(later positions of the layer) / ((1 + x)^k - 1), the later ones free
    later = (below.flip(1).cumsum(1).flip(1) - 1).double()  # [n, t, u]: positions of u's layer above after t
    gumbel = -(-torch.rand(n, d, d, generator=generator, dtype=torch.float64).log()).log()
    score = torch.where(below, later * log1x + gumbel, torch.full_like(gumbel, -math.inf))
    first = score.argmax(1, keepdim=True)  # [n, 1, u]
    t = torch.arange(d)[None, :, None]
    forced = below & ((t == first) | ((t > first) & coin))
    pos_adj = forced | (earlier & coin)
    perm = torch.rand(n, d, generator=generator).argsort(1)  # [n, d]: the node at each position, uniformly
    adj = torch.zeros(n, d, d, dtype=torch.bool)
    rows = torch.arange(n)[:, None, None]
    adj[rows, perm[:, :, None], perm[:, None, :]] = pos_adj
    n_edges = adj.flatten(1).sum(1).double()
    return adj, n_edges * log_x - float(torch.logsumexp(a[d, 1:], 0))
