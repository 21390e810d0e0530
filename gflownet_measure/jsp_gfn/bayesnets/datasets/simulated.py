"""Simulated Bayesian networks with a known graph: linear-Gaussian, MLP-Gaussian and zero-inflated MLP data.

Every simulator draws :math:`G \\sim \\mathrm{ER}(p)` (:func:`random_er_dag`), the parameters of the matching CPD model on
:math:`\\Theta_G` and the rows by ancestral sampling, deterministically given ``seed``; it returns :class:`SimulatedData`
(train and held-out rows, the graph and the parameters in the model's layout; docs/references.md, 'Simulated data').
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gflownet_measure.jsp_gfn.bayesnets.cpds import check_hidden, mlp_active, mlp_outputs

__all__ = ["SimulatedData", "check_simulation", "random_er_dag", "simulate_er", "simulate_mlp", "simulate_zi"]


@dataclass(frozen=True)
class SimulatedData:
    """A simulated network: ground truth ``adj [d, d]`` bool and flat ``theta [P]`` (in the layout of the model that
    simulated it, 0 off :math:`\\Theta_G`), ``train [N, d]`` and ``valid [N', d]`` float64, variable ``names``."""

    adj: Tensor
    theta: Tensor
    train: Tensor
    valid: Tensor
    names: list[str]


def check_simulation(fn: str, d: int, edges_per_node: float, n_train: int, n_valid: int, obs_std: float) -> None:
    """The one-line ``ValueError`` of a simulator ``fn`` given sizes or scales it cannot use."""
    if int(d) != d or d < 1 or int(n_train) != n_train or n_train < 1 or int(n_valid) != n_valid or n_valid < 0:
        raise ValueError(f"{fn}: need integers d >= 1, n_train >= 1, n_valid >= 0; got {d!r}, {n_train!r}, {n_valid!r}")
    if not (edges_per_node >= 0 and obs_std > 0):
        raise ValueError(f"{fn}: need edges_per_node >= 0 and obs_std > 0; got {edges_per_node!r}, {obs_std!r}")


def random_er_dag(d: int, edges_per_node: float, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """:math:`G \\sim \\mathrm{ER}(p)`, :math:`p = \\min(1, 2k/(d-1))` (docs/references.md, 'Simulated data'): ``(adj [d, d] bool, order [d])``.

    A Bernoulli(p) strict lower triangle with its nodes randomly permuted by ``perm``: :math:`i \\to j` iff
    ``perm[i] > perm[j]``, so ``order`` (the nodes by decreasing ``perm``) is a topological order.
    """
    p = min(1.0, 2 * edges_per_node / (d - 1)) if d > 1 else 0.0
    lower = np.tril(rng.random((d, d)) < p, k=-1)
    perm = rng.permutation(d)
    return lower[perm][:, perm], np.argsort(-perm)


def simulate_er(d: int, edges_per_node: float, n_train: int, n_valid: int, obs_std: float = 0.1, seed: int = 0) -> SimulatedData:
    """:math:`G \\sim \\mathrm{ER}(p)` (:func:`random_er_dag`), :math:`\\theta_{ij} \\sim \\mathcal N(0, 1)`, :math:`X = E (I - \\Theta)^{-1}` (docs/references.md, 'Simulated data').

    The data solve :math:`X = X\\Theta + E` with :math:`E_{nj} \\sim \\mathcal N(0,` ``obs_std`` :math:`^2)`, which equals
    ancestral sampling because :math:`\\Theta` is nilpotent on a DAG. ``theta`` is flat ``[d * d]``
    (:class:`LinearGaussian`'s layout). Deterministic given ``seed`` (numpy ``Generator``).
    """
    check_simulation("simulate_er", d, edges_per_node, n_train, n_valid, obs_std)
    rng = np.random.default_rng(seed)
    adj, _ = random_er_dag(d, edges_per_node, rng)
    theta = np.where(adj, rng.normal(size=(d, d)), 0.0)
    noise = rng.normal(scale=obs_std, size=(n_train + n_valid, d))
    x = np.linalg.solve((np.eye(d) - theta).T, noise.T).T  # X (I - Theta) = E
    x = torch.from_numpy(x)
    return SimulatedData(torch.from_numpy(adj), torch.from_numpy(theta).flatten(), x[:n_train], x[n_train:], [f"x{i}" for i in range(d)])


def simulate_mlp(d: int, edges_per_node: float, n_train: int, n_valid: int, obs_std: float = 0.1, seed: int = 0, hidden: int = 5) -> SimulatedData:
    """:math:`G \\sim \\mathrm{ER}(p)` (:func:`~gflownet_measure.jsp_gfn.bayesnets.datasets.simulated.random_er_dag`, as :func:`~gflownet_measure.jsp_gfn.bayesnets.datasets.simulated.simulate_er`), the parameters of
    :class:`MLPGaussian` :math:`\\sim \\mathcal N(0, 1)` on :math:`\\Theta_G` (0 elsewhere), and ancestral sampling
    :math:`x_j = \\mathrm{MLP}_j(x) + \\varepsilon_j`, :math:`\\varepsilon_j \\sim \\mathcal N(0,` ``obs_std`` :math:`^2)`, in a
    topological order (as the nonlinear Gaussian networks of Lorch et al. 2021).

    Returns :class:`~gflownet_measure.jsp_gfn.bayesnets.datasets.simulated.SimulatedData` with ``theta`` flat ``[d ((d + 2) H + 1)]`` in :class:`MLPGaussian`'s layout.
    Deterministic given ``seed`` (numpy ``Generator``).
    """
    check_simulation("simulate_mlp", d, edges_per_node, n_train, n_valid, obs_std)
    check_hidden("simulate_mlp", hidden)
    rng = np.random.default_rng(seed)
    adj_np, order = random_er_dag(d, edges_per_node, rng)
    adj = torch.from_numpy(adj_np)
    block = (d + 2) * hidden + 1
    theta = torch.where(mlp_active(adj, hidden, 1, 1), torch.from_numpy(rng.normal(size=d * block)), 0.0)
    noise = torch.from_numpy(rng.normal(scale=obs_std, size=(n_train + n_valid, d)))
    x = torch.zeros(n_train + n_valid, d, dtype=torch.float64, device="cpu")  # simulated on the CPU, as numpy draws it
    for j in order.tolist():  # the parents of j are filled in; the other columns are masked
        x[:, j] = mlp_outputs(theta.view(d, block), x, hidden, 1)[:, j, 0] + noise[:, j]
    return SimulatedData(adj, theta, x[:n_train], x[n_train:], [f"x{i}" for i in range(d)])


def simulate_zi(
    d: int, edges_per_node: float, n_train: int, n_valid: int, alpha: float = 0.3, obs_std: float = 0.1, seed: int = 0, hidden: int = 16
) -> SimulatedData:
    """Zero-inflated data with a known graph: :math:`G` and the network parameters as :func:`simulate_mlp` (:math:`\\mathcal N(0, 1)`
    on :math:`\\Theta_G`), :math:`\\alpha_j` = ``alpha`` and :math:`\\sigma_j` = ``obs_std`` for every node, and ancestral
    sampling :math:`x_j = 0` with probability :math:`\\alpha_j`, else :math:`\\mathrm{MLP}_j(x) + \\sigma_j \\varepsilon`.

    Returns :class:`~gflownet_measure.jsp_gfn.bayesnets.datasets.simulated.SimulatedData` with ``theta`` flat ``[d ((d + 2) H + 3)]`` in :class:`ZeroInflatedMLP`'s layout
    (:math:`a_j = \\mathrm{logit}\\,\\alpha`, :math:`s_j = \\log \\sigma`). Deterministic given ``seed``.
    """
    check_simulation("simulate_zi", d, edges_per_node, n_train, n_valid, obs_std)
    check_hidden("simulate_zi", hidden)
    if not 0 <= alpha < 1:
        raise ValueError(f"simulate_zi: alpha must be in [0, 1); got {alpha!r}")
    rng = np.random.default_rng(seed)
    adj_np, order = random_er_dag(d, edges_per_node, rng)
    adj = torch.from_numpy(adj_np)
    net = (d + 2) * hidden + 1
    theta = torch.where(mlp_active(adj, hidden, 1, 1, 2), torch.from_numpy(rng.normal(size=d * (net + 2))), 0.0).view(d, net + 2)
    theta[:, net] = math.log(alpha / (1 - alpha)) if alpha > 0 else -30.0
    theta[:, net + 1] = math.log(obs_std)
    noise = torch.from_numpy(rng.normal(scale=obs_std, size=(n_train + n_valid, d)))
    dropout = torch.from_numpy(rng.random((n_train + n_valid, d)) < alpha)
    x = torch.zeros(n_train + n_valid, d, dtype=torch.float64, device="cpu")  # simulated on the CPU, as numpy draws it
    for j in order.tolist():
        value = mlp_outputs(theta[:, :net], x, hidden, 1)[:, j, 0] + noise[:, j]
        x[:, j] = torch.where(dropout[:, j], 0.0, value)
    return SimulatedData(adj, theta.flatten(), x[:n_train], x[n_train:], [f"x{i}" for i in range(d)])
