"""Metrics that compare samples of DAGs with an exact posterior (feature marginals) or with the true graph.

Deleu et al. 2023: Table D.1 (d = 5) compares edge, path and Markov-blanket marginals with the exact
posterior by RMSE and Pearson r; section 5.2 (d = 20) scores samples against the true graph :math:`A^*`
by the expected SHD and the AUROC of the edge marginals (reference facts 4.8).

A feature is a 0/1 matrix :math:`f(G) \\in \\{0, 1\\}^{d \\times d}` (:mod:`gflownet_measure.jsp_gfn.bayesnets.dags`, :data:`FEATURES`):

- ``edge``: :math:`f_{ij} = 1[i \\to j]`;
- ``path``: :math:`f_{ij} = 1[i \\leadsto j]`, a directed path from i to j;
- ``markov``: :math:`f_{ij} = 1[i \\in \\mathrm{MB}(j)]`, i a parent, child or co-parent of j.

Its marginal under samples :math:`G_1..G_K` is :math:`\\hat P(f_{ij}) = \\frac1K \\sum_k f_{ij}(G_k)`.
Every comparison runs over the :math:`d(d-1)` ordered pairs :math:`i \\ne j`: both sides are 0 (or both
1) on the diagonal for every posterior, so the diagonal would only add agreeing points that shrink the
RMSE and pull Pearson r toward 1.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from scipy.stats import rankdata
from torch import Tensor

from gflownet_measure.jsp_gfn.bayesnets.dags import FEATURES, weighted_features

__all__ = ["sample_features", "rmse_pearson", "feature_metrics", "expected_shd", "auroc"]


def _square(name: str, x, fn: str) -> np.ndarray:
    a = x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"{fn}: {name} must be a [d, d] matrix, got shape {a.shape}")
    return a


def _graphs(graphs, fn: str) -> Tensor:
    g = torch.as_tensor(graphs)
    if g.ndim != 3 or g.shape[-1] != g.shape[-2] or g.shape[0] == 0:
        raise ValueError(f"{fn}: graphs must be a non-empty [K, d, d] batch, got shape {tuple(g.shape)}")
    return g.bool()


def _off_diagonal(a: np.ndarray) -> np.ndarray:
    """The ``d (d - 1)`` entries ``a[i, j]``, ``i != j``, row-major."""
    return a[~np.eye(a.shape[0], dtype=bool)]


def sample_features(graphs: Tensor, chunk: int = 4096) -> dict[str, Tensor]:
    """:math:`\\hat P(f_{ij}) = \\frac1K \\sum_k f_{ij}(G_k)` for every feature of :data:`FEATURES`.

    Args:
        graphs: ``[K, d, d]`` adjacency matrices (``adj[i, j]``: i -> j).
        chunk: distinct graphs featurised at once (bounds memory at large K and d).

    Returns:
        ``{"edge", "path", "markov"}``, each ``[d, d]`` float64. Repeated graphs (the common case for MCMC)
        are featurised once and weighted by their counts.
    """
    g = _graphs(graphs, "sample_features")
    K, d = g.shape[0], g.shape[-1]
    unique, counts = torch.unique(g.reshape(K, d * d).to(torch.uint8), dim=0, return_counts=True)  # [U, d*d], [U]
    return weighted_features(unique.reshape(-1, d, d).bool(), counts.double() / K, chunk)


def rmse_pearson(estimate, exact) -> tuple[float, float]:
    """:math:`\\big(\\sqrt{\\mathrm{mean}_{i \\ne j} (\\hat p_{ij} - p_{ij})^2},\\ r(\\hat p, p)\\big)` over ordered pairs ``i != j``.

    The diagonal is left out (module docstring). Pearson r is ``nan`` exactly when one side is constant
    over the off-diagonal pairs (max = min: r is 0/0 there, e.g. an estimate that never saw an edge, or
    an exact posterior uniform over a symmetric class); otherwise it is finite and clipped to [-1, 1].

    Args:
        estimate: ``[d, d]`` estimated marginals (Tensor or array).
        exact: ``[d, d]`` reference marginals.
    """
    est, ref = _square("estimate", estimate, "rmse_pearson"), _square("exact", exact, "rmse_pearson")
    if est.shape != ref.shape or est.shape[0] < 2:
        raise ValueError(f"rmse_pearson: estimate and exact must be [d, d] with the same d >= 2, got {est.shape} and {ref.shape}")
    x, y = _off_diagonal(est).astype(np.float64), _off_diagonal(ref).astype(np.float64)
    rmse = float(np.sqrt(np.mean((x - y) ** 2)))
    if np.ptp(x) == 0 or np.ptp(y) == 0:  # a constant side: r = 0/0 (checked on max - min, not on a rounded variance)
        return rmse, math.nan
    xc, yc = x - x.mean(), y - y.mean()
    r = float(np.dot(xc, yc) / math.sqrt(np.dot(xc, xc) * np.dot(yc, yc)))
    return rmse, min(1.0, max(-1.0, r))  # clip: rounding can leave |r| a few ulp above 1


def feature_metrics(graphs: Tensor, exact_features: dict[str, Tensor]) -> dict[str, float]:
    """RMSE and Pearson r of the sampled feature marginals against exact ones (Deleu et al. 2023, Table D.1).

    Args:
        graphs: ``[K, d, d]`` sampled adjacency matrices.
        exact_features: some of ``{"edge", "path", "markov"}`` -> ``[d, d]`` exact marginals
            (e.g. ``ExactPosterior(model).features()``).

    Returns:
        ``{"<name>_rmse": float, "<name>_r": float}`` for each feature given, in :data:`FEATURES` order.
    """
    unknown = sorted(set(exact_features) - set(FEATURES))
    if unknown:
        raise ValueError(f"feature_metrics: unknown features {unknown}; choose from {tuple(FEATURES)}")
    est = sample_features(graphs)
    out: dict[str, float] = {}
    for name in FEATURES:
        if name in exact_features:
            out[f"{name}_rmse"], out[f"{name}_r"] = rmse_pearson(est[name], exact_features[name])
    return out


def expected_shd(graphs: Tensor, true_adj: Tensor) -> float:
    """:math:`\\mathbb E\\text{-SHD} = \\frac1K \\sum_k \\sum_{i<j} \\min(1, |A_k - A^*|_{ij} + |A_k - A^*|_{ji})` (reference facts 4.8).

    A missing, an extra or a reversed edge each count once (DAGGFN ``utils/metrics.py``).

    Args:
        graphs: ``[K, d, d]`` sampled adjacency matrices.
        true_adj: ``[d, d]`` the true graph :math:`A^*`.
    """
    g = _graphs(graphs, "expected_shd")
    a = torch.as_tensor(_square("true_adj", true_adj, "expected_shd")).bool()
    if a.shape != g.shape[1:]:
        raise ValueError(f"expected_shd: true_adj must be {tuple(g.shape[1:])} to match graphs, got {tuple(a.shape)}")
    diff = g ^ a  # [K, d, d]
    pair = (diff | diff.transpose(-1, -2)).triu(1)  # [K, d, d]: pair {i, j} differs in either direction
    return float(pair.sum((-2, -1)).double().mean())


def auroc(edge_marginals, true_adj) -> float:
    """Area under the ROC curve of the edge marginals as scores for :math:`A^*`, by the Mann-Whitney U formula.

    Over the :math:`d(d-1)` ordered pairs ``i != j`` (the diagonal is a guaranteed negative with score 0 that
    the DAGGFN/sklearn version counts, which inflates the area), with positives P = {A*_ij = 1} and
    negatives N:

    .. math:: \\mathrm{AUROC} = \\frac{\\sum_{p \\in P} \\mathrm{rank}(s_p) - |P|(|P|+1)/2}{|P|\\,|N|}
        = \\Pr(s_p > s_n) + \\tfrac12 \\Pr(s_p = s_n),

    ranks averaged over ties (``scipy.stats.rankdata``), so a tie counts one half. Returns ``nan`` when
    :math:`A^*` has no edge or every off-diagonal edge (:math:`|P| = 0` or :math:`|N| = 0`): the curve is undefined
    with a single class.
    """
    s = _square("edge_marginals", edge_marginals, "auroc")
    a = _square("true_adj", true_adj, "auroc")
    if s.shape != a.shape:
        raise ValueError(f"auroc: edge_marginals and true_adj must have the same [d, d] shape, got {s.shape} and {a.shape}")
    scores, labels = _off_diagonal(s).astype(np.float64), _off_diagonal(a).astype(bool)
    n_pos, n_neg = int(labels.sum()), int((~labels).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    ranks = rankdata(scores)  # average ranks over ties
    return float((ranks[labels].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
