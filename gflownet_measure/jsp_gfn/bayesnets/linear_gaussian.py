"""The linear-Gaussian Bayesian network of JSP-GFN (Deleu et al. 2023, section 5.1; docs/references.md, 'JSP-GFN').

Model, with :math:`\\sigma^2` = ``obs_var`` and :math:`\\sigma_0^2` = ``prior_var``:

.. math:: X_j = \\sum_i \\theta_{ij} A_{ij} X_i + \\varepsilon_j,\\quad \\varepsilon_j \\sim \\mathcal N(0, \\sigma^2),
          \\qquad \\theta_{ij} \\sim \\mathcal N(0, \\sigma_0^2) \\text{ for active } A_{ij} = 1,

and the reward of the hybrid GFlowNet is :math:`\\log R(G, \\theta) = \\log P(D | G, \\theta) + \\log P(\\theta | G) + \\log P(G)`
(the priors and the reward: :mod:`gflownet_measure.jsp_gfn.bayesnets.cpd_base`). A parameter vector is flat, ``theta [..., P]`` with :math:`P = d^2`
row-major: ``theta[i * d + j]`` = :math:`\\theta_{ij}`, the weight of :math:`i \\to j` (``theta_matrix.flatten(-2)``);
node ``j``'s block is its column, the positions ``i * d + j``.

Per child :math:`j` with parent data :math:`X_P` ``[N, k]`` and column :math:`x` ``[N]``, the weights
integrate out in closed form (JSP-GFN eq. D.24; docs/references.md, 'Exact posterior'):

.. math:: V_j = (I / \\sigma_0^2 + X_P^\\top X_P / \\sigma^2)^{-1},\\quad m_j = V_j X_P^\\top x / \\sigma^2,

.. math:: \\log P(x | X_P) = \\log \\mathcal N(x; 0, \\sigma^2 I_N + \\sigma_0^2 X_P X_P^\\top)
          = -\\tfrac12\\big[N \\log 2\\pi\\sigma^2 + k \\log \\sigma_0^2 - \\log\\det V_j + \\|x\\|^2/\\sigma^2 - m_j^\\top V_j^{-1} m_j\\big]

(Woodbury and the determinant lemma in the ``k``-dimensional space). Only the Gram matrix
:math:`X^\\top X` enters, so every local term costs :math:`O(k^3)`; they are cached per (node, parent set).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from gflownet_measure.gaussian import LOG_2PI
from gflownet_measure.jsp_gfn.bayesnets.cpd_base import CPDModel, check_variance
from gflownet_measure.jsp_gfn.bayesnets.scores import LocalScores

__all__ = ["LinearGaussian"]


class _Local(NamedTuple):
    """Closed-form quantities of one child given one parent set (``k`` parents), float64."""

    parents: Tensor  # [k] long
    log_marginal: float  # log P(x_j | X_P), theta integrated out
    mean: Tensor  # [k]: m_j
    cov: Tensor  # [k, k]: V_j
    chol_prec: Tensor  # [k, k]: lower L with L L^T = V_j^{-1}
    entropy: float  # 0.5 (k log(2 pi e) + log det V_j)
    mean_field_gap: float  # KL(q* || N(m_j, V_j)) for the best factorised Gaussian q*: 0.5 (sum_i log (V_j^-1)_ii - log det V_j^-1)


class LinearGaussian(CPDModel):
    """Data and hyper-parameters of the linear-Gaussian network; batched log-densities over ``adj [..., d, d]`` and flat ``theta [..., d * d]``.

    Args:
        data: ``[N, d]`` observations (cast to float64).
        obs_var: :math:`\\sigma^2`, the noise variance (0.01 in JSP-GFN: noise std 0.1).
        prior_var: :math:`\\sigma_0^2`, the variance of each active weight.
        graph_prior: ``"uniform"`` (:math:`\\log P(G) = 0`) or ``"erdos_renyi"``
            (:math:`\\log P(G) = |E| \\log\\frac{p}{1-p}`, :math:`p = 2k/(d-1)`, unnormalised as in the JSP code).
        edges_per_node: ``k`` of the Erdos-Renyi prior.
        interventions: ``[N, d]`` 0/1, perfect interventions (:class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel`): node ``j``'s terms, and its
            closed-form posterior, read only the rows that do not intervene on it (:math:`O_j`), through its own Gram
            matrix :math:`C^{(j)} = \\sum_{n \\in O_j} x_n x_n^\\top` and row count :math:`N_j = |O_j|`.
    """

    kind = "continuous"
    interventional = True
    scores: LocalScores  # the closed-form marginal's cache, set in __init__

    def __init__(
        self,
        data: Tensor,
        obs_var: float = 0.01,
        prior_var: float = 1.0,
        graph_prior: str = "uniform",
        edges_per_node: float = 1.0,
        interventions: Tensor | None = None,
    ):
        check_variance("LinearGaussian", "obs_var", obs_var)
        super().__init__(data, prior_var, graph_prior, edges_per_node, interventions)
        self.obs_var = float(obs_var)
        self.block = self.d  # node j's block: the weights of its column
        self.grams, self.counts = self._node_grams(self.data, None)  # [d, d, d] (C^(j) = X_{O_j}^T X_{O_j}), [d] (N_j)
        self._cache: dict[tuple[int, int], _Local] = {}
        self.scores = LocalScores(self.d, lambda nodes, codes: self._closed_forms(nodes, codes)[0], self.log_edge_odds)  # the lookahead's cache

    def _node_grams(self, x: Tensor, rows: Tensor | None) -> tuple[Tensor, Tensor]:
        """Per node ``j`` the Gram matrix of the rows ``x [M, d]`` that do not intervene on ``j`` and their count:
        ``[d, d, d]`` and ``[d]`` float64 (every node the same :math:`X^\\top X` and ``M`` for observational data)."""
        if self.interventions is None:
            return (x.T @ x).expand(self.d, self.d, self.d), torch.full((self.d,), float(len(x)), dtype=torch.float64)
        intervened = self._intervened(rows)
        assert intervened is not None  # the model has interventions
        observed = ~intervened  # [M, d]
        w = observed.to(x.dtype)
        return torch.einsum("nj,ni,nk->jik", w, x, x), w.sum(0)

    # ---------------------------------------------------------------- densities of (G, theta)

    def block_index(self) -> Tensor:
        """``[d, d]`` long, ``[j, i]`` = ``i * d + j``: node ``j``'s block is column ``j`` of :math:`\\theta`."""
        return torch.arange(self.d * self.d).view(self.d, self.d).T.contiguous()

    def active(self, adj: Tensor) -> Tensor:
        """``[..., d * d]`` bool: :math:`\\theta_{ij}` is active iff :math:`A_{ij} = 1` (``adj.flatten(-2)``)."""
        self._check_adj(adj)
        return adj.bool().flatten(-2)

    def log_likelihood(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`\\log P(D | G, \\theta) = \\sum_j \\sum_{n \\in O_j} \\log \\mathcal N(x_{nj}; \\sum_i \\theta_{ij} A_{ij} x_{ni}, \\sigma^2)` ``[...]``
        (:math:`O_j`: the rows that do not intervene on ``j``; all rows for observational data).

        From node ``j``'s Gram matrix :math:`C = C^{(j)} = X_{O_j}^\\top X_{O_j}` alone, with :math:`W = \\theta \\odot A`:

        .. math:: \\sum_{n \\in O_j} (x_{nj} - (XW)_{nj})^2 = C_{jj} - 2 \\sum_i W_{ij} C_{ij} + \\sum_{i,k} W_{ij} C_{ik} W_{kj},

        so the cost is :math:`O(d^3)` per graph whatever ``N`` (float64: the three terms nearly cancel).
        ``theta [..., d * d]`` broadcasts with ``adj`` (e.g. ``[S, B, d * d]`` against ``[B, d, d]``); only its active
        coordinates are read; the result is in ``theta``'s dtype and differentiable in it. With ``rows`` (``[M]`` long),
        the unbiased mini-batch estimate :math:`\\frac{N}{M} \\sum_{n \\in \\text{rows}}` (JSP-GFN eq. 13).
        """
        x, scale = self._rows(rows)  # [M, d]
        C, counts = (self.grams, self.counts) if rows is None else self._node_grams(x, rows)  # [d (node j), d, d], [d]
        W = self._masked(adj, theta).unflatten(-1, (self.d, self.d)).transpose(-1, -2)  # [..., j, i] = W_ij: node j's column
        nodes = torch.arange(self.d)
        rss = C[nodes, nodes, nodes] - 2 * (W * C[nodes, :, nodes]).sum(-1) + torch.einsum("...ji,jik,...jk->...j", W, C, W)  # [..., d]
        ll = -0.5 * rss.sum(-1) / self.obs_var - 0.5 * float(counts.sum()) * (LOG_2PI + math.log(self.obs_var))
        return (ll * scale).to(theta.dtype)

    def log_reward_hvp(self, adj: Tensor, theta: Tensor, v: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`-\\nabla^2_\\theta \\log R\\, v` in closed form: :math:`\\log R` is quadratic in :math:`\\theta`, its negative Hessian
        block-diagonal over the nodes, :math:`\\Lambda_j = I/\\sigma_0^2 + C^{(j)}/\\sigma^2` on the parents of ``j`` (the
        precision of JSP-GFN eq. D.24, times :math:`N/M` on a mini-batch's Gram matrices), so that
        :math:`(\\Lambda v)_{ij} = v_{ij}/\\sigma_0^2 + \\sum_k C^{(j)}_{ik} v_{kj} / \\sigma^2` on the edges, 0 elsewhere. ``[..., d * d]`` float64."""
        C, scale = self._grams_of(rows)
        on = self.active(adj)
        V = torch.where(on, v.to(torch.float64), 0.0).unflatten(-1, (self.d, self.d))  # [..., i, j]
        lik = torch.einsum("jik,...kj->...ij", C, V).flatten(-2) * (scale / self.obs_var)
        return torch.where(on, lik + V.flatten(-2) / self.prior_var, 0.0)

    def likelihood_curvature(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`C^{(j)}_{ii} / \\sigma^2` at :math:`\\theta_{ij}` (times :math:`N/M` on a mini-batch): the exact diagonal of :math:`-\\nabla^2 \\log P(D | G, \\theta)`, whatever ``theta``. ``[..., d * d]`` float64."""
        C, scale = self._grams_of(rows)
        diag = C.diagonal(dim1=-2, dim2=-1).T * (scale / self.obs_var)  # [d(i), d(j)]: C^(j)_ii
        return diag.flatten().expand(*adj.shape[:-2], self.d * self.d)

    def conditional_precision(self, adj: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`\\Lambda_j = I/\\sigma_0^2 + C^{(j)}/\\sigma^2` on the parents of each node ``j`` (times :math:`N/M` on a mini-batch), the
        identity on the rows and columns of non-parents: ``[..., d(j), d, d]`` float64, positive definite, the parent block
        the precision of :math:`\\theta_{\\cdot j} \\mid G, D` (JSP-GFN eq. D.24) and the rest decoupled."""
        C, scale = self._grams_of(rows)
        on = self.active(adj).unflatten(-1, (self.d, self.d)).transpose(-1, -2)  # [..., j, i]: i is a parent of j
        pair = on[..., :, None] & on[..., None, :]
        eye = torch.eye(self.d, dtype=torch.float64)
        return torch.where(pair, C * (scale / self.obs_var) + eye / self.prior_var, eye)

    def newton_direction(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`\\Lambda_j^{-1} \\nabla_{\\theta_{\\cdot j}} \\log R` per node by a Cholesky solve of :meth:`conditional_precision`,
        ``[..., d * d]`` float64: one step from any ``theta`` lands on the conditional posterior mean :math:`m_j` (JSP-GFN
        eq. D.24), where conjugate gradients lose conjugacy on nearly collinear parents (a dense graph's: measured 9 nats
        short of the maximum after 19 steps on a complete DAG at d = 20)."""
        on = self.active(adj).unflatten(-1, (self.d, self.d)).transpose(-1, -2)
        _, grad = self.log_reward_and_grad(adj, theta, rows)
        g = torch.where(on, grad.unflatten(-1, (self.d, self.d)).transpose(-1, -2), 0.0)  # [..., j, i]
        step = torch.cholesky_solve(g[..., None], torch.linalg.cholesky(self.conditional_precision(adj, rows)))[..., 0]
        return torch.where(on, step, 0.0).transpose(-1, -2).flatten(-2)

    def _grams_of(self, rows: Tensor | None) -> tuple[Tensor, float]:
        """``(C [d(j), d, d], N / M)``: the node Gram matrices of the rows ``rows`` (all rows when ``None``) and the mini-batch factor."""
        x, scale = self._rows(rows)
        return (self.grams if rows is None else self._node_grams(x, rows)[0]), scale

    # ---------------------------------------------------------------- closed forms, theta integrated out

    def _closed_forms(self, nodes: Tensor, codes: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """Eq. D.24 for ``m`` (child ``nodes[k]``, parent set ``{i : bit i of codes[k]}``) pairs at once: ``(log P(x_j | X_P) [m],
        m_j [m, d], L [m, d, d], log det V_j [m], parents [m, d] bool)``, float64.

        Each precision is padded to ``d x d``, :math:`V_j^{-1} = I/\\sigma_0^2 + C^{(j)}_{PP}/\\sigma^2` on the parents and the
        identity elsewhere: the two blocks decouple, so the lower Cholesky factor ``L`` (:math:`L L^\\top` the padded
        precision), the mean (0 off the parents, :math:`b = C^{(j)}_{Pj}/\\sigma^2` being 0 there) and
        :math:`\\log\\det V_j = -2 \\sum_a \\log L_{aa}` are the parent block's, one batched factorisation for all pairs."""
        d, rows = self.d, torch.arange(len(nodes))
        parents = (codes[:, None] >> torch.arange(d)) & 1 > 0  # [m, d]
        gram = self.grams[nodes]  # [m, d, d]: each child's rows that do not intervene on it
        eye = torch.eye(d, dtype=torch.float64)
        prec = torch.where(parents[:, :, None] & parents[:, None, :], eye / self.prior_var + gram / self.obs_var, eye)
        chol = torch.linalg.cholesky(prec)
        b = torch.where(parents, gram[rows, :, nodes] / self.obs_var, 0.0)  # [m, d]: X_P^T x / sigma^2
        mean = torch.cholesky_solve(b[..., None], chol)[..., 0]
        log_det_v = -2.0 * chol.diagonal(dim1=-2, dim2=-1).log().sum(-1)
        k = parents.sum(-1, dtype=torch.float64)  # (a long times a float would be float32)
        log_marginal = -0.5 * (
            self.counts[nodes] * (LOG_2PI + math.log(self.obs_var))
            + k * math.log(self.prior_var)
            - log_det_v
            + gram[rows, nodes, nodes] / self.obs_var
            - (b * mean).sum(-1)
        )
        return log_marginal, mean, chol, log_det_v, parents

    def _local(self, node: int, code: int) -> _Local:
        """The cached :class:`_Local` of child ``node`` with parent set ``{i : bit i of code}`` (:meth:`_closed_forms`, cut to the parents)."""
        key = (node, code)
        if key not in self._cache:
            log_marginal, mean, chol, log_det_v, on = (v[0] for v in self._closed_forms(torch.tensor([node]), torch.tensor([code])))
            parents = on.nonzero()[:, 0]
            chol, log_det = chol[parents][:, parents], float(log_det_v)
            prec_diag = 1.0 / self.prior_var + self.grams[node].diagonal()[parents] / self.obs_var  # (V^{-1})_ii
            entropy = 0.5 * (len(parents) * (LOG_2PI + 1.0) + log_det)
            gap = 0.5 * (float(prec_diag.log().sum()) + log_det)
            self._cache[key] = _Local(parents, float(log_marginal), mean[parents], torch.cholesky_inverse(chol), chol, entropy, gap)
        return self._cache[key]

    def _parent_codes(self, adj: Tensor) -> Tensor:
        """:math:`c_j = \\sum_i A_{ij} 2^i`: ``[..., d]`` long, the parent set of every node as an integer."""
        self._check_adj(adj)
        return (adj.long() << torch.arange(self.d, device=adj.device)[:, None]).sum(-2)

    def _unique_locals(self, adj: Tensor) -> tuple[list[_Local], Tensor]:
        """The distinct (node, parent set) pairs of ``adj [..., d, d]``: their :class:`_Local` list and ``inverse [..., d]`` into it."""
        keys = self._parent_codes(adj) * self.d + torch.arange(self.d, device=adj.device)  # [..., d]
        uniq, inverse = torch.unique(keys, return_inverse=True)
        return [self._local(k % self.d, k // self.d) for k in uniq.tolist()], inverse

    def _groups(self, adj: Tensor):
        """Yield ``(local, graphs [n] long, node)`` for every distinct (node, parent set) with parents among ``adj [B, d, d]``."""
        locals_, inverse = self._unique_locals(adj)
        for u, local in enumerate(locals_):
            if len(local.parents):
                graphs, nodes = (inverse == u).nonzero().unbind(1)
                yield local, graphs, int(nodes[0])

    def _per_graph(self, adj: Tensor, field: str) -> Tensor:
        """:math:`\\sum_j` ``local.<field>`` over the nodes of each graph: ``[...]`` float64."""
        locals_, inverse = self._unique_locals(adj)
        values = torch.tensor([getattr(local, field) for local in locals_], dtype=torch.float64)
        return values[inverse].sum(-1)

    def edge_gains(self, adj: Tensor) -> Tensor:
        """The lookahead's gains ``[B, d, d]`` float64 of the closed-form marginal (:meth:`~gflownet_measure.jsp_gfn.bayesnets.scores.LocalScores.edge_gains`):
        only node ``j``'s local term changes when ``i -> j`` is added (JSP-GFN eq. D.24)."""
        return self.scores.edge_gains(adj)

    def local_log_marginal(self, node: int, parents) -> float:
        """:math:`\\log P(x_j | X_P) = \\log \\mathcal N(x_j; 0, \\sigma^2 I_N + \\sigma_0^2 X_P X_P^\\top)` (JSP-GFN eq. D.24).

        ``parents``: a tuple of indices, or a bool/0-1 vector ``[d]`` (tensor, array or list).
        """
        if not 0 <= node < self.d:
            raise ValueError(f"local_log_marginal: node must be in 0..{self.d - 1}; got {node}")
        if isinstance(parents, tuple):
            index = list(parents)
        else:
            vector = torch.as_tensor(parents)
            if vector.shape != (self.d,):
                raise ValueError(f"local_log_marginal: parents must be a tuple of indices or a 0-1 vector [{self.d}]; got shape {tuple(vector.shape)}")
            index = vector.bool().nonzero()[:, 0].tolist()
        if any(not 0 <= i < self.d or i == node for i in index):
            raise ValueError(f"local_log_marginal: parents must be nodes in 0..{self.d - 1} other than {node}; got {index}")
        return self._local(node, sum(1 << i for i in set(index))).log_marginal

    def log_marginal_likelihood(self, adj: Tensor) -> Tensor:
        """:math:`\\log P(D | G) = \\sum_j \\log P(x_j | X_{\\mathrm{Pa}(j)})` ``[...]`` float64 (0-dim for one graph)."""
        return self._per_graph(adj, "log_marginal")

    def log_joint_graph(self, adj: Tensor) -> Tensor:
        """:math:`\\log P(G) + \\log P(D | G) = \\log \\int R(G, \\theta) d\\theta` ``[...]`` float64."""
        return self.log_marginal_likelihood(adj) + self.log_prior_graph(adj)

    def theta_posterior(self, adj: Tensor) -> tuple[Tensor, Tensor]:
        """:math:`\\theta_{\\mathrm{Pa}(j), j} | G, D \\sim \\mathcal N(m_j, V_j)` (JSP-GFN eq. D.24) for one graph ``adj [d, d]``.

        Returns:
            ``mean [d * d]`` flat (``mean[i * d + j]`` = :math:`(m_j)_i` for parents ``i``, else 0) and ``cov [d, d, d]``,
            ``cov[j]`` the covariance of node ``j``'s block ``theta[block_index()[j]]`` (:math:`V_j` at the parent rows
            and columns, else 0), float64.
        """
        if adj.shape != (self.d, self.d):
            raise ValueError(f"theta_posterior: adj must be one graph [{self.d}, {self.d}]; got shape {tuple(adj.shape)}")
        mean = torch.zeros(self.d, self.d, dtype=torch.float64)
        cov = torch.zeros(self.d, self.d, self.d, dtype=torch.float64)
        for j, code in enumerate(self._parent_codes(adj).tolist()):
            local = self._local(j, code)
            mean[local.parents, j] = local.mean
            cov[j][local.parents[:, None], local.parents] = local.cov
        return mean.flatten(), cov

    def sample_theta_posterior(self, adj: Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Exact draws :math:`\\theta \\sim P(\\theta | G, D)`: :math:`\\theta_{P, j} = m_j + L_j^{-\\top} \\varepsilon`, ``L_j L_j^\\top = V_j^{-1}``; flat ``[B, d * d]`` float64."""
        theta = torch.zeros(adj.shape, dtype=torch.float64)
        for local, graphs, node in self._groups(adj):
            eps = torch.randn(len(local.parents), len(graphs), dtype=torch.float64, generator=generator)  # [k, n]
            z = torch.linalg.solve_triangular(local.chol_prec.T, eps, upper=True)  # [k, n]
            theta[graphs[:, None], local.parents, node] = local.mean + z.T
        return theta.flatten(-2)

    def log_prob_theta_posterior(self, adj: Tensor, theta: Tensor) -> Tensor:
        """:math:`\\log P(\\theta | G, D) = \\sum_j \\log \\mathcal N(\\theta_{\\mathrm{Pa}(j), j}; m_j, V_j)` ``[B]`` float64, w.r.t. Lebesgue on the active entries.

        ``theta [B, d * d]`` flat; nodes without parents contribute 0; differentiable in ``theta``.
        """
        self._check_theta(theta)
        theta = theta.to(torch.float64).unflatten(-1, (self.d, self.d))
        out = torch.zeros(adj.shape[0], dtype=torch.float64)
        for local, graphs, node in self._groups(adj):
            delta = theta[graphs[:, None], local.parents, node] - local.mean  # [n, k]
            quad = (delta @ local.chol_prec).square().sum(-1)  # (theta - m)^T V^{-1} (theta - m)
            log_n = -0.5 * (len(local.parents) * LOG_2PI + quad) + local.chol_prec.diagonal().log().sum()
            out = out.index_add(0, graphs, log_n)
        return out

    def entropy_theta_posterior(self, adj: Tensor) -> Tensor:
        """:math:`H[P(\\theta | G, D)] = \\sum_j \\tfrac12 (k_j \\log 2\\pi e + \\log\\det V_j)` ``[...]`` float64."""
        return self._per_graph(adj, "entropy")

    def mean_field_gap(self, adj: Tensor) -> Tensor:
        """:math:`\\min_q \\mathrm{KL}(q \\| P(\\theta | G, D))` over factorised Gaussians :math:`q`: ``[...]`` float64.

        Per child, the best :math:`q` has the posterior mean and variances :math:`1 / (V_j^{-1})_{ii}`, and
        :math:`\\mathrm{KL} = \\tfrac12 (\\sum_i \\log (V_j^{-1})_{ii} - \\log\\det V_j^{-1}) \\ge 0` (Hadamard), 0 iff
        :math:`V_j` is diagonal. It is the log-evidence lost by a diagonal :math:`\\theta` density: see
        :meth:`~gflownet_measure.jsp_gfn.bayesnets.exact_posterior.ExactPosterior.mean_field_log_prob`.
        """
        return self._per_graph(adj, "mean_field_gap")
