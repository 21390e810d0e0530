"""VBG (Nishikawa-Toomey, Deleu, Subramanian, Bengio & Charlin 2022, "Bayesian learning of Causal Structure and
Mechanisms with GFlowNets and Variational Bayes"): the "VBG" baseline of Deleu et al. 2023 (JSP-GFN), Table D.1.

VBG approximates :math:`P(G, \\theta \\mid D)` by a mean-field product :math:`q(G)\\, q(\\theta)` and alternates the two
coordinate updates of variational Bayes: :math:`q(G)` is a structure-only GFlowNet (DAG-GFlowNet, Deleu et al. 2022)
trained towards the reward

.. math:: \\log R_q(G) = \\log P(G) + E_{q(\\theta)}[\\log P(D \\mid G, \\theta)],

and :math:`q(\\theta)` has a closed form given samples of :math:`q(G)`. Written from the paper and the updates of its public
code (the ``update_parameters_full`` rule), for the linear-Gaussian model of
:class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian`.

Model. :math:`\\theta` is the full ``d x d`` weight matrix with :math:`\\theta_{ij} \\sim \\mathcal N(0, \\sigma_0^2)` for every
pair whatever :math:`G`, and :math:`x_{nj} \\sim \\mathcal N(\\sum_i G_{ij} \\theta_{ij} x_{ni}, \\sigma^2)`. The weights of absent
edges are then free of the data and integrate out of their prior, so the marginal of this model over
:math:`(G, \\theta_G)` is JSP-GFN's (same :math:`\\sigma^2`, :math:`\\sigma_0^2`, graph prior): VBG and JSP-GFN approximate the
same posterior. As :math:`E_q \\log P(\\theta)` does not depend on :math:`G`, it drops out of :math:`R_q`.

The expected log-likelihood (per node :math:`j`, its Gram matrix :math:`C = X^\\top X` over the rows that do not intervene on
it, :math:`g = G_{\\cdot j}`, :math:`q(\\theta_{\\cdot j}) = \\mathcal N(\\mu_j, \\Sigma_j)`):

.. math:: E_q \\sum_n (x_{nj} - (X (g \\odot \\theta_{\\cdot j}))_n)^2 = C_{jj} - 2 (g \\odot \\mu_j)^\\top C_{\\cdot j}
          + (g \\odot \\mu_j)^\\top C (g \\odot \\mu_j) + \\operatorname{tr}\\big((C \\odot g g^\\top) \\Sigma_j\\big),

i.e. the log-likelihood at :math:`\\theta = \\mu` minus :math:`\\frac{1}{2\\sigma^2} \\sum_j \\operatorname{tr}((C \\odot g g^\\top)\\Sigma_j)`
(:class:`MeanFieldLinearGaussian`).

The update of :math:`q(\\theta)`, :math:`q^*(\\theta) \\propto \\exp(E_{q(G)} \\log P(D \\mid G, \\theta) + \\log P(\\theta))`: a Bayesian
linear regression per node whose inputs are weighted by the edge marginals of :math:`q(G)`, estimated from ``K`` graphs
:math:`g^{(k)}` drawn from the GFlowNet,

.. math:: \\Lambda_j = I / \\sigma_0^2 + \\frac{1}{\\sigma^2}\\, C \\odot \\overline{g g^\\top}, \\qquad
          \\mu_j = \\Lambda_j^{-1} \\frac{1}{\\sigma^2} \\big(\\bar g \\odot C_{\\cdot j}\\big), \\qquad \\Sigma_j = \\Lambda_j^{-1}

(:func:`update_q_theta`; :math:`\\bar g`, :math:`\\overline{g g^\\top}` the sample means). With :math:`q(G)` a point mass on
:math:`G` this is the exact conditional posterior :math:`P(\\theta_G \\mid G, D)` on the parents.

The GFlowNet of :math:`q(G)` is this project's DAG x Theta space with an empty :math:`\\Theta` (the CPD model has no
parameters, so every :math:`\\Theta_G = \\mathbb R^0`), its JSP-GFN network and policy, its replay of edge transitions
and its undirected SubTB loss (Deleu et al. 2023, eq. 8), which with nothing to sample at either end is the modified
detailed balance of DAG-GFlowNet (Deleu et al. 2022, eq. 6) under a Huber penalty.

Schedule (:func:`vbg`): :math:`q(\\theta)` starts from the update given graphs of the untrained policy (nearly uniform
over the edges; the public code trains 100 updates first); then ``iterations`` rounds of ``steps / iterations``
GFlowNet updates on :math:`R_q`, each round ended by ``K = q_samples`` graphs from the policy and the update of
:math:`q(\\theta)` (the public code: 15 rounds of 2,000 updates at ``d = 5``). Exploration decays from 1 (uniform moves)
to ``min_exploration`` over the first half of all updates, as in a JSP-GFN run; the graphs come from a moving average
of the weights (decay ``ema``). Output: ``n_samples`` graphs of the final policy, each with :math:`\\theta \\sim q(\\theta)`
on its edges.
"""

from __future__ import annotations

import dataclasses
import time
import warnings
from typing import cast

import torch
from torch import Tensor
from tqdm import tqdm

from gflownet_measure.densities import UniformPolicy
from gflownet_measure.jsp_gfn.bayesnets.cpd_base import CPDModel
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.dag_params.network import DiagGaussianHead, JSPNetwork
from gflownet_measure.jsp_gfn.dag_params.objective import UNDIRECTED_SUBTB
from gflownet_measure.jsp_gfn.dag_params.policy import JSPPolicy
from gflownet_measure.jsp_gfn.dag_params.replay import EdgeReplay, uniform_move_probability
from gflownet_measure.jsp_gfn.dag_params.sampling import posterior_samples
from gflownet_measure.jsp_gfn.dag_params.space import DagKernel, make_space
from gflownet_measure.objectives import GFlowNet
from gflownet_measure.training import WeightAverage

from .samples import BaselineSamples, check_counts

__all__ = ["MeanFieldLinearGaussian", "update_q_theta", "vbg"]


class MeanFieldLinearGaussian(CPDModel):
    """The structure reward of VBG: :math:`\\log P(D \\mid G)` replaced by :math:`E_{q(\\theta)} \\log P(D \\mid G, \\theta)` of a
    linear-Gaussian ``base`` model (module docstring), as a CPD model without parameters (``block = 0``), so that the DAG x
    Theta space over it is the space of DAGs alone.

    ``mean [d, d]`` (``[i, j]``: :math:`\\mu` of the weight of ``i -> j``) and ``cov [d, d, d]`` (``cov[j]``: :math:`\\Sigma_j` over
    the potential parents of ``j``) are :math:`q(\\theta)`; assigning them (:func:`update_q_theta`) changes the reward.
    """

    kind = "continuous"
    block = 0

    def __init__(self, base: LinearGaussian):
        self.base = base
        self.data, self.n, self.d, self.prior_var, self.graph_prior = base.data, base.n, base.d, base.prior_var, base.graph_prior
        self.interventions, self.log_edge_odds = base.interventions, base.log_edge_odds
        self.mean = torch.zeros(self.d, self.d, dtype=torch.float64)
        self.cov = torch.eye(self.d, dtype=torch.float64).expand(self.d, self.d, self.d) * base.prior_var  # q(theta) = the prior

    def block_index(self) -> Tensor:
        return torch.zeros(self.d, 0, dtype=torch.long)

    def active(self, adj: Tensor) -> Tensor:
        self._check_adj(adj)
        return torch.zeros(adj.shape[:-2] + (0,), dtype=torch.bool)

    def log_likelihood(self, adj: Tensor, theta: Tensor, rows: Tensor | None = None) -> Tensor:
        """:math:`E_{q(\\theta)} \\log P(D \\mid G, \\theta)` ``[...]`` (module docstring; ``theta`` is empty and only sets the
        batch shape and dtype); with ``rows``, the mini-batch estimate of the base model."""
        base = self.base
        ll = base.log_likelihood(adj, self.mean.flatten().expand(adj.shape[:-2] + (self.d * self.d,)), rows)
        x, scale = base._rows(rows)
        C = base.grams if rows is None else base._node_grams(x, rows)[0]  # [d (node j), d, d]
        g = adj.to(torch.float64).transpose(-1, -2)  # [..., j, i]: the parents of j
        trace = torch.einsum("...ji,...jk,jik,jki->...j", g, g, C, self.cov).sum(-1)  # sum_j tr((C^(j) o g g^T) Sigma_j)
        out = ll.to(torch.float64) - 0.5 * scale * trace / base.obs_var
        return out.expand(torch.broadcast_shapes(out.shape, theta.shape[:-1])).to(theta.dtype)


def update_q_theta(model: MeanFieldLinearGaussian, graphs: Tensor) -> None:
    """Set :math:`q(\\theta)` of ``model`` to its coordinate update given ``graphs [K, d, d]`` drawn from :math:`q(G)` (module docstring)."""
    base = model.base
    g = graphs.to(torch.float64).transpose(-1, -2)  # [K, j, i]
    marginals = g.mean(0)  # [j, i]: E[g_ij]
    pairs = torch.einsum("kji,kjl->jil", g, g) / len(g)  # [j, i, l]: E[g_ij g_lj]
    C = base.grams  # [j, i, l]
    nodes = torch.arange(model.d)
    precision = torch.eye(model.d, dtype=torch.float64) / base.prior_var + C * pairs / base.obs_var  # [j, d, d]
    b = marginals * C[nodes, :, nodes] / base.obs_var  # [j, d]: E[g_ij] (X^T x_j)_i
    chol = torch.linalg.cholesky(precision)
    model.mean = torch.cholesky_solve(b[..., None], chol)[..., 0].T.contiguous()  # [i, j]
    model.cov = torch.cholesky_inverse(chol)


def vbg(
    model: LinearGaussian,
    n_samples: int = 1000,
    seed: int = 0,
    steps: int = 10000,
    iterations: int = 10,
    q_samples: int = 1000,
    batch_size: int = 64,
    lr: float = 3e-4,
    hidden: int = 128,
    walkers: int = 8,
    prefill: int = 200,
    min_exploration: float = 0.1,
    ema: float = 0.99,
    max_parents: int | None = None,
    progress: bool = True,
) -> BaselineSamples:
    """VBG on ``model.data`` (module docstring): ``steps`` GFlowNet updates in ``iterations`` rounds, each round ended by an
    update of :math:`q(\\theta)` from ``q_samples`` graphs; then ``n_samples`` graphs with weights from :math:`q(\\theta)`.

    The GFlowNet: JSP-GFN's network (``hidden`` features), Adam at ``lr``, ``batch_size`` replayed edge transitions per
    update from ``walkers`` parallel graphs (``prefill`` uniform moves first), exploration decaying from 1 to
    ``min_exploration`` over the first half of the updates, graphs drawn from a moving average of the weights (``ema``;
    0: the last iterate), at most ``max_parents`` parents per node (``None``: no limit). The noise variance, weight prior and graph prior are ``model``'s.

    Returns:
        :class:`~gflownet_measure.jsp_gfn.baselines.samples.BaselineSamples` with ``graphs [n_samples, d, d]`` bool (acyclic: the
        policy adds only edges that keep a DAG), ``thetas [n_samples, d * d]`` float64 (:math:`\\theta \\sim q(\\theta)` masked
        by the graph, row-major: ``theta[k, i * d + j]`` the weight of ``i -> j``), ``discarded = 0``. Deterministic given ``seed``.
    """
    if not isinstance(model, LinearGaussian):
        raise ValueError(f"vbg: model must be a LinearGaussian (VBG's closed-form q(theta) is linear-Gaussian); got {type(model).__name__}")
    check_counts("vbg", n_samples=n_samples, steps=steps, iterations=iterations, q_samples=q_samples, batch_size=batch_size)
    if iterations > steps:
        raise ValueError(f"vbg: iterations={iterations} exceeds steps={steps}: each round needs at least one update")
    start = time.perf_counter()
    mf = MeanFieldLinearGaussian(model)
    graph = make_space(mf, max_parents, name="dag")
    assert isinstance(graph.kappa, DagKernel)
    with torch.random.fork_rng():  # the network, the walkers and the draws from seed; the global stream left as it was
        torch.manual_seed(seed)
        with warnings.catch_warnings():  # the parameter head's last layer has no outputs, and torch warns that initialising it does nothing
            warnings.filterwarnings("ignore", "Initializing zero-element tensors", UserWarning)
            pf = JSPPolicy(graph.kappa, JSPNetwork(mf.d, hidden, mf.block_index(), mf.active, DiagGaussianHead))
        gfn = GFlowNet(pf, UniformPolicy(graph.kappa_b))
        average = WeightAverage(pf, ema) if ema > 0 else None
        sampler = pf if average is None else cast(JSPPolicy, average.module)
        replay = EdgeReplay(graph, pf, mf, 0, 100000, walkers, batch_size, lambda k: uniform_move_probability(k, steps, 0.5, min_exploration))
        replay.prefill(prefill)
        objective = dataclasses.replace(UNDIRECTED_SUBTB, hyper={**UNDIRECTED_SUBTB.hyper, "theta_samples": 1})  # Theta_G = R^0: one sample is all
        optimizer = torch.optim.Adam(pf.parameters(), lr=lr)
        bounds = [round(steps * (r + 1) / iterations) for r in range(iterations)]
        step = 0
        with torch.no_grad():  # q(theta) from the untrained policy's graphs: spread over the edges, every weight gets data
            update_q_theta(mf, posterior_samples(graph, sampler, q_samples)[0])
        for bound in tqdm(bounds, desc="vbg rounds", disable=not progress):
            for step in range(step, bound):
                loss = objective(gfn, replay(step))
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"vbg: the GFlowNet's loss is {float(loss)} at update {step}")
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                if average is not None:
                    average.update()
            step = bound
            with torch.no_grad():
                update_q_theta(mf, posterior_samples(graph, sampler, q_samples)[0])
        with torch.no_grad():
            graphs = posterior_samples(graph, sampler, n_samples)[0].bool()
            eps = torch.randn(n_samples, mf.d, mf.d, dtype=torch.float64)  # [K, j, i]
            weights = mf.mean.T + torch.einsum("jil,kjl->kji", torch.linalg.cholesky(mf.cov), eps)  # [K, j, i]: theta_.j ~ N(mu_j, Sigma_j)
    thetas = torch.where(graphs, weights.transpose(-1, -2), 0.0).flatten(1)
    return BaselineSamples(graphs, thetas, time.perf_counter() - start, 0)
