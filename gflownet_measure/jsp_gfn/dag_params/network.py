"""The JSP-GFN network (Deleu et al. 2023, section 3.3 and appendix; docs/references.md, 'Network'): one
graph-network pass and a self-attention layer over the ``d`` nodes of a DAG, then edge and stop logits
for :math:`P_\\phi(G' \\mid G)` and a Gaussian head for :math:`P_\\phi(\\theta \\mid G)` (:mod:`~gflownet_measure.jsp_gfn.dag_params.theta`).

Conventions: ``adj [B, d, d]`` is a float 0/1 adjacency with ``adj[b, i, j] = 1`` for the edge
:math:`i \\to j` (``i`` is a parent of ``j``); ``theta [B, P]`` is the CPD model's flat parameter vector, node ``j``'s
block at the positions ``block_index[j]`` (:mod:`~gflownet_measure.jsp_gfn.bayesnets.cpds`). All graphs of a batch have the same
``d`` nodes, so message passing is a masked sum over the dense ``[B, d, d]`` pairs (no padding, no scatter).

Parameter heads, each giving the distribution of :math:`\\theta` given ``G``:

- :class:`DiagGaussianHead`: :class:`~gflownet_measure.jsp_gfn.dag_params.theta.DiagNormalTheta`, each node's block of locations and scales from
  that node's features (``lingauss_diag`` and ``mlp_gauss`` of the public JSP-GFN code);
- :class:`FullGaussianHead` (``lingauss_full``, linear models only): :class:`~gflownet_measure.jsp_gfn.dag_params.theta.FullNormalTheta`,
  :math:`\\theta_{\\cdot j} \\sim \\mathcal N(\\mu_j, (U_j^\\top U_j)^{-1})` per child ``j``, with :math:`U_j` an
  upper-triangular factor of the precision.

Both are densities w.r.t. Lebesgue measure on the *active* coordinates :math:`\\Theta_G` (``model.active(adj)``) only,
with reparametrised samples that are exactly 0 elsewhere.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from gflownet_measure.jsp_gfn.dag_params.states import ActiveFn
from gflownet_measure.jsp_gfn.dag_params.theta import DiagNormalTheta, FullNormalTheta, MaskedNormalTheta

__all__ = ["JSPOutputs", "JSPBackbone", "DiagGaussianHead", "FullGaussianHead", "JSPNetwork"]


def _mlp(n_in: int, hidden: int, n_out: int) -> nn.Sequential:
    """Haiku's ``MLP([hidden, n_out])``: Linear, ReLU, Linear (no final activation)."""
    return nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, n_out))


def _zero_last(net: nn.Sequential) -> nn.Sequential:
    last = net[-1]
    assert isinstance(last, nn.Linear)  # every network here ends in a Linear (nn.Sequential types its layers nn.Module)
    nn.init.zeros_(last.weight)
    nn.init.zeros_(last.bias)
    return net


class JSPOutputs(NamedTuple):
    """Everything the network says about a batch of graphs.

    Attributes:
        edge_logits: ``[B, d, d]``, :math:`u_i \\cdot v_j`, the logit of adding :math:`i \\to j` (unmasked).
        stop_logit: ``[B]``, the logit of stopping at ``G``.
        theta: :math:`P_\\phi(\\theta \\mid G)`, batch shape ``[B]``, of the network's parameter head.
    """

    edge_logits: Tensor
    stop_logit: Tensor
    theta: MaskedNormalTheta

    def rows(self, idx) -> JSPOutputs:
        """The outputs of the graphs ``idx`` of the batch (a slice or a 1-D index)."""
        return JSPOutputs(self.edge_logits[idx], self.stop_logit[idx], self.theta[idx])


class JSPBackbone(nn.Module):
    """Node and global features of a DAG: :math:`(h_i)_{i \\le d}, g = \\mathrm{LN}(\\mathrm{MHA}(\\mathrm{GN}(A)))` (docs/references.md, 'Network').

    Inputs: node features :math:`x_i = \\mathrm{Embed}(i)`, one learned edge feature :math:`e` shared by every
    edge, globals :math:`g_0 = 0`. One graph-network pass (Battaglia et al. 2018, the order of ``jraph.GraphNetwork``):

    .. math::
        m_{ij} = \\phi_e(e, x_i, x_j) \\text{ for } A_{ij} = 1, \\qquad
        x'_i = \\phi_x\\Big(x_i, \\textstyle\\sum_j A_{ij} m_{ij}, \\sum_j A_{ji} m_{ji}\\Big), \\qquad
        g = \\phi_g\\Big(\\textstyle\\sum_i x'_i, \\sum_{ij} A_{ij} m_{ij}\\Big),

    i.e. each node sees the sum of its outgoing (sent) and of its incoming (received) messages, and the
    globals the sums over nodes and edges (jraph's default ``segment_sum`` aggregations). The initial
    globals are 0, so their columns of the first layers multiply zeros: they are left out (the same function).

    The inputs of the pass do not depend on ``G`` (embeddings, one shared edge feature, zero globals), so the
    message :math:`m_{ij}` of a pair is the same in every graph: the ``d x d`` table of messages is computed
    once per call (``d^2`` rows instead of ``B d^2``) and ``G`` only selects which of them are summed,
    :math:`\\sum_j A_{ij} m_{ij}` being a batched matrix product with ``adj``.

    Then a multi-head self-attention over the nodes (one Linear to the per-head queries, keys and values,
    scaled dot products, an output Linear) and LayerNorm on nodes and, separately, on globals. As in the
    JAX code there is no residual: the LayerNorm takes the attention output itself.

    Args:
        d: number of nodes.
        hidden: feature width ``h``.
        n_heads, key_size: attention heads and their key (= value) size.
    """

    def __init__(self, d: int, hidden: int = 128, n_heads: int = 4, key_size: int = 32):
        super().__init__()
        self.d, self.hidden, self.n_heads, self.key_size = d, hidden, n_heads, key_size
        self.embed = nn.Embedding(d, hidden)
        nn.init.trunc_normal_(self.embed.weight, std=1.0, a=-2.0, b=2.0)
        self.edge_feature = nn.Parameter(nn.init.trunc_normal_(torch.empty(hidden), std=1.0, a=-2.0, b=2.0))
        self.edge_mlp = _mlp(3 * hidden, hidden, hidden)  # input (edge, sender, receiver)
        self.node_mlp = _mlp(3 * hidden, hidden, hidden)  # input (node, sent sum, received sum)
        self.global_mlp = _mlp(2 * hidden, hidden, hidden)  # input (node sum, edge sum)
        self.qkv = nn.Linear(hidden, 3 * n_heads * key_size)
        self.attn_out = nn.Linear(n_heads * key_size, hidden)
        self.node_norm = nn.LayerNorm(hidden)
        self.global_norm = nn.LayerNorm(hidden)

    def graph_network(self, adj: Tensor) -> tuple[Tensor, Tensor]:
        """The graph-network pass alone: ``adj [B, d, d] -> (nodes [B, d, h], globals [B, h])``."""
        d, h = self.d, self.hidden
        x = self.embed.weight  # [d, h]
        pairs = torch.cat([self.edge_feature.expand(d, d, h), x[:, None].expand(d, d, h), x[None].expand(d, d, h)], -1)
        messages = self.edge_mlp(pairs)  # [d(i), d(j), h]: m_ij, the same for every graph
        adj = adj.to(x.dtype)
        sent = torch.einsum("bij,ijh->bih", adj, messages)  # [B, d, h]: sum over the edges i -> j leaving i
        received = torch.einsum("bij,ijh->bjh", adj, messages)  # [B, d, h]: sum over the edges i -> j entering j
        nodes = self.node_mlp(torch.cat([x.expand(len(adj), d, h), sent, received], -1))  # [B, d, h]
        return nodes, self.global_mlp(torch.cat([nodes.sum(1), sent.sum(1)], -1))  # sent.sum(1): sum over all edges

    def forward(self, adj: Tensor) -> tuple[Tensor, Tensor]:
        """``adj [B, d, d] -> (nodes [B, d, h], globals [B, h])``."""
        nodes, glob = self.graph_network(adj)
        B, d, H, k = len(adj), self.d, self.n_heads, self.key_size
        q, key, v = self.qkv(nodes).view(B, d, 3, H, k).unbind(2)  # each [B, d, H, k]
        att = torch.softmax(torch.einsum("bihk,bjhk->bhij", q, key) / math.sqrt(k), -1)  # [B, H, d, d]
        mixed = torch.einsum("bhij,bjhk->bihk", att, v).reshape(B, d, H * k)
        return self.node_norm(self.attn_out(mixed)), self.global_norm(glob)


class DiagGaussianHead(nn.Module):
    """:math:`(\\mu_{B_j}, \\rho_{B_j}) = W\\,\\mathrm{ReLU}(L[h_j, g])`, :math:`\\sigma = \\mathrm{softplus}(\\rho)`, for each node's block :math:`B_j`.

    Per node ``j`` the ``2 b`` outputs are the locations and raw scales of its parameter block (``block_index [d, b]``:
    for a linear model the column :math:`\\theta_{\\cdot j}`, one weight per potential parent). ``W`` is zero-initialised,
    so at initialisation :math:`\\mu = 0` and :math:`\\sigma = \\log 2`. Returns the
    :class:`~gflownet_measure.jsp_gfn.dag_params.theta.DiagNormalTheta` on ``active(adj)``.
    """

    to_flat: Tensor

    def __init__(self, d: int, hidden: int, block_index: Tensor, active: ActiveFn):
        super().__init__()
        self.block, self.active = block_index.shape[1], active
        self.net = _zero_last(nn.Sequential(nn.Linear(2 * hidden, hidden), nn.ReLU(), nn.Linear(hidden, 2 * self.block)))
        self.register_buffer("to_flat", block_index.flatten().argsort(), persistent=False)  # flat position -> (node, slot)

    def params(self, nodes: Tensor, glob: Tensor, adj: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """``(mu [B, P], rho [B, P], active [B, P])``: the locations (0 off the active coordinates), the raw scales and :math:`\\Theta_G`."""
        out = self.net(torch.cat([nodes, glob[:, None].expand_as(nodes)], -1))  # [B, d, 2b]
        raw_loc, raw_scale = out[..., : self.block], out[..., self.block :]  # each [B, d, b] (b = 0 too: a model without parameters)
        on = self.active(adj > 0)
        loc = raw_loc.flatten(1)[:, self.to_flat]
        return torch.where(on, loc, torch.zeros_like(loc)), raw_scale.flatten(1)[:, self.to_flat], on

    def forward(self, nodes: Tensor, glob: Tensor, adj: Tensor) -> DiagNormalTheta:
        loc, raw_scale, on = self.params(nodes, glob, adj)
        return DiagNormalTheta(loc, F.softplus(raw_scale), on)


class FullGaussianHead(nn.Module):
    """``lingauss_full``: per child ``j``, :math:`\\theta_{\\cdot j} \\sim \\mathcal N(\\mu_j, (U_j^\\top U_j)^{-1})` on its parents.

    ``MLP([h, d + d(d+1)/2])`` of the node features :math:`h_j` (only; as in the JAX code) gives :math:`\\mu_j`
    (masked to the parents :math:`P_j`) and the upper triangle :math:`R_j` of a ``d x d`` matrix, and

    .. math:: (U_j)_{aa} = \\mathrm{softplus}(R_{aa}) \\text{ if } a \\in P_j \\text{ else } 1, \\qquad
       (U_j)_{ab} = R_{ab}\\, [a \\in P_j][b \\in P_j] \\quad (a < b).

    Up to a permutation :math:`U_j = \\mathrm{diag}(U_{PP}, I)`, so the parent block has precision
    :math:`U_{PP}^\\top U_{PP}` and the non-parent coordinates are untouched. The last layer is zero-initialised:
    :math:`\\mu = 0`, parent diagonals :math:`\\log 2`. Returns the :class:`~gflownet_measure.jsp_gfn.dag_params.theta.FullNormalTheta` of
    ``loc [B, d(i), d(j)]`` and ``U [B, d(j), d, d]``.
    """

    triu: Tensor
    diag_at: Tensor

    def __init__(self, d: int, hidden: int, block_index: Tensor, active: ActiveFn):
        super().__init__()
        if not torch.equal(block_index, torch.arange(d * d).view(d, d).T):
            raise ValueError(
                "the full-covariance parameter head is for linear models (each node's block its column of the d x d weights); use the diagonal head"
            )
        self.d = d
        self.net = _zero_last(_mlp(hidden, hidden, d + d * (d + 1) // 2))
        self.register_buffer("triu", torch.triu_indices(d, d), persistent=False)  # [2, d(d+1)/2]
        self.register_buffer("diag_at", (self.triu[0] == self.triu[1]).nonzero().squeeze(1), persistent=False)  # [d]

    def forward(self, nodes: Tensor, glob: Tensor, adj: Tensor) -> FullNormalTheta:
        d = self.d
        out = self.net(nodes)  # [B, d(j), d + d(d+1)/2]
        parents = adj.transpose(1, 2)  # [B, d(j), d(i)]
        rows, cols = self.triu
        packed = out[..., d:]  # [B, j, d(d+1)/2]: R_ab for a <= b
        pairs = (parents[..., :, None] * parents[..., None, :])[..., rows, cols]  # [B, j, d(d+1)/2]: [a, b in P_j]
        U = out.new_zeros(*out.shape[:2], d, d)  # [B, j, d, d]
        U[..., rows, cols] = packed * pairs
        U.diagonal(dim1=-2, dim2=-1).copy_(torch.where(parents > 0, F.softplus(packed[..., self.diag_at]), 1.0))
        return FullNormalTheta((out[..., :d] * parents).transpose(1, 2), U, adj)


class JSPNetwork(nn.Module):
    """:class:`JSPBackbone`, then :math:`\\ell_{ij} = u_i \\cdot v_j` with :math:`u = \\mathrm{MLP}_s(h)`,
    :math:`v = \\mathrm{MLP}_r(h)`, the stop logit :math:`\\mathrm{MLP}[h, 1](g)` and a parameter head.

    The JAX code multiplies both logits by the training-set size ``N`` before the softmax
    (docs/references.md, 'Network'); that scaling, and the masking of invalid edges, belong to the caller.

    Args:
        d: number of nodes.
        hidden: feature width.
        block_index: ``[d, b]``, the positions of each node's parameter block in the flat ``theta`` (the CPD model's).
        active: the CPD model's ``active``: ``adj -> [B, P]`` bool, the coordinates of :math:`\\Theta_G`.
        head: :class:`DiagGaussianHead` or :class:`FullGaussianHead` (the class; built here).
        n_heads, key_size: of the attention layer.
    """

    def __init__(
        self,
        d: int,
        hidden: int,
        block_index: Tensor,
        active: ActiveFn,
        head: type[DiagGaussianHead] | type[FullGaussianHead] = DiagGaussianHead,
        n_heads: int = 4,
        key_size: int = 32,
    ):
        super().__init__()
        self.d = d
        self.backbone = JSPBackbone(d, hidden, n_heads, key_size)
        self.senders = _mlp(hidden, hidden, hidden)
        self.receivers = _mlp(hidden, hidden, hidden)
        self.stop = _mlp(hidden, hidden, 1)
        self.theta_head: nn.Module = head(d, hidden, block_index, active)  # make_policies may swap in a SolverHead

    def trunk(self, adj: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        """``(nodes [B, d, h], globals [B, h], edge logits [B, d, d], stop logit [B])``: all but the parameter head, which
        reads ``(nodes, globals, adj)`` and may be called later on some of the graphs only (``theta_head``)."""
        nodes, glob = self.backbone(adj)  # [B, d, h], [B, h]
        edge_logits = self.senders(nodes) @ self.receivers(nodes).transpose(1, 2)  # [B, d, d]
        return nodes, glob, edge_logits, self.stop(glob).squeeze(-1)

    def forward(self, adj: Tensor) -> JSPOutputs:
        """``adj [B, d, d]`` (float 0/1) -> :class:`JSPOutputs`."""
        nodes, glob, edge_logits, stop_logit = self.trunk(adj)
        return JSPOutputs(edge_logits, stop_logit, self.theta_head(nodes, glob, adj.to(nodes.dtype)))
