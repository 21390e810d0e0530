"""The hypergrid (Bengio et al. 2021): the discrete special case of the theory (Lahlou et al. 2023, Appendix B).

States are points of :math:`\\{0, \\dots, H-1\\}^D`; from ``x`` one moves +1 along one axis or
stops. Reward, with :math:`a_d = |x_d/(H-1) - 1/2|`:

.. math:: R(x) = R_0 + R_1 \\prod_d 1[0.25 < a_d \\le 0.5] + R_2 \\prod_d 1[0.3 < a_d < 0.4]
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from gflownet_measure.densities import UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.kernels import Kernel, atoms_measure
from gflownet_measure.measures import Measure, counting
from gflownet_measure.networks import MLPPolicy
from gflownet_measure.options import check_options, option, settings_of

MAX_STATES = 2**18
"""Largest grid (``height ** ndim`` states) built: nu lists every state, and the exact metrics evaluate the policy on all of them."""


@dataclass(frozen=True)
class HypergridConfig:
    """The grid :math:`\\{0, \\dots, H-1\\}^D`, its reward and its policies' networks; raises ``ValueError`` for a value out of range or a grid of
    more than :data:`MAX_STATES` states (its exact references enumerate them all)."""

    height: int = option(8, "grid side H", low=2, high=64)
    ndim: int = option(2, "dimension D", low=1, high=6)
    R0: float = option(1e-3, "background reward (> 0 so log R is finite)", low=1e-12)
    R1: float = option(0.5, "reward of the outer band", low=0.0)
    R2: float = option(2.0, "reward of the inner squares", low=0.0)
    backward: str = option("uniform", "P_B: fixed uniform or learned", choices=("uniform", "learned"))
    hidden: int = option(128, "MLP width", low=1)
    n_layers: int = option(2, "MLP hidden layers", low=0)

    def __post_init__(self):
        check_options(self)
        H, D = self.height, self.ndim
        if H**D > MAX_STATES:
            raise ValueError(f"height={H}, ndim={D} is a grid of {H**D:,} states; valid: at most {MAX_STATES:,} (e.g. height 64 at ndim 3, 16 at 4, 8 at 6)")


SETTINGS = settings_of(HypergridConfig)


class HypergridKernel(Kernel):
    """:math:`\\kappa(x, \\cdot) = \\sum_{d: x_d < H-1} \\delta_{x + e_d} + \\delta_\\bot` (``forward``), or
    :math:`\\kappa_b(x, \\cdot) = \\sum_{d: x_d > 0} \\delta_{x - e_d}` (backward): counting measures."""

    def __init__(self, height: int, ndim: int, forward: bool):
        self.height, self.ndim, self.forward = height, ndim, forward

    def __call__(self, s: Tensor) -> Measure:
        B, D = s.shape
        eye = torch.eye(D, dtype=s.dtype)
        if self.forward:
            x = torch.cat([s[:, None] + eye, s[:, None]], 1)  # D children, then the sink atom
            mask = torch.cat([s < self.height - 1, torch.ones(B, 1, dtype=torch.bool)], 1)
            sink = torch.zeros_like(mask)
            sink[:, -1] = True
            return atoms_measure(x, mask, sink)
        return atoms_measure(s[:, None] - eye, s > 0)


def log_reward(x: Tensor, height: int, R0: float, R1: float, R2: float) -> Tensor:
    a = (x / (height - 1) - 0.5).abs()
    band = ((a > 0.25) & (a <= 0.5)).all(-1)
    square = ((a > 0.3) & (a < 0.4)).all(-1)
    return torch.log(R0 + R1 * band + R2 * square)


def make_graph(config: HypergridConfig) -> PointedGraph:
    H, D = config.height, config.ndim
    grid = torch.tensor(list(itertools.product(range(H), repeat=D)), dtype=torch.float32)
    everything = counting(grid)

    def encode(x: Tensor) -> Tensor:
        return torch.nn.functional.one_hot(x.long(), H).flatten(1).float()

    return PointedGraph(
        name=f"hypergrid(H={H}, D={D})",
        source=torch.zeros(D),
        kappa=HypergridKernel(H, D, forward=True),
        kappa_b=HypergridKernel(H, D, forward=False),
        nu=everything,
        terminal=everything,
        log_reward=lambda x: log_reward(x, H, config.R0, config.R1, config.R2),
        max_length=D * (H - 1) + 1,
        encode=encode,
    )


def make_policies(graph: PointedGraph, config: HypergridConfig):
    """``(P_F, P_B)``: an MLP on one-hot coordinates over the ``D + 1`` atoms; P_B uniform or an MLP over ``D`` parents (``config.backward``)."""
    H, D, hidden, n_layers = config.height, config.ndim, config.hidden, config.n_layers
    pf = MLPPolicy(graph.kappa, graph.encode, D * H, D + 1, hidden=hidden, n_layers=n_layers)
    pb = UniformPolicy(graph.kappa_b) if config.backward == "uniform" else MLPPolicy(graph.kappa_b, graph.encode, D * H, D, hidden=hidden, n_layers=n_layers)
    return pf, pb
