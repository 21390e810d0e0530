"""The continuous torus (Lahlou et al. 2023, section 4.3): T von Mises moves of n angles, then a reward on the torus.

States are :math:`s = (\\theta, t)` with :math:`\\theta \\in [0, 2\\pi)^n` and the step :math:`t \\in \\{0, \\dots, T\\}` in the
last coordinate; :math:`s_0 = (0, 0)`. With :math:`\\lambda` Haar (arclength) measure on the torus :math:`\\mathbb T^n`
(total mass :math:`(2\\pi)^n`), the pointed graph is

- :math:`\\kappa((\\theta, t), \\cdot) = \\lambda \\otimes \\delta_{t+1}` for :math:`t < T` (the source's children: the whole
  torus at :math:`t = 1`), the sink atom for :math:`t = T`; charted by the increment
  :math:`u = \\theta' - \\theta \\in [-\\pi, \\pi)^n` (an :class:`~gflownet_measure.charts.AffineChart` with ``period``
  :math:`2\\pi` and unit scale, :math:`\\log|J| = 0`: Haar measure is invariant under translation);
- :math:`\\kappa_b((\\theta, t), \\cdot) = \\lambda \\otimes \\delta_{t-1}` for :math:`t \\ge 2`, the atom :math:`s_0` for
  :math:`t = 1`, zero at :math:`s_0` (eq. 5);
- :math:`\\nu = \\delta_{s_0} + \\sum_{t=1}^T \\lambda \\otimes \\delta_t` and :math:`\\kappa_b(\\bot, \\cdot) = \\lambda \\otimes \\delta_T`:
  the reward is a density w.r.t. Haar measure.

Eq. 4 holds level by level: both sides are :math:`\\lambda \\otimes \\lambda` on consecutive levels (and
:math:`\\delta_{s_0} \\otimes \\lambda` at the source). Policies: per angle a mixture of von Mises increments
(:class:`~gflownet_measure.heads.VonMisesMixtureHead`) on features :math:`\\cos k\\theta_i, \\sin k\\theta_i`
(:math:`k = 1..K`) and :math:`t / T`, the public code's encoding (docs/torus.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor

from gflownet_measure.charts import AffineChart
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.heads import VonMisesMixtureHead
from gflownet_measure.kernels import Kernel
from gflownet_measure.measures import Box, Measure, charted, dirac, sum_measures
from gflownet_measure.networks import MLPPolicy
from gflownet_measure.options import check_options, option, settings_of

from .sde import LevelKernel
from .torus_targets import TARGETS, TorusTarget, get_target

__all__ = [
    "TorusConfig",
    "SETTINGS",
    "TWO_PI",
    "increments_box",
    "TorusKernel",
    "Encoder",
    "exploration_concentration",
    "levels",
    "target_of",
    "make_graph",
    "make_policies",
    "absolute_locations",
    "mlp_policies",
]

TWO_PI = 2 * math.pi


def increments_box(n: int, concentration: float = 0.0) -> Box:
    """The chart box of an increment of ``n`` angles, :math:`[-\\pi, \\pi]^n`: one period per coordinate, centred on no move;
    its reference proposal (the exploration move) is von Mises(0, ``concentration``) per angle, uniform (Haar) for 0."""
    return Box((-math.pi,) * n, (math.pi,) * n, periodic=True, proposal_concentration=concentration)


@dataclass(frozen=True)
class TorusConfig:
    """The torus, its target and the von Mises mixture policies (defaults: the public code's ctorus settings, docs/torus.md)."""

    target: str = option(
        "r6",
        "reward: r6 = (sin 3a + cos 2b + 2)^3 (six modes), alanine = Boltzmann density of alanine dipeptide (phi, psi) (needs the molecule extra)",
        choices=tuple(TARGETS),
    )
    n_dim: int = option(2, "number of angles n (r6: any; alanine: 2)", low=1, high=6)
    n_steps: int = option(10, "moves T before the forced exit", low=1, high=1000)
    n_components: int = option(5, "von Mises components per angle", low=1, high=64)
    c_min: float = option(4.0, "minimum von Mises concentration", low=1e-3)
    harmonics: int = option(5, "encoding cos(k theta), sin(k theta), k = 1..harmonics, per angle", low=1, high=64)
    hidden: int = option(512, "MLP width", low=1)
    n_layers: int = option(5, "Linear+ELU blocks of each MLP", low=0)
    exploration: str = option(
        "uniform",
        "the epsilon-exploration move: uniform (Haar measure, truly random) or von-mises (von Mises(0, exploration_concentration) about no move: the public code's 'random' action)",
        choices=("uniform", "von-mises"),
    )
    exploration_concentration: float = option(5.0, "concentration of the von-mises exploration move (the public code: 5)", low=1e-3)
    backward: str = option("learned", "P_B: learned (own MLP), tied (P_F's torso, own output layer) or uniform (Haar)", choices=("learned", "tied", "uniform"))
    location: str = option(
        "increment",
        "what the network's von Mises locations are: increment (the move, the public code's) or absolute (the angle the move lands on; absolute_locations)",
        choices=("increment", "absolute"),
    )
    temperature: float = option(300.0, "alanine: temperature in kelvin of the Boltzmann density exp(-E / kT)", low=0.0)
    forcefield: str = option("amber14-all.xml", "alanine: OpenMM force-field file (vacuum, no cutoff), e.g. amber14-all.xml or amber99sbildn.xml")
    structure: str = option("", "alanine: PDB file of the molecule (empty: the bundled ACE-ALA-NME)", path=True)
    relax: bool = option(
        False,
        "alanine: at each (phi, psi) minimise the other coordinates under torsion restraints (false: rigid rotation, the paper's protocol)",
        choices=(True, False),
    )
    grid: int = option(72, "alanine: energy grid points per angle for training (periodic interpolation)", low=8, high=720)

    def __post_init__(self):
        check_options(self)
        if not self.temperature > 0:
            raise ValueError(f"temperature={self.temperature!r} must be > 0 kelvin")
        TARGETS[self.target].validate(self)


SETTINGS = settings_of(TorusConfig)


def target_of(config: TorusConfig) -> TorusTarget:
    """The target density of ``config`` (built once per process and setting; the molecule's energy grid is cached on disk)."""
    return get_target(config)


class TorusKernel(LevelKernel):
    """:math:`\\kappa` (``forward``) or :math:`\\kappa_b` of the torus (module docstring): increments on the torus, Haar measure
    through a unit-scale periodic chart."""

    def __init__(self, n: int, n_steps: int, forward: bool, concentration: float = 0.0):
        super().__init__(
            n, n_steps, AffineChart(increments_box(n, concentration), range(n), relative=True, period=TWO_PI, advance={n: 1.0 if forward else -1.0}), forward
        )


class Encoder:
    """Features ``[B, 2 K n + 1]`` of states: :math:`\\cos k\\theta_i, \\sin k\\theta_i` for :math:`k = 1..K`, then :math:`t / T` (float32).

    The public code's encoding (``policy_encoding_dim_per_angle`` = 10 for K = 5) with the step scaled to [0, 1].
    """

    def __init__(self, n: int, n_steps: int, harmonics: int):
        self.n, self.n_steps = n, n_steps
        self.k = torch.arange(1, harmonics + 1, dtype=torch.float64)

    @property
    def width(self) -> int:
        return 2 * len(self.k) * self.n + 1

    def __call__(self, s: Tensor) -> Tensor:
        a = s[:, : self.n, None].double() * self.k  # [B, n, K]
        return torch.cat([torch.cos(a).flatten(1), torch.sin(a).flatten(1), s[:, self.n :].double() / self.n_steps], 1).float()


def levels(n: int, n_steps: int) -> list[Measure]:
    """Haar measure on the torus at each step ``t = 1..T``: the pieces of :math:`\\nu` (module docstring)."""
    torus = Box((0.0,) * n, (TWO_PI,) * n, periodic=True)
    return [charted(AffineChart(torus, range(n), period=TWO_PI, fixed={n: float(t)}), n + 1, torch.float64) for t in range(1, n_steps + 1)]


def make_graph(config: TorusConfig) -> PointedGraph:
    """The torus of ``config`` with its target's reward; states are float64 so angles survive the chart round trip."""
    return torus_graph(config, TorusKernel, "torus")


def exploration_concentration(config: TorusConfig) -> float:
    """The von Mises concentration of the forward kernel's reference proposal (0: uniform), from ``config.exploration``."""
    return config.exploration_concentration if config.exploration == "von-mises" else 0.0


def torus_graph(config: TorusConfig, kernel: type, name: str) -> PointedGraph:
    """A space on the levels of the torus (:func:`levels`), moving by ``kernel(n, T, forward, concentration)`` (this module's,
    or the hybrid torus's; ``concentration`` of the forward kernel's exploration move, :func:`exploration_concentration`),
    with ``config``'s target as reward."""
    n, T = config.n_dim, config.n_steps
    target = target_of(config)
    level = levels(n, T)
    source = torch.zeros(n + 1, dtype=torch.float64)
    return PointedGraph(
        name=f"{name}({target.name}, n={n}, T={T})",
        source=source,
        kappa=kernel(n, T, forward=True, concentration=exploration_concentration(config)),
        kappa_b=kernel(n, T, forward=False),
        nu=sum_measures(dirac(source), *level),
        terminal=level[-1],
        log_reward=lambda s: target.log_reward(s[:, :n]),
        max_length=T + 1,
        encode=Encoder(n, T, config.harmonics),
    )


def absolute_locations(n_logits: int, heads: list, angles: list) -> Callable[[Tensor], Tensor]:
    """:class:`~gflownet_measure.networks.MLPPolicy`'s ``offset`` that makes the von Mises locations of ``heads`` absolute
    (:meth:`~gflownet_measure.heads.VonMisesMixtureHead.location_offset`): ``angles[j]`` are the state coordinates head
    ``j`` moves; the first ``n_logits`` raw outputs (atom and piece logits) are left as they are.

    With the public code's increments a policy that sends every state to one basin needs the location :math:`\\mu - \\theta`,
    which jumps by :math:`2\\pi` somewhere on the circle; an absolute location is the constant :math:`\\mu`. On alanine
    dipeptide's narrow basins this is what lets the last moves land on them (docs/results.md, section 9)."""

    def offset(s: Tensor) -> Tensor:
        return torch.cat([s.new_zeros(len(s), n_logits), *(h.location_offset(s[:, list(a)]) for h, a in zip(heads, angles))], 1)

    return offset


def mlp_policies(
    graph: PointedGraph, config: TorusConfig, kappa: Kernel, kappa_b: Kernel, n_atoms: int, pf_heads: list, pb_heads: list, pf_angles: list, pb_angles: list
):
    """``(P_F, P_B)``: MLPs on the graph's encoding over ``kappa`` / ``kappa_b``; P_B as ``config.backward`` says
    (``learned``: its own MLP, the public code's ``shared_weights: False``; ``tied``: P_F's torso; ``uniform``).
    ``pf_angles`` / ``pb_angles``: the state coordinates each head moves, for ``config.location = absolute``
    (:func:`absolute_locations`)."""
    n_in = cast(Encoder, graph.encode).width  # a torus_graph's encode (PointedGraph types it a function)

    def offset(heads: list, angles: list):
        return absolute_locations(n_atoms + len(heads), heads, angles) if config.location == "absolute" else None

    pf = MLPPolicy(kappa, graph.encode, n_in, n_atoms, pf_heads, hidden=config.hidden, n_layers=config.n_layers, offset=offset(pf_heads, pf_angles))
    if config.backward == "uniform":
        return pf, UniformPolicy(kappa_b)
    shared = pf.torso if config.backward == "tied" else None
    return pf, MLPPolicy(
        kappa_b, graph.encode, n_in, n_atoms, pb_heads, hidden=config.hidden, n_layers=config.n_layers, shared_torso=shared, offset=offset(pb_heads, pb_angles)
    )


def make_policies(graph: PointedGraph, config: TorusConfig):
    """``(P_F, P_B)``: a mixture of ``n_components`` von Mises increments per angle (minimum concentration ``c_min``), densities
    w.r.t. Haar measure on the next (previous) step's torus; an exit logit at ``t = T`` (where it is the only component)."""
    n = config.n_dim
    head = lambda: VonMisesMixtureHead(increments_box(n), config.n_components, config.c_min)  # noqa: E731
    every = [range(n)]
    return mlp_policies(graph, config, graph.kappa, graph.kappa_b, 1, [head()], [head()], every, every)
