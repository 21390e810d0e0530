"""Conditional probability distributions (CPDs) of the Bayesian network behind one interface, with flat parameter vectors.

A terminal state of the DAG x Theta space holds a graph :math:`G` (``adj [d, d]``) and a flat ``theta [P]`` whose
layout the model defines; the policy's parameter head emits node ``j``'s block from node ``j``'s embedding and
scatters it to ``block_index()[j]``. Models (docs/cpd_models.md):

- ``"lingauss"``: :class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian`, :math:`x_j = \\sum_i \\theta_{ij} x_i + \\varepsilon_j`
  (Deleu et al. 2023, section 5.1), :math:`P = d^2`;
- ``"mlp"``: :class:`MLPGaussian`, :math:`x_j \\sim \\mathcal N(\\mathrm{MLP}_j(x_{\\mathrm{Pa}(j)}), \\sigma^2)`
  (Lorch et al. 2021, the nonlinear Gaussian networks of its experiments; Deleu et al. 2023, section 5.2), :math:`P = d\\,(5d + 11)` with 5 hidden units;
- ``"categorical-mlp"``: :class:`CategoricalMLP`, :math:`x_j \\sim \\mathrm{Cat}(\\mathrm{softmax}\\,\\mathrm{MLP}_j(\\mathrm{onehot}(x_{\\mathrm{Pa}(j)})))`
  for discrete data such as Sachs et al. 2005 (Deleu et al. 2023, section 5.3).

The two MLP models share one masked network (:class:`MaskedMLP`): per node :math:`j`, with :math:`e(x) \\in \\mathbb R^{dF}`
the encoded values of all :math:`d` variables (:math:`F` features each) and :math:`m_j` the 0/1 mask of the columns of
:math:`j`'s parents,

.. math:: \\mathrm{MLP}_j(x) = W_2^{(j)} \\mathrm{ReLU}\\big((W_1^{(j)} \\odot m_j) e(x) + b_1^{(j)}\\big) + b_2^{(j)},

node ``j``'s block laid out ``[W1 (H x dF, row-major) | b1 (H) | W2 (O x H, row-major) | b2 (O)]``, the columns of
``W1`` in the order ``i * F + f``. The masked columns are the inactive coordinates; ``b1``, ``W2``, ``b2`` are always
active (as the ``mlp_gauss`` model of the public JSP-GFN code).
"""

from __future__ import annotations

import abc
import inspect
import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from gflownet_measure.gaussian import LOG_2PI
from gflownet_measure.jsp_gfn.bayesnets.cpd_base import CPDModel, check_variance
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

__all__ = ["MaskedMLP", "mlp_active", "mlp_layers", "mlp_outputs", "MLPGaussian", "CategoricalMLP", "ZeroInflatedMLP", "CPD_MODELS", "make_model"]


# ---------------------------------------------------------------- the masked MLP shared by the two MLP models


def check_hidden(owner: str, hidden: int) -> None:
    if int(hidden) != hidden or hidden < 1:
        raise ValueError(f"{owner}: hidden must be an integer >= 1; got {hidden!r}")


def mlp_active(adj: Tensor, hidden: int, features: int, outputs: int, extra: int = 0) -> Tensor:
    """``[..., d * block]`` bool: ``W1[h, i * F + f]`` of node ``j`` is active iff :math:`A_{ij} = 1`; ``b1``, ``W2``, ``b2`` and the ``extra`` per-node parameters after them always."""
    d = adj.shape[-1]
    parents = adj.bool().transpose(-1, -2)  # [..., j, i]
    w1 = parents[..., :, None, :, None].expand(*parents.shape[:-1], hidden, d, features).flatten(-3)  # [..., d, H * d * F]
    rest = torch.ones((), dtype=torch.bool, device=adj.device).expand(*parents.shape[:-1], hidden + outputs * hidden + outputs + extra)
    return torch.cat([w1, rest], -1).flatten(-2)


def mlp_layers(blocks: Tensor, inputs: Tensor, hidden: int, outputs: int) -> tuple[Tensor, Tensor, Tensor]:
    """``(pre-activations [..., M, d, H], W2 [..., d, O, H], outputs [..., M, d, O])`` of :math:`\\mathrm{MLP}_j(x_m)` from the
    (already masked) blocks ``[..., d, block]`` and ``inputs [M, dF]``.

    Two einsums; the hidden layer ``[..., M, d, H]`` is the largest intermediate.
    """
    n_in = inputs.shape[-1]
    w1, b1, w2, b2 = blocks.split([hidden * n_in, hidden, outputs * hidden, outputs], -1)
    pre = torch.einsum("...jhf,mf->...mjh", w1.unflatten(-1, (hidden, n_in)), inputs) + b1[..., None, :, :]
    W2 = w2.unflatten(-1, (outputs, hidden))
    return pre, W2, torch.einsum("...mjh,...joh->...mjo", pre.relu(), W2) + b2[..., None, :, :]


CHUNK_BYTES = 1 << 20
"""The hidden layer :func:`mlp_outputs` holds at once (about one core's L2 cache): graphs are processed in groups this small."""


def mlp_outputs(blocks: Tensor, inputs: Tensor, hidden: int, outputs: int) -> Tensor:
    """:math:`\\mathrm{MLP}_j(x_m) = W_2^{(j)} \\mathrm{ReLU}(W_1^{(j)} x_m + b_1^{(j)}) + b_2^{(j)}` ``[..., M, d, O]``: the outputs
    of :func:`mlp_layers`, the same numbers, without keeping their intermediates.

    The graphs (the leading axes, flattened) are taken in groups whose hidden layer fits in :data:`CHUNK_BYTES`: at
    ``S B = 1024`` graphs, ``M = 100``, ``d = 20``, ``H = 5`` the whole layer is 80 MB a tensor, which memory traffic and
    page faults, not arithmetic, would price (measured at that size: 3.4 to 4.5 times slower in one piece, bitwise the same outputs).
    """
    if blocks.dim() == 2:  # one network per node: a single group
        return mlp_layers(blocks, inputs, hidden, outputs)[2]
    d = blocks.shape[-2]
    per_graph = d * hidden * inputs.shape[0] * inputs.element_size()
    parts = [mlp_layers(chunk, inputs, hidden, outputs)[2] for chunk in blocks.reshape(-1, d, blocks.shape[-1]).split(max(1, CHUNK_BYTES // per_graph))]
    return torch.cat(parts).reshape(*blocks.shape[:-2], inputs.shape[0], d, outputs)


class MaskedMLP(CPDModel):
    """A :class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel` whose node ``j`` is the masked MLP of the module docstring; a subclass sets the layout
    with :meth:`_layout`, encodes the data (:meth:`encode`) and scores the outputs."""

    hidden: int  # H
    features: int  # F: inputs per variable
    outputs: int  # O
    extra: int  # per-node parameters after the network's (always active)
    interventional = True

    def _layout(self, hidden: int, features: int, outputs: int, extra: int = 0) -> None:
        check_hidden(type(self).__name__, hidden)
        self.hidden, self.features, self.outputs, self.extra = int(hidden), features, outputs, extra
        self.block = self.hidden * self.d * features + self.hidden + outputs * self.hidden + outputs + extra

    def block_index(self) -> Tensor:
        """``[d, block]`` long: node ``j``'s block is the contiguous ``j * block .. (j + 1) * block - 1``."""
        return torch.arange(self.n_params).view(self.d, self.block)

    def active(self, adj: Tensor) -> Tensor:
        """``[..., P]`` bool: the first-layer columns of parents, and every bias and second-layer weight."""
        self._check_adj(adj)
        return mlp_active(adj, self.hidden, self.features, self.outputs, self.extra)

    @abc.abstractmethod
    def encode(self, x: Tensor) -> Tensor:
        """``[M, d * F]`` float64 network inputs of the data rows ``x [M, d]``."""

    def _outputs(self, adj: Tensor, theta: Tensor, x: Tensor) -> Tensor:
        """``[..., M, d, O]``: every node's network on the rows ``x [M, d]``, inactive coordinates read as 0."""
        blocks = self._masked(adj, theta).unflatten(-1, (self.d, self.block))
        return mlp_outputs(blocks[..., : self.block - self.extra], self.encode(x), self.hidden, self.outputs)

    @abc.abstractmethod
    def _entry_log_prob(self, x: Tensor, out: Tensor, extras: Tensor) -> Tensor:
        """:math:`\\log P(x_{nj} \\mid \\mathrm{MLP}_j(x_n), \\text{extras}_j)` ``[..., M, d]`` from the entries ``x [..., M, d]``, the
        outputs ``out [..., M, d, O]`` and the per-node extras ``extras [..., d, extra]`` (any number of nodes in the last axis)."""

    def log_likelihood(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`\\sum_n \\sum_j \\log P(x_{nj} \\mid \\mathrm{MLP}_j(x_n))` ``[...]`` (:meth:`_entry_log_prob`) in ``theta``'s dtype (float64 inside).

        ``theta [..., P]`` broadcasts with ``adj [..., d, d]``; with ``rows [M]`` the unbiased
        :math:`\\frac{N}{M} \\sum_{n \\in \\text{rows}}` (JSP-GFN eq. 13); intervened entries dropped. Memory: the hidden layer is
        ``S * B * M * d * H`` doubles for ``theta [S, B, P]`` (80 MB at ``S = B = 32``, ``M = 100``, ``d = 20``, ``H = 5``),
        and the same again for its gradient.
        """
        x, scale = self._rows(rows)  # [M, d]
        terms = self._entry_log_prob(x, self._outputs(adj, theta, x), self._extras(theta))
        return (self._observed_sum(terms, rows) * scale).to(theta.dtype)

    def node_log_likelihood(self, nodes: Tensor, parents: Tensor, blocks: Tensor, rows: Tensor | None = None) -> Tensor:
        """Node ``j``'s own term :math:`\\sum_{n \\in \\text{rows}, \\neg I_{nj}} \\log P(x_{nj} \\mid x_{n, \\mathrm{Pa}}, \\theta_j)` ``[B]`` float64
        (times :math:`N/M` on a mini-batch), for ``B`` (node, parent set) pairs at once: ``nodes [B]`` long, ``parents [B, d]``
        bool, ``blocks [B, block]`` node ``j``'s parameters in its block's layout (the first-layer columns of non-parents
        are not read). :meth:`log_likelihood` is :math:`\\sum_j` of it over the nodes of one graph.

        The first layer reads only the parents' columns, gathered (at most :math:`p` of them, the largest parent set of the
        batch): :math:`O(B M H p F)` rather than the masked :math:`O(B M H d F)` of :meth:`log_likelihood`.
        """
        x, scale = self._rows(rows)
        H, n_out, F_ = self.hidden, self.outputs, self.features
        n_w1 = H * self.d * F_
        blocks = blocks.to(torch.float64)
        p = int(parents.sum(1).max()) if len(parents) else 0
        cols = torch.sort((~parents).to(torch.int8), dim=1, stable=True).indices[:, :p]  # [B, p]: the parents first
        on = parents.gather(1, cols)[:, None, :, None]  # [B, 1, p, 1]
        w1 = blocks[:, :n_w1].unflatten(1, (H, self.d, F_)).gather(2, cols[:, None, :, None].expand(-1, H, -1, F_))
        inputs = self.encode(x).unflatten(1, (self.d, F_))[:, cols].permute(1, 0, 2, 3)  # [B, M, p, F]
        b1, w2, b2 = blocks[:, n_w1 : self.block - self.extra].split([H, n_out * H, n_out], 1)
        pre = torch.einsum("bhqf,bmqf->bmh", torch.where(on, w1, 0.0), inputs) + b1[:, None, :]
        out = torch.einsum("bmh,boh->bmo", pre.relu(), w2.unflatten(1, (n_out, H))) + b2[:, None, :]
        terms = self._entry_log_prob(x[:, nodes].T[..., None], out[:, :, None, :], blocks[:, None, self.block - self.extra :])[..., 0]  # [B, M]
        intervened = self._intervened(rows)
        if intervened is not None:
            terms = torch.where(intervened[:, nodes].T, 0.0, terms)
        return terms.sum(-1) * scale

    def _network(self, adj: Tensor, theta: Tensor, rows: Tensor | None) -> dict:
        """Every node's network on the rows ``rows`` with what its Jacobian needs: encoded inputs ``e [M, dF]``, pre-activations
        ``pre`` and activations ``act [..., M, d, H]``, ``W2 [..., d, O, H]``, outputs ``out [..., M, d, O]``, the 0/1 weights
        ``observed [M, d]`` of the entries not intervened on, the mini-batch factor ``scale`` and the rows ``x``."""
        x, scale = self._rows(rows)
        e = self.encode(x)  # [M, dF]
        blocks = self._masked(adj, theta).unflatten(-1, (self.d, self.block))
        pre, W2, out = mlp_layers(blocks[..., : self.block - self.extra], e, self.hidden, self.outputs)
        intervened = self._intervened(rows)
        observed = torch.ones(x.shape, dtype=torch.float64) if intervened is None else (~intervened).double()
        return {"x": x, "scale": scale, "e": e, "pre": pre, "act": pre.relu(), "W2": W2, "out": out, "observed": observed}

    def likelihood_curvature(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """The diagonal of the Gauss-Newton matrix :math:`\\sum_n J_n^\\top F_n J_n` of :math:`-\\log P(D | G, \\theta)` ``[..., P]`` float64.

        For node ``j`` and row ``n`` with pre-activations :math:`a = W_1 e + b_1`, :math:`g = 1[a > 0]`, outputs
        :math:`o = W_2\\,\\mathrm{ReLU}(a) + b_2` and :math:`F_n` the Fisher information of the CPD in :math:`o`
        (:meth:`_output_fisher`), the Jacobian of :math:`o` is sparse, and with :math:`q_h = g_h\\, W_{2,\\cdot h}^\\top F_n W_{2,\\cdot h}`

        .. math:: [W_1]_{hf}: \\textstyle\\sum_n q_{nh} e_{nf}^2, \\quad [b_1]_h: \\sum_n q_{nh}, \\quad
           [W_2]_{kh}: \\sum_n (F_n)_{kk} \\mathrm{ReLU}(a_{nh})^2, \\quad [b_2]_k: \\sum_n (F_n)_{kk},

        and the model's own per-node parameters from :meth:`_extra_fisher`. Intervened entries are dropped, a mini-batch
        scaled by :math:`N/M` (eq. 13). Memory: a few ``[..., M, d, H]`` arrays (no ``S`` axis: one ``theta`` per graph).
        """
        n = self._network(adj, theta.detach(), rows)
        fisher, quad = self._output_fisher(n["out"], n["W2"], n["x"], theta)  # [..., M, d, O], [..., M, d, H]
        extra = self._extra_fisher(n["out"], n["x"], theta)  # [..., M, d, extra]
        w = n["observed"][..., None]
        fisher, extra, q = fisher * w, extra * w, quad * (n["pre"] > 0) * w
        parts = [
            torch.einsum("...mjh,mf->...jhf", q, n["e"].square()).flatten(-2),
            q.sum(-3),
            torch.einsum("...mjo,...mjh->...joh", fisher, n["act"].square()).flatten(-2),
            fisher.sum(-3),
            extra.sum(-3),
        ]
        return torch.cat(parts, -1).flatten(-2) * n["scale"]

    def log_reward_hvp(self, adj: Tensor, theta: Tensor, v: Tensor, rows: Tensor | None = None) -> Tensor:
        """The Gauss-Newton product :math:`(I/\\sigma_0^2 + \\sum_n J_n^\\top F_n J_n)\\, v` ``[..., P]`` float64 in place of
        :math:`-\\nabla^2 \\log R\\, v` (positive semi-definite, as conjugate gradients need; Schraudolph 2002, Martens 2010).

        Forward, the outputs' directional derivative :math:`\\delta o = W_2 (g \\odot (\\delta W_1 e + \\delta b_1)) + \\delta W_2\\,
        \\mathrm{ReLU}(a) + \\delta b_2`; then :math:`u = F \\delta o` (:meth:`_fisher_product`) and back,
        :math:`\\delta W_2 \\leftarrow u\\,\\mathrm{ReLU}(a)^\\top`, :math:`\\delta b_2 \\leftarrow u`,
        :math:`r = g \\odot W_2^\\top u`, :math:`\\delta W_1 \\leftarrow r e^\\top`, :math:`\\delta b_1 \\leftarrow r`, summed over rows;
        the per-node extras by their Fisher diagonal. A few einsums over ``[..., M, d, H]``: cheaper than a double backward.
        """
        n = self._network(adj, theta.detach(), rows)
        # H and O: the docstring's hidden and output widths
        H, O, e = self.hidden, self.outputs, n["e"]  # noqa: E741
        on = self.active(adj)
        V = torch.where(on, v.to(torch.float64), 0.0).unflatten(-1, (self.d, self.block))
        v1, vb1, v2, vb2, vx = V.split([H * e.shape[-1], H, O * H, O, self.extra], -1)
        gate = (n["pre"] > 0).double()
        d_pre = (torch.einsum("...jhf,mf->...mjh", v1.unflatten(-1, (H, e.shape[-1])), e) + vb1[..., None, :, :]) * gate
        d_out = (
            torch.einsum("...mjh,...joh->...mjo", d_pre, n["W2"])
            + torch.einsum("...mjh,...joh->...mjo", n["act"], v2.unflatten(-1, (O, H)))
            + vb2[..., None, :, :]
        )
        u = self._fisher_product(n["out"], n["x"], theta, d_out) * n["observed"][..., None]  # [..., M, d, O]
        r = torch.einsum("...mjo,...joh->...mjh", u, n["W2"]) * gate
        extra = self._extra_fisher(n["out"], n["x"], theta)
        parts = [
            torch.einsum("...mjh,mf->...jhf", r, e).flatten(-2),
            r.sum(-3),
            torch.einsum("...mjo,...mjh->...joh", u, n["act"]).flatten(-2),
            u.sum(-3),
            (extra * n["observed"][..., None]).sum(-3) * vx,
        ]
        lik = torch.cat(parts, -1).flatten(-2) * n["scale"]
        return torch.where(on, lik + V.flatten(-2) / self.prior_var, 0.0)

    def _output_fisher(self, out: Tensor, w2: Tensor, x: Tensor, theta: Tensor) -> tuple[Tensor, Tensor]:
        """``(diag F [..., M, d, O], W2[:, h]^T F W2[:, h] [..., M, d, H])`` at the outputs ``out [..., M, d, O]`` of the rows ``x``."""
        raise NotImplementedError

    def _extra_fisher(self, out: Tensor, x: Tensor, theta: Tensor) -> Tensor:
        """The Fisher diagonal of the per-node extras ``[..., M, d, extra]`` at the outputs ``out`` of the rows ``x`` (none by default)."""
        return out.new_zeros(*out.shape[:-1], self.extra)

    def _fisher_product(self, out: Tensor, x: Tensor, theta: Tensor, v: Tensor) -> Tensor:
        """:math:`F v` ``[..., M, d, O]``: the outputs' Fisher information at ``out`` applied to ``v``."""
        raise NotImplementedError

    def _extras(self, theta: Tensor) -> Tensor:
        """``[..., d, extra]`` float64: the per-node parameters after the network's (always active)."""
        return theta.to(torch.float64).unflatten(-1, (self.d, self.block))[..., self.block - self.extra :]


class MLPGaussian(MaskedMLP):
    """Nonlinear Gaussian CPDs (Lorch et al. 2021, the nonlinear Gaussian networks of its experiments; Deleu et al. 2023, section 5.2): :math:`x_j \\sim \\mathcal N(\\mathrm{MLP}_j(x), \\sigma^2)`.

    ``MLP_j`` reads the raw values of all variables (:math:`F = 1`), the first-layer columns of non-parents masked,
    ``hidden`` ReLU units and one linear output; block ``[W1 (H x d) | b1 (H) | W2 (H) | b2 (1)]``, :math:`(d + 2) H + 1`
    per node (:math:`5d + 11` with 5 units: :math:`P = 2{,}220` at :math:`d = 20`).

    Args:
        data: ``[N, d]`` observations.
        obs_var: :math:`\\sigma^2`, fixed (0.01: noise std 0.1).
        prior_var, graph_prior, edges_per_node: as in :class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel`.
        hidden: :math:`H`, hidden units per node.
    """

    kind = "continuous"

    def __init__(
        self,
        data: Tensor,
        obs_var: float = 0.01,
        prior_var: float = 1.0,
        graph_prior: str = "uniform",
        edges_per_node: float = 1.0,
        hidden: int = 5,
        interventions: Tensor | None = None,
    ):
        check_variance("MLPGaussian", "obs_var", obs_var)
        super().__init__(data, prior_var, graph_prior, edges_per_node, interventions)
        self.obs_var = float(obs_var)
        self._layout(hidden, 1, 1)

    def encode(self, x: Tensor) -> Tensor:
        """The raw values: ``[M, d]``."""
        return x

    def _entry_log_prob(self, x: Tensor, out: Tensor, extras: Tensor) -> Tensor:
        """:math:`\\log \\mathcal N(x_{nj}; \\mathrm{MLP}_j(x_n), \\sigma^2)`."""
        return -0.5 * (x - out[..., 0]).square() / self.obs_var - 0.5 * (LOG_2PI + math.log(self.obs_var))

    def _output_fisher(self, out, w2, x, theta):
        """:math:`F = 1/\\sigma^2` for the mean."""
        fisher = torch.full(out.shape, 1.0 / self.obs_var, dtype=torch.float64)
        return fisher, (w2[..., 0, :].square() / self.obs_var)[..., None, :, :].expand(*out.shape[:-1], self.hidden)

    def _fisher_product(self, out, x, theta, v):
        return v / self.obs_var


class CategoricalMLP(MaskedMLP):
    """Categorical CPDs for discrete data (Deleu et al. 2023, section 5.3): :math:`x_j \\sim \\mathrm{Cat}(\\mathrm{softmax}\\,\\mathrm{MLP}_j(\\mathrm{onehot}(x)))`.

    Data are states :math:`x_{nj} \\in \\{0, \\dots, K - 1\\}`; ``MLP_j`` reads the one-hot codes of all variables
    (:math:`F = K`, column ``i * K + s`` is :math:`[x_i = s]`), the columns of non-parents masked, ``hidden`` ReLU units
    and :math:`K` logits; block ``[W1 (H x dK) | b1 (H) | W2 (K x H) | b2 (K)]``:
    :math:`P = d\\,(dKH + H + KH + K)` (6,545 at :math:`d = 11`, :math:`K = 3`, :math:`H = 16`).

    Args:
        data: ``[N, d]`` integer states (any dtype holding whole numbers >= 0); kept as long.
        prior_var, graph_prior, edges_per_node: as in :class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel`.
        hidden: :math:`H`, hidden units per node.
        n_states: :math:`K`; ``None``: the largest state + 1, at least 2.
    """

    kind = "categorical"

    def __init__(
        self,
        data: Tensor,
        prior_var: float = 1.0,
        graph_prior: str = "uniform",
        edges_per_node: float = 1.0,
        hidden: int = 16,
        n_states: int | None = None,
        interventions: Tensor | None = None,
    ):
        super().__init__(data, prior_var, graph_prior, edges_per_node, interventions)
        bad = (self.data != self.data.round()) | (self.data < 0)
        if bad.any():
            n, j = bad.nonzero()[0].tolist()
            raise ValueError(
                f"CategoricalMLP: data must be integer states 0, 1, ..., K - 1; got {float(self.data[n, j])!r} at row {n}, column {j} (use a continuous model for real-valued data)"
            )
        largest = int(self.data.max())
        if n_states is None:
            n_states = max(2, largest + 1)
        elif int(n_states) != n_states or n_states < 2 or n_states <= largest:
            raise ValueError(f"CategoricalMLP: n_states must be an integer >= 2 above the largest state {largest}; got {n_states!r}")
        self.data, self.n_states = self.data.long(), int(n_states)
        self._layout(hidden, self.n_states, self.n_states)

    def encode(self, x: Tensor) -> Tensor:
        """The one-hot codes: ``[M, d * K]`` float64."""
        return F.one_hot(x, self.n_states).flatten(-2).to(torch.float64)

    def _entry_log_prob(self, x: Tensor, out: Tensor, extras: Tensor) -> Tensor:
        """:math:`\\log \\mathrm{softmax}(\\mathrm{MLP}_j(x_n))_{x_{nj}}`, w.r.t. counting measure on the states."""
        log_p = out.log_softmax(-1)  # [..., M, d, K]
        return log_p.gather(-1, x[..., None].expand(*log_p.shape[:-1], 1))[..., 0]

    def _output_fisher(self, out, w2, x, theta):
        """:math:`F = \\mathrm{diag}(p) - p p^\\top` of the logits, :math:`p = \\mathrm{softmax}(o)`, so :math:`w^\\top F w = \\sum_k p_k w_k^2 - (\\sum_k p_k w_k)^2`."""
        p = out.softmax(-1)  # [..., M, d, K]
        quad = torch.einsum("...mjk,...jkh->...mjh", p, w2.square()) - torch.einsum("...mjk,...jkh->...mjh", p, w2).square()
        return p * (1 - p), quad

    def _fisher_product(self, out, x, theta, v):
        p = out.softmax(-1)
        return p * v - p * (p * v).sum(-1, keepdim=True)


class ZeroInflatedMLP(MaskedMLP):
    """Zero-inflated Normal CPDs (Deleu et al. 2023, eq. D.18, for gene expression with dropouts):

    .. math:: P(x_j | x_{\\mathrm{Pa}(j)}) = \\alpha_j \\delta_0 + (1 - \\alpha_j)\\, \\mathcal N(\\mathrm{MLP}_j(x), \\sigma_j^2),

    :math:`\\alpha_j = \\mathrm{sigmoid}(a_j)`, :math:`\\sigma_j = e^{s_j}`, with ``MLP_j`` as in :class:`MLPGaussian` (raw
    inputs, first-layer columns of non-parents masked, ``hidden`` ReLU units, one output). The reference measure of
    one observation is :math:`\\delta_0 + \\lambda` (an atom at 0 plus Lebesgue measure), and the density w.r.t. it is

    .. math:: f(x_j) = \\alpha_j \\ \\text{if}\\ x_j = 0, \\qquad f(x_j) = (1 - \\alpha_j)\\, \\mathcal N(x_j; \\mathrm{MLP}_j(x), \\sigma_j^2) \\ \\text{otherwise}

    (the Normal part puts no mass on the point 0, the atom none on :math:`x \\neq 0`). Block ``[W1 (H x d) | b1 (H) |
    W2 (H) | b2 (1) | a_j | s_j]``: :math:`(d + 2) H + 3` per node, **61,671 at d = 61, H = 16** (the paper's count);
    ``a_j`` and ``s_j`` are always active, under the same N(0, ``prior_var``) prior as every parameter.

    Args:
        data: ``[N, d]`` observations; exact zeros are the dropouts.
        prior_var, graph_prior, edges_per_node, interventions: as in :class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel`.
        hidden: :math:`H`, hidden units per node.
    """

    kind = "continuous"

    def __init__(
        self,
        data: Tensor,
        prior_var: float = 1.0,
        graph_prior: str = "uniform",
        edges_per_node: float = 1.0,
        hidden: int = 16,
        interventions: Tensor | None = None,
    ):
        super().__init__(data, prior_var, graph_prior, edges_per_node, interventions)
        self._layout(hidden, 1, 1, extra=2)

    def encode(self, x: Tensor) -> Tensor:
        """The raw values: ``[M, d]``."""
        return x

    def _entry_log_prob(self, x: Tensor, out: Tensor, extras: Tensor) -> Tensor:
        """:math:`\\log f(x_{nj})` (class docstring) w.r.t. :math:`\\delta_0 + \\lambda`."""
        a, s = extras[..., None, :, 0], extras[..., None, :, 1]  # [..., 1, d] each
        normal = F.logsigmoid(-a) - 0.5 * ((x - out[..., 0]) / s.exp()).square() - s - 0.5 * LOG_2PI
        return torch.where(x == 0, F.logsigmoid(a), normal)

    def _inverse_variance(self, x: Tensor, theta: Tensor) -> Tensor:
        """:math:`1/\\sigma_j^2` on the non-zero entries of the rows ``x``, 0 on the dropouts: ``[..., M, d]``."""
        return (x != 0).double() * (-2 * self._extras(theta)[..., 1][..., None, :]).exp()

    def _output_fisher(self, out, w2, x, theta):
        """The mean: :math:`1/\\sigma_j^2` on the non-zero entries (0 on the dropouts, whose density does not read it)."""
        inv_var = self._inverse_variance(x, theta)
        return inv_var[..., None], w2[..., 0, :][..., None, :, :].square() * inv_var[..., None]

    def _extra_fisher(self, out, x, theta):
        """:math:`a_j`: :math:`\\alpha_j (1 - \\alpha_j)` on every entry; :math:`s_j`: 2 on the non-zero entries (the Fisher
        information of a Normal's log-scale)."""
        a = self._extras(theta)[..., 0]  # [..., d]
        ones = torch.ones(*out.shape[:-1], dtype=torch.float64)  # [..., M, d]
        alpha = torch.sigmoid(a)[..., None, :] * ones
        return torch.stack([alpha * (1 - alpha), 2 * (x != 0).double() * ones], -1)

    def _fisher_product(self, out, x, theta, v):
        return v * self._inverse_variance(x, theta)[..., None]


# ---------------------------------------------------------------- registry


CPD_MODELS: dict[str, type[CPDModel]] = {"lingauss": LinearGaussian, "mlp": MLPGaussian, "categorical-mlp": CategoricalMLP, "zi-mlp": ZeroInflatedMLP}
_SHARED_ARGUMENTS = ("data", "obs_var", "prior_var", "graph_prior", "edges_per_node", "interventions")  # of make_model, not a model's own options


def make_model(
    name: str,
    data: Tensor,
    obs_var: float = 0.01,
    prior_var: float = 1.0,
    graph_prior: str = "uniform",
    edges_per_node: float = 1.0,
    interventions: Tensor | None = None,
    **kw,
) -> CPDModel:
    """The model ``CPD_MODELS[name]`` on ``data [N, d]``; ``kw`` are that model's own options (``hidden``, ``n_states``).

    ``obs_var`` goes to the models with a fixed noise variance only (a categorical CPD has none, a zero-inflated one
    learns its own); ``interventions [N, d]`` (perfect interventions, :class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel`) to those that take
    them. One-line ``ValueError`` for an unknown name (listing the valid ones), an option the model does not take,
    interventions it does not take, or data it cannot model.
    """
    if name not in CPD_MODELS:
        raise ValueError(f"make_model: unknown CPD model {name!r}; choose one of {tuple(CPD_MODELS)}")
    cls = CPD_MODELS[name]
    own = tuple(p for p in inspect.signature(cls).parameters if p not in _SHARED_ARGUMENTS)
    unknown = sorted(set(kw) - set(own))
    if unknown:
        raise ValueError(f"make_model: {name!r} takes no option {unknown}; its options: {own}")
    noise: dict[str, Any] = {"obs_var": obs_var} if "obs_var" in inspect.signature(cls).parameters else {}
    device = torch.get_default_device()  # data read or simulated on the CPU go where the run computes (--device)
    data = data.to(device)
    if interventions is not None:
        interventions = interventions.to(device)
        if not cls.interventional:
            raise ValueError(
                f"make_model: model {name!r} takes no interventions; perfect interventions are implemented for {tuple(k for k, c in CPD_MODELS.items() if c.interventional)}"
            )
        kw["interventions"] = interventions
    return cls(data, prior_var=prior_var, graph_prior=graph_prior, edges_per_node=edges_per_node, **noise, **kw)
