"""The exact joint posterior :math:`P(G, \\theta | D) = P(G | D) \\prod_j \\mathcal N(\\theta_j; m_j, V_j)` for ``d <= 5`` (docs/references.md, 'Exact posterior').

The ground truth of the JSP-GFN comparisons (Deleu et al. 2023, section 5.1; Lahlou et al. 2023, Table 3):
all DAGs are enumerated and scored in closed form,

.. math:: \\log P(G | D) = \\log P(G) + \\sum_j \\log P(x_j | X_{\\mathrm{Pa}(j)}) - \\log Z,\\qquad
          Z = \\sum_G P(G) P(D | G) = \\sum_G \\int R(G, \\theta) d\\theta,

so :math:`\\log Z` is also the log-partition function of the GFlowNet reward. Only ``d * 2^(d-1)`` local scores
are distinct (80 for ``d = 5``), so building the posterior over the 29,281 DAGs of ``d = 5`` takes well under a second.
"""

from __future__ import annotations

import torch
from torch import Tensor

from gflownet_measure.jsp_gfn.bayesnets.dags import dag_codes, enumerate_dags, weighted_features
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

__all__ = ["ExactPosterior"]


def _normalised(log_w: Tensor) -> Tensor:
    """:math:`\\log w_i - \\log \\sum_k w_k`, shifted by the largest first: where the scores are so large that
    :math:`\\log n` vanishes beside them in float64 (data in huge units: log-joints of 1e25), ``log_w - logsumexp(log_w)``
    gives every tied maximum probability 1; the shifted form keeps the ties at :math:`1 / n`."""
    shifted = log_w - log_w.max()
    return shifted - torch.logsumexp(shifted, 0)


class ExactPosterior:
    """:math:`P(G | D)` over every DAG and :math:`P(\\theta | G, D)` in closed form, for a :class:`LinearGaussian` with ``d <= 5``.

    Attributes:
        dags: ``[n, d, d]`` bool, all DAGs in increasing code order (:func:`~gflownet_measure.jsp_gfn.bayesnets.dags.enumerate_dags`); with
            ``max_parents``, those where no node has more parents: the prior is restricted to them, as the GFlowNet's
            kernel restricts its terminal states.
        log_prob: ``[n]`` float64, :math:`\\log P(G | D)` (logsumexp 0).
    """

    def __init__(self, model: LinearGaussian, max_parents: int | None = None):
        self.model = model
        self.dags = enumerate_dags(model.d, max_parents)
        self._codes = dag_codes(self.dags)  # [n], increasing
        log_joint = model.log_joint_graph(self.dags)  # [n]: log P(G) + log P(D | G)
        self.log_prob = _normalised(log_joint)
        self._log_Z = torch.logsumexp(log_joint, 0)
        self._features: dict[str, Tensor] | None = None
        self._mean_field_features: dict[str, Tensor] | None = None

    def log_normaliser(self) -> float:
        """:math:`\\log Z = \\log \\sum_G P(G) P(D | G)`, the model evidence and the log-partition function of :math:`R(G, \\theta)`."""
        return float(self._log_Z)

    def features(self) -> dict[str, Tensor]:
        """Exact marginals :math:`\\sum_G P(G | D) f(G)` ``[d, d]`` float64 for ``f`` in :data:`~gflownet_measure.jsp_gfn.bayesnets.dags.FEATURES` (edge, path, Markov blanket)."""
        if self._features is None:  # computed once: every evaluation during training compares with it
            self._features = weighted_features(self.dags, self.log_prob.exp())
        return self._features

    def mean_field_log_prob(self) -> Tensor:
        """``[n]`` float64: the graph marginal a diagonal-Gaussian :math:`\\theta` head is trained towards, at best.

        For a fixed :math:`q(\\theta | G)` the squared residual of eq. 6 averaged over :math:`\\theta \\sim q` is minimised by
        flows that balance the means :math:`E_q[\\log R(G, \\theta) - \\log q(\\theta | G)]`, so the terminating
        distribution over graphs is :math:`\\propto P(G) P(D | G)\\, e^{-\\mathrm{KL}(q_G \\| P(\\theta | G, D))}`. With
        each :math:`q_G` the best factorised Gaussian
        (:meth:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian.mean_field_gap`) this is :math:`P(G | D)\\, e^{-\\mathrm{gap}(G)} / Z'`: a bias
        that no training of ``lingauss-diag`` removes where the posterior weights of a child are correlated.
        """
        return _normalised(self.log_prob - self.model.mean_field_gap(self.dags))

    def mean_field_features(self) -> dict[str, Tensor]:
        """The features of :meth:`features` under :meth:`mean_field_log_prob` (computed once)."""
        if self._mean_field_features is None:
            self._mean_field_features = weighted_features(self.dags, self.mean_field_log_prob().exp())
        return self._mean_field_features

    def sample(self, n: int, generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
        """``n`` exact draws :math:`G \\sim P(G | D)`, :math:`\\theta \\sim P(\\theta | G, D)`: ``(adj [n, d, d] bool, theta [n, d * d] float64)``, ``theta`` flat (:class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian`'s layout)."""
        idx = torch.multinomial(self.log_prob.exp(), n, replacement=True, generator=generator)
        adj = self.dags[idx]
        return adj, self.model.sample_theta_posterior(adj, generator)

    def index(self, adj: Tensor) -> Tensor:
        """``[B]`` long: the rows of :attr:`dags` holding the graphs ``adj [B, d, d]`` (looked up by code); raises on a cyclic graph."""
        codes = dag_codes(adj)  # [B]
        idx = torch.searchsorted(self._codes, codes).clamp(max=len(self._codes) - 1)
        missing = self._codes[idx] != codes
        if missing.any():
            raise ValueError(f"adj[{int(missing.nonzero()[0, 0])}] is not a DAG on {self.model.d} nodes (it has a cycle or a self loop)")
        return idx

    def log_prob_graph(self, adj: Tensor) -> Tensor:
        """:math:`\\log P(G | D)` ``[B]`` w.r.t. counting measure on DAGs; raises on a cyclic graph."""
        return self.log_prob[self.index(adj)]

    def log_prob_joint(self, adj: Tensor, theta: Tensor) -> Tensor:
        """:math:`\\log P(G, \\theta | D) = \\log P(G | D) + \\log P(\\theta | G, D)` ``[B]`` w.r.t. counting :math:`\\otimes` Lebesgue on the active entries of the flat ``theta [B, d * d]``."""
        return self.log_prob_graph(adj) + self.model.log_prob_theta_posterior(adj, theta)

    def theta_metric(self, adj: Tensor, theta: Tensor) -> Tensor:
        """:math:`-\\log P(\\theta | G, D)` ``[B]`` for flat ``theta [B, d * d]``, the per-sample "Params" metric of Lahlou et al. 2023, Table 3 (average it, and divide by ``N`` where wanted)."""
        return -self.model.log_prob_theta_posterior(adj, theta)

    def theta_metric_expected(self) -> float:
        """:math:`E_{P(G, \\theta | D)}[-\\log P(\\theta | G, D)] = \\sum_G P(G | D) \\sum_j \\tfrac12 (k_j \\log 2\\pi e + \\log\\det V_j)`: the exact posterior's own value of :meth:`theta_metric`."""
        return float((self.log_prob.exp() * self.model.entropy_theta_posterior(self.dags)).sum())
