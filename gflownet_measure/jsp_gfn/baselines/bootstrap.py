"""Bootstrap GES and bootstrap PC: the "B-GES" and "B-PC" baselines of Deleu et al. 2023 (JSP-GFN), section 5.2.

The non-parametric DAG bootstrap of Friedman, Goldszmidt & Wyner 1999: for :math:`b = 1..B`, resample the
:math:`N` rows of the data with replacement (a seeded numpy ``Generator``), learn one equivalence class on the
resample with a causal-learn search, and turn it into one DAG :math:`G_b` (:func:`random_extension`). The weights
are then drawn from the closed-form posterior of the linear-Gaussian model given :math:`G_b` on the *full* data,
:math:`\\theta_b \\sim P(\\theta | G_b, D)` (``model.sample_theta_posterior``), so that each sample is a pair
:math:`(G_b, \\theta_b)` like those of the other methods (DiBS, Lorch et al. 2021; the MCMC baselines).

- GES (Chickering 2002), ``causallearn.search.ScoreBased.GES.ges`` with the linear-Gaussian BIC
  (``local_score_BIC``): a completed PDAG.
- PC (Spirtes, Glymour & Scheines 2000), ``causallearn.search.ConstraintBased.PC.pc`` with Fisher-z
  conditional-independence tests at level ``alpha``, the stable skeleton search and causal-learn's default
  collider rule (``uc_rule=0``, ``uc_priority=2``): a PDAG, which need not be extendable to a DAG.

Cost per resample at d = 20, N = 100 (causal-learn 0.1.4.8, one CPU core): GES about 4 s, PC about 0.7 s when the
core is free (11 s and 1.7 s of wall time when it is shared with another job), so :math:`B = 100` (the most the
JSP-GFN and DiBS papers use, and the default) takes about 7 min (B-GES) and 1 min (B-PC); the theta draws are
negligible.
"""

from __future__ import annotations

import time

import numpy as np
import torch
from causallearn.search.ConstraintBased.PC import pc
from causallearn.search.ScoreBased.GES import ges
from causallearn.utils.cit import fisherz

from gflownet_measure.jsp_gfn.bayesnets.dags import is_dag
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

from .samples import BaselineSamples, check_counts

__all__ = ["GES_SCORES", "random_extension", "bootstrap_ges", "bootstrap_pc"]

GES_SCORES = ("local_score_BIC",)  # causal-learn's linear-Gaussian score; the others are kernel (slow) or discrete


def random_extension(pdag: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One DAG ``[d, d]`` bool (``[i, j]``: ``i -> j``) with the skeleton of a causal-learn PDAG, drawn by random sink removal.

    ``pdag`` is causal-learn's endpoint matrix: ``pdag[j, i] = 1, pdag[i, j] = -1`` is ``i -> j``; ``-1, -1`` is
    ``i - j``; ``1, 1`` (``i <-> j``, a collider conflict of PC) is treated as ``i - j``.

    Rule: the sink-removal algorithm of Dor & Tarsi 1992 with uniformly random choices. Among the nodes left, a
    *candidate* has no directed edge out to the others and each of its undirected neighbours is adjacent to all its
    other neighbours; one candidate, drawn uniformly, becomes a sink: all its edges to the nodes left point into it,
    and it is removed. While a candidate exists this is a consistent extension (the directed edges are kept and no
    new v-structure appears), so a CPDAG of GES always gets one, at random but not uniformly over its Markov
    equivalence class. A PDAG of PC may have none: then a uniformly drawn node without directed out-edges is the sink
    (a new v-structure may appear), and if every node has one (a directed cycle) any node, uniformly (its out-edges
    are reversed). Each step makes the sink a child of every remaining neighbour, so the result is acyclic.
    """
    directed = (pdag == -1) & (pdag.T == 1)  # [i, j]: i -> j (a tail at i, an arrowhead at j)
    adjacent = (pdag != 0) | (pdag.T != 0)
    undirected = adjacent & ~directed & ~directed.T
    d = len(pdag)
    left = np.ones(d, dtype=bool)
    dag = np.zeros((d, d), dtype=bool)
    for _ in range(d):
        nodes = np.flatnonzero(left)
        sinks = nodes[~(directed[np.ix_(nodes, nodes)]).any(1)]
        candidates = [x for x in sinks if _clique_condition(x, nodes, adjacent, undirected)]
        pool = candidates if candidates else (sinks if len(sinks) else nodes)
        x = pool[rng.integers(len(pool))]
        dag[nodes, x] = adjacent[nodes, x]
        left[x] = False
    return dag


def _clique_condition(x: int, nodes: np.ndarray, adjacent: np.ndarray, undirected: np.ndarray) -> bool:
    """Every undirected neighbour of ``x`` among ``nodes`` is adjacent to every other neighbour of ``x`` among ``nodes``."""
    neighbours = nodes[adjacent[x, nodes]]
    for y in nodes[undirected[x, nodes]]:
        others = neighbours[neighbours != y]
        if not adjacent[y, others].all():
            return False
    return True


def _bootstrap(name: str, search, model: LinearGaussian, n_samples: int, seed: int) -> BaselineSamples:
    """``n_samples`` resamples, one :func:`random_extension` of ``search(rows) -> pdag`` each, theta from the full-data posterior."""
    if not isinstance(model, LinearGaussian):
        raise ValueError(f"{name}: model must be a LinearGaussian (the theta posterior is its closed form); got {type(model).__name__}")
    check_counts(name, n_samples=n_samples)
    start = time.perf_counter()
    data = model.data.numpy()
    rng = np.random.default_rng(seed)
    graphs = torch.from_numpy(np.stack([random_extension(search(data[rng.integers(0, len(data), len(data))]), rng) for _ in range(int(n_samples))]))
    if not is_dag(graphs).all():
        raise RuntimeError(f"{name}: an extended graph has a cycle; causal-learn's PDAG encoding may have changed")
    thetas = model.sample_theta_posterior(graphs, torch.Generator().manual_seed(int(rng.integers(2**62))))
    return BaselineSamples(graphs, thetas, time.perf_counter() - start, 0)


def bootstrap_ges(model: LinearGaussian, n_samples: int = 100, seed: int = 0, score: str = "local_score_BIC") -> BaselineSamples:
    """B-GES: ``n_samples`` bootstrap resamples, one GES CPDAG and one DAG each, theta from :math:`P(\\theta | G, D)` (module docstring).

    Returns:
        :class:`~gflownet_measure.jsp_gfn.baselines.samples.BaselineSamples` with ``graphs [n_samples, d, d]`` (``graphs[b]`` from resample
        ``b``), ``thetas`` as returned by ``model.sample_theta_posterior``, ``discarded = 0``. Deterministic given ``seed``.
    """
    if score not in GES_SCORES:
        raise ValueError(f"bootstrap_ges: score must be one of {GES_SCORES}; got {score!r}")
    return _bootstrap("bootstrap_ges", lambda x: ges(x, score_func=score)["G"].graph, model, n_samples, seed)


def bootstrap_pc(model: LinearGaussian, n_samples: int = 100, seed: int = 0, alpha: float = 0.05) -> BaselineSamples:
    """B-PC: ``n_samples`` bootstrap resamples, one PC PDAG (Fisher-z at level ``alpha``) and one DAG each, theta as :func:`bootstrap_ges`."""
    if not 0 < alpha < 1:
        raise ValueError(f"bootstrap_pc: alpha must be in (0, 1); got {alpha!r}")
    return _bootstrap("bootstrap_pc", lambda x: pc(x, alpha, fisherz, show_progress=False).G.graph, model, n_samples, seed)
