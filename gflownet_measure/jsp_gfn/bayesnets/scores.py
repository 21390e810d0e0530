"""Closed-form local scores :math:`\\log P(x_j \\mid X_P)`, θ integrated out, and the one-step lookahead built on them.

The lookahead of :func:`~.policy.action_log_probs` shifts the edge and stop logits by the gains
:math:`g_{ij} = \\log P(G + (i \\to j), D) - \\log P(G, D)` of a marginal score (docs/cpd_models.md, "The lookahead").
Only node ``j``'s local term changes when ``i -> j`` is added, so a gain is a difference of two local scores, and a
score is cached per (node, parent set). :class:`LocalScores` is that cache for any batched local score.

Two marginal scores are closed-form (conjugate priors):

- the linear-Gaussian model's own, :math:`\\log \\mathcal N(x_j; 0, \\sigma^2 I + \\sigma_0^2 X_P X_P^\\top)` (JSP-GFN eq.
  D.24; :class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian`);
- the Dirichlet-categorical (BDeu) score of discrete data (Heckerman, Geiger and Chickering 1995, eq. 35 with the
  uniform prior of Buntine 1991): with :math:`r` states, :math:`q = r^{|P|}` parent configurations, counts
  :math:`N_{jks}` of state :math:`s` under configuration :math:`k` and :math:`N_{jk} = \\sum_s N_{jks}`,

  .. math:: \\log P(x_j \\mid X_P) = \\sum_k \\Big[\\log\\Gamma(\\tfrac{\\alpha}{q}) - \\log\\Gamma(\\tfrac{\\alpha}{q} + N_{jk})
            + \\sum_s \\log\\Gamma(\\tfrac{\\alpha}{qr} + N_{jks}) - \\log\\Gamma(\\tfrac{\\alpha}{qr})\\Big]

  with equivalent sample size :math:`\\alpha` (:data:`BDEU_ESS`), over the rows that do not intervene on ``j``
  (perfect interventions, Cooper and Yoo 1999).

A model without a closed-form marginal gets (:func:`lookahead_scores`): the continuous MLPs their own Laplace local
marginal (:mod:`~gflownet_measure.jsp_gfn.bayesnets.laplace`, Tierney and Kadane 1986), from the per-(node, parent set) solves
that the solver head reads too; the categorical MLP the BDeu score of a conjugate Dirichlet-categorical *surrogate*
on the same data (a Laplace solve of its 16-unit networks per parent set costs seconds; docs/cpd_models.md).

This is a one-step reward lookahead, not a reparametrised flow: the policy's logits are shifted by the reward's
one-step gains, a fixed function of :math:`G` like any other input of the policy, so the GFlowNet's fixed point does
not depend on it; it only sets where training starts (docs/cpd_models.md).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from gflownet_measure.jsp_gfn.bayesnets.laplace import LaplaceCache

__all__ = ["BDEU_ESS", "LocalScores", "bdeu_local_scores", "lookahead_scores"]

BDEU_ESS = 1.0
"""The BDeu equivalent sample size :math:`\\alpha` (1, the common default; Heckerman et al. 1995)."""


class LocalScores:
    """A cache of local scores :math:`\\log P(x_j \\mid X_P)` keyed by ``code * d + j`` (``code = Σ_{i ∈ P} 2^i``), and
    the edge gains of the lookahead.

    Args:
        d: the number of nodes.
        score: ``(nodes [m] long, codes [m] long) -> [m]`` float64, the local scores of ``m`` (child, parent set) pairs.
        log_edge_odds: :math:`\\log\\frac{p}{1-p}` of the graph prior per edge (0 for the uniform prior).

    The cache is two tensors, the keys sorted (ending with a sentinel, the largest long, so that a search never runs
    off the end) and their scores: a batch of keys is one ``searchsorted``; the missing ones are computed in one call
    of ``score`` and merged in order.
    """

    def __init__(self, d: int, score: Callable[[Tensor, Tensor], Tensor], log_edge_odds: float = 0.0):
        self.d, self.score, self.log_edge_odds = d, score, float(log_edge_odds)
        self._keys = torch.tensor([torch.iinfo(torch.long).max])
        self._values = torch.tensor([float("nan")], dtype=torch.float64)

    def __call__(self, keys: Tensor) -> Tensor:
        """The local scores of ``keys`` (long, any shape): float64 of the same shape."""
        keys = keys.cpu()
        pos = torch.searchsorted(self._keys, keys)
        missing = self._keys[pos] != keys
        if missing.any():
            new = torch.unique(keys[missing])
            fresh = torch.zeros(len(self._keys) + len(new), dtype=torch.bool)
            fresh[torch.searchsorted(self._keys, new) + torch.arange(len(new))] = True
            merged_keys, merged_values = torch.empty(len(fresh), dtype=torch.long), torch.empty(len(fresh), dtype=torch.float64)
            merged_keys[fresh], merged_keys[~fresh] = new, self._keys
            merged_values[fresh], merged_values[~fresh] = self.score(new % self.d, new // self.d).cpu(), self._values
            self._keys, self._values = merged_keys, merged_values
            pos = torch.searchsorted(merged_keys, keys)
        return self._values[pos]

    def edge_gains(self, adj: Tensor) -> Tensor:
        """:math:`g_{ij} = \\log P(x_j | X_{\\mathrm{Pa}(j) \\cup i}) - \\log P(x_j | X_{\\mathrm{Pa}(j)}) + \\log\\frac{p}{1-p}`
        ``[B, d, d]`` float64 for ``adj [B, d, d]`` (any value where ``i`` is already a parent of ``j`` or ``i = j``: the
        caller masks the invalid edges); a graph costs ``d^2`` look-ups after the first visits."""
        d = self.d
        codes = (adj.bool().long().cpu() << torch.arange(d)[:, None]).sum(-2)  # [B, d(j)]
        grown = codes[:, None, :] | (1 << torch.arange(d))[None, :, None]  # [B, i, j]: the parent set of j with i added
        nodes = torch.arange(d)
        gains = self(grown * d + nodes) - self(codes * d + nodes)[:, None, :] + self.log_edge_odds
        return gains.to(adj.device)


def bdeu_local_scores(data: Tensor, n_states: int, interventions: Tensor | None = None, ess: float = BDEU_ESS) -> Callable[[Tensor, Tensor], Tensor]:
    """The BDeu local score of the module docstring for states ``data [N, d]`` long in ``0..n_states - 1``, as a batched
    ``score(nodes, codes)`` for :class:`LocalScores`; ``interventions [N, d]`` bool drops row ``n`` from node ``j``'s
    counts where it intervenes on ``j``."""
    data = data.long().cpu()
    observed = None if interventions is None else ~interventions.bool().cpu()
    r = int(n_states)

    def score(nodes: Tensor, codes: Tensor) -> Tensor:
        out = torch.empty(len(nodes), dtype=torch.float64)
        for m, (j, code) in enumerate(zip(nodes.tolist(), codes.tolist())):
            x = data if observed is None else data[observed[:, j]]
            parents = [i for i in range(data.shape[1]) if code >> i & 1]
            config = (x[:, parents] * r ** torch.arange(len(parents))).sum(1) if parents else torch.zeros(len(x), dtype=torch.long)
            _, n_ks = torch.unique(config * r + x[:, j], return_counts=True)  # N_jks > 0
            _, n_k = torch.unique(config, return_counts=True)  # N_jk > 0
            a_k = ess / r ** len(parents)
            a_ks = a_k / r
            n_ks, n_k = n_ks.to(torch.float64), n_k.to(torch.float64)
            out[m] = (torch.lgamma(n_ks + a_ks) - torch.lgamma(torch.tensor(a_ks, dtype=torch.float64))).sum() + (
                torch.lgamma(torch.tensor(a_k, dtype=torch.float64)) - torch.lgamma(n_k + a_k)
            ).sum()
        return out

    return score


def lookahead_scores(model, laplace: LaplaceCache | None = None) -> LocalScores:
    """The :class:`LocalScores` whose gains the lookahead adds for a CPD ``model``: its own closed-form marginal
    (``model.scores``: a linear-Gaussian model), the BDeu score of its states (a categorical model), or the Laplace
    local marginal of its per-node solves (a continuous MLP model: ``laplace``, the cache the solver head reads, or a
    new one on all rows; :mod:`~gflownet_measure.jsp_gfn.bayesnets.laplace`)."""
    if model.scores is not None:
        return model.scores
    if model.kind == "categorical":
        return LocalScores(model.d, bdeu_local_scores(model.data, model.n_states, model.interventions), model.log_edge_odds)
    return LocalScores(model.d, (laplace or LaplaceCache(model)).log_marginal, model.log_edge_odds)
