"""Joint DiBS (Lorch et al. 2021) through ``dibs-lib``: the "DiBS" baseline of Deleu et al. 2023 (JSP-GFN), section 5.2.

DiBS infers :math:`P(G, \\theta | D)` with a latent :math:`Z = (U, V)`, :math:`U, V \\in \\mathbb R^{d \\times k}`,
:math:`P(G_{ij} = 1 | Z) = \\sigma(\\alpha\\, u_i^\\top v_j)`, and Stein variational gradient descent (Liu & Wang 2016)
on ``n_samples`` particles :math:`(Z, \\theta)` (``dibs.inference.JointDiBS``, its defaults: RMSprop with step 0.005,
:math:`\\alpha_t = 0.05\\, t`, :math:`\\beta_t = t`, 128 Monte Carlo graphs per gradient). After ``steps`` updates each
particle gives the graph :math:`G_{ij} = [u_i^\\top v_j > 0]` (:math:`\\alpha \\to \\infty`) and its :math:`\\theta`.
Acyclicity is only a soft prior on :math:`Z`, so a particle can end cyclic; such particles are dropped, as in
``dibs.metrics`` (their count is ``discarded``).

Model, matched to :class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian` where the API allows:

- ``nonlinear=False``: ``dibs.models.LinearGaussian`` with ``obs_noise`` = ``model.obs_var`` (dibs-lib's
  ``obs_noise`` is a variance: noise std 0.1 in JSP-GFN), weights :math:`\\mathcal N(0,` ``model.prior_var``:math:`)`
  (``mean_edge=0``, ``sig_edge`` = its square root), and ``min_edge=0`` so the initial weights are prior draws
  (dibs-lib's default 0.5 only shifts the initial draws away from 0; it is not part of the prior). Its weight matrix
  ``W [d, d]`` has the likelihood :math:`x_{nj} \\sim \\mathcal N(\\sum_i x_{ni} G_{ij} W_{ij}, \\sigma^2)`: ``W[i, j]`` is
  the weight of ``i -> j``, as in this project.
- ``nonlinear=True``: ``dibs.models.DenseNonlinearGaussian``, one MLP per node with ``hidden_layers`` and every
  weight and bias :math:`\\sim \\mathcal N(0,` ``model.prior_var``:math:`)`, same noise variance.
- Graph prior: dibs-lib's Erdos-Renyi prior with ``edges_per_node`` expected edges per node
  (:math:`p = 2k/(d-1)`, the same :math:`p` as this project's ``erdos_renyi`` prior; 2 at d = 20 in JSP-GFN).

Cost, measured at d = 20, N = 100, 30 particles on one CPU core shared with other jobs (dibs-lib 1.3.3, jax 0.10.2,
float32): about 22 s of CPU time to compile, then about 0.9 s of CPU time per step (1.7 s of wall time per step under
that load: 100 steps took 172 s, 200 steps 341 s), so the default 1000 steps cost about 15 min of CPU time. After
10-20 steps nearly all particles are still cyclic (29-30 of 30 dropped): short runs say nothing about DiBS.
"""

from __future__ import annotations

import math
import time

import jax
import numpy as np
import torch
from dibs.inference import JointDiBS
from dibs.models import DenseNonlinearGaussian, ErdosReniDAGDistribution
from dibs.models import LinearGaussian as DibsLinearGaussian

from gflownet_measure.jsp_gfn.bayesnets.dags import is_dag
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

from .samples import BaselineSamples, check_counts

__all__ = ["flat_thetas", "joint_dibs"]


def flat_thetas(graphs: np.ndarray, weights: np.ndarray) -> torch.Tensor:
    """DiBS's linear weights ``[K, d, d]`` (``[k, i, j]``: ``i -> j``) in this project's layout: ``[K, d * d]`` float64, row-major, 0 at non-edges.

    ``theta[k, i * d + j]`` is the weight of ``i -> j`` in particle ``k``.
    """
    masked = np.where(graphs.astype(bool), weights, 0.0)
    return torch.from_numpy(masked.reshape(len(masked), masked.shape[-1] ** 2).astype(np.float64))


def joint_dibs(
    model, n_samples: int = 30, seed: int = 0, steps: int = 1000, nonlinear: bool = False, edges_per_node: float = 2.0, hidden_layers: tuple[int, ...] = (5,)
) -> BaselineSamples:
    """Joint DiBS with ``n_samples`` SVGD particles and ``steps`` updates on ``model.data`` (module docstring).

    ``model``: a :class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian`; for ``nonlinear=True`` any object with
    ``data [N, d]``, ``obs_var`` and ``prior_var`` (the MLP data's model).

    Returns:
        :class:`~gflownet_measure.jsp_gfn.baselines.samples.BaselineSamples` with the acyclic particles' ``graphs [K, d, d]`` bool
        (``K = n_samples - discarded``) and, for the linear model, ``thetas [K, d * d]`` float64 (:func:`flat_thetas`);
        ``thetas = None`` for the nonlinear model, whose MLP weights (a pytree per node, with biases) have no place in
        this project's layout. Deterministic given ``seed`` (``jax.random.PRNGKey``).

    Cost: see the module docstring (about 15 min of CPU time at d = 20, N = 100 with the defaults).
    """
    if not nonlinear and not isinstance(model, LinearGaussian):
        raise ValueError(f"joint_dibs: the linear model needs a LinearGaussian (its data and hyper-parameters set DiBS's); got {type(model).__name__}")
    missing = [name for name in ("data", "obs_var", "prior_var") if not hasattr(model, name)]
    if missing:
        raise ValueError(f"joint_dibs: model needs the attributes data, obs_var and prior_var; {type(model).__name__} lacks {', '.join(missing)}")
    check_counts("joint_dibs", n_samples=n_samples, steps=steps)
    d = model.data.shape[1]
    if not 0 < 2 * edges_per_node / max(d - 1, 1) < 1:
        raise ValueError(f"joint_dibs: edges_per_node must give an Erdos-Renyi p = 2 k / (d - 1) in (0, 1); got k = {edges_per_node!r} for d = {d}")
    start = time.perf_counter()
    if nonlinear:
        likelihood = DenseNonlinearGaussian(n_vars=d, hidden_layers=tuple(hidden_layers), obs_noise=model.obs_var, sig_param=math.sqrt(model.prior_var))
    else:
        likelihood = DibsLinearGaussian(n_vars=d, obs_noise=model.obs_var, mean_edge=0.0, sig_edge=math.sqrt(model.prior_var), min_edge=0.0)
    dibs = JointDiBS(
        x=jax.numpy.asarray(np.asarray(model.data, dtype=np.float32)),
        graph_model=ErdosReniDAGDistribution(d, n_edges_per_node=edges_per_node),
        likelihood_model=likelihood,
    )
    graphs, weights = dibs.sample(key=jax.random.PRNGKey(seed), n_particles=int(n_samples), steps=int(steps))
    graphs = np.asarray(graphs).astype(bool)
    keep = is_dag(torch.from_numpy(graphs)).numpy()
    thetas = None if nonlinear else flat_thetas(graphs[keep], np.asarray(weights)[keep])
    return BaselineSamples(torch.from_numpy(graphs[keep]), thetas, time.perf_counter() - start, int((~keep).sum()))
