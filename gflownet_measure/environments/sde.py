"""SDE samplers on R^n as GFlowNets (Lahlou et al. 2023, section 4.2): Euler-Maruyama steps over a fixed horizon.

States are :math:`s = (x, k)` with :math:`x \\in \\mathbb R^n` and the step :math:`k \\in \\{0, \\dots, T\\}`
stored in the last coordinate; :math:`s_0 = (0, 0)`. With :math:`\\Delta t = 1/T` and
:math:`c = \\sigma \\sqrt{\\Delta t}`, the pointed graph is

- :math:`\\kappa((x, k), \\cdot)` = Lebesgue on :math:`\\mathbb R^n \\times \\{k + 1\\}` for :math:`k < T`, the sink
  atom for :math:`k = T`; charted by the increment :math:`u = (x' - x)/c` (an
  :class:`~gflownet_measure.charts.AffineChart` with ``advance`` on the step, :math:`\\log|J| = n \\log c`);
- :math:`\\kappa_b((x, k), \\cdot)` = Lebesgue on :math:`\\mathbb R^n \\times \\{k - 1\\}` for :math:`k \\ge 2`, the
  atom :math:`s_0` for :math:`k = 1`, zero at :math:`s_0` (eq. 5);
- :math:`\\nu = \\delta_{s_0} + \\sum_{k=1}^{T} \\lambda_{\\mathbb R^n} \\otimes \\delta_k` and
  :math:`\\kappa_b(\\bot, \\cdot) = \\lambda_{\\mathbb R^n} \\otimes \\delta_T`: the reward is a density w.r.t. Lebesgue.

Eq. 4 holds level by level since both sides are Lebesgue on :math:`\\mathbb R^n \\times \\mathbb R^n`.

Policies (densities w.r.t. these kernels, i.e. w.r.t. Lebesgue in ``x``):

.. math:: P_F((x, k), \\cdot) = \\mathcal N\\big(x + \\mu_\\theta(x, t_k)\\,\\Delta t,\\; v_\\theta\\, \\sigma^2 \\Delta t\\, I\\big),
   \\qquad P_B((x, k), \\cdot) = \\mathcal N\\big(x\\,(1 - \\tfrac1k),\\; \\sigma^2 \\Delta t\\, \\tfrac{k-1}{k}\\, I\\big)

with :math:`v_\\theta = 1` or learned, and :math:`P_B` the Brownian bridge pinned at 0 (its step from
:math:`k = 1` to :math:`s_0` has probability one). For :math:`\\mu = 0` these are the forward and
backward laws of the same process, so :math:`\\log R + \\sum \\log P_B - \\sum \\log P_F` estimates
:math:`\\log Z` without bias in :math:`e^w` (docs/references.md, 'SDE targets and Table 2').
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import torch
from torch import Tensor, nn
from torch.distributions import Distribution
from torch.nn import functional as F

from gflownet_measure.charts import AffineChart
from gflownet_measure.densities import KernelDensity, Policy
from gflownet_measure.gaussian import diagonal_normal
from gflownet_measure.graph import PointedGraph
from gflownet_measure.kernels import Kernel
from gflownet_measure.measures import Atoms, Box, Measure, Piece, charted, dirac, sum_measures
from gflownet_measure.options import check_options, option, settings_of

from .sde_targets import TARGETS

__all__ = [
    "SDEConfig",
    "SETTINGS",
    "DEFAULT_SIGMA",
    "LevelKernel",
    "SDEKernel",
    "FourierTime",
    "PISNetwork",
    "EulerMaruyamaPolicy",
    "BrownianBridge",
    "sigma_of",
    "level_graph",
    "level_kernels",
    "make_graph",
    "make_policies",
]

# The Table 2 setting of Lahlou et al. 2023 gives "sigma = 5 for the mixture, 1 for the funnel"; read as the variance sigma^2 per unit
# time, the t_scale of gfn-diffusion, which reuses the paper's setting (sigma^2 = t_scale = 5; docs/references.md, 'SDE
# targets and Table 2'). With sigma = 5 itself off-policy TB collapses onto one mode of the mixture (B_RW = -2.2 = log 1/9).
# The Sendera et al. 2024 targets take gfn-diffusion's t_scale: its default 5 for the 25-Gaussian grid, and 1 for the
# funnel and many-well, as its README's many-well commands (docs/references.md, 'Diffusion-sampler benchmark').
# gfn-diffusion has no LGCP; it takes the same 1 (docs/references.md, 'Diffusion-sampler benchmark').
DEFAULT_SIGMA = {"gmm9": math.sqrt(5.0), "funnel": 1.0, "gmm25": math.sqrt(5.0), "hard_funnel": 1.0, "many_well": 1.0, "lgcp": 1.0}


@dataclass(frozen=True)
class SDEConfig:
    """The target, the time grid, the diffusion coefficient and the policy network of an SDE sampler."""

    target: str = option("gmm9", "target density", choices=tuple(TARGETS))
    n_steps: int = option(100, "Euler-Maruyama steps T over the unit time horizon", low=1, high=10000)
    sigma: float = option(
        0.0,
        "diffusion coefficient sigma (per unit time); 0 = the paper's value for the target (sqrt 5 for gmm9 and gmm25, 1 for the funnels, many_well and lgcp)",
        low=0.0,
    )
    hidden: int = option(64, "width of the PIS-style networks", low=1)
    learned_variance: bool = option(False, "learn a per-coordinate variance factor exp(4 tanh(.)) of the forward steps", choices=(True, False))
    langevin: bool = option(False, "PIS-NN: add a learned c(t) times the clipped grad log R to the drift (not black-box)", choices=(True, False))
    langevin_clip: float = option(1e4, "langevin: clip grad log R to +-this (PIS: 1e4; gfn-diffusion's lgv_clip: 100)", low=1e-8)
    learned_backward: bool = option(
        False,
        "learn P_B: the Brownian bridge's mean and variance per coordinate times 1 + r tanh(.) (gfn-diffusion's learn_pb; Gritsaev et al. 2025)",
        choices=(True, False),
    )
    backward_range: float = option(0.1, "learned_backward: the range r of its corrections (gfn-diffusion's pb_scale_range)", low=1e-6, high=0.9)

    def __post_init__(self):
        check_options(self)


SETTINGS = settings_of(SDEConfig)


def sigma_of(config: SDEConfig) -> float:
    """The diffusion coefficient: ``config.sigma``, or the paper's value for the target when it is 0."""
    return config.sigma if config.sigma > 0 else DEFAULT_SIGMA[config.target]


def _r(n: int) -> Box:
    """:math:`\\mathbb R^n` in units of one step's standard deviation; Monte Carlo nodes of the checks are drawn from
    :math:`\\mathcal N(0, 1.5^2 I)` there, a little wider than a unit-variance step (in 10 dimensions a wider
    proposal makes importance weights of a unit Gaussian degenerate: variance factor :math:`(s^2/\\sqrt{2s^2-1})^n`)."""
    return Box((-math.inf,) * n, (math.inf,) * n, proposal_scale=1.5)


class LevelKernel(Kernel):
    """:math:`\\kappa` (``forward``) or :math:`\\kappa_b` of a space of states ``(x, k)``, ``x`` in ``dim`` coordinates and the
    step ``k`` in ``0..n_steps``, that moves by ``chart`` (a relative chart advancing ``k`` by one, forward or back).

    Components: forward ``[sink atom | increment piece]`` (the sink at ``k = n_steps``), backward
    ``[atom s0 | increment piece]`` (``s0`` the only parent at ``k = 1``). Shared by the Euler-Maruyama graph here
    (increments in :math:`\\mathbb R^n`) and the torus of :mod:`gflownet_measure.environments.torus` (periodic increments).
    """

    def __init__(self, dim: int, n_steps: int, chart: AffineChart, forward: bool):
        self.dim, self.n_steps, self.chart, self.forward = dim, n_steps, chart, forward

    def __call__(self, s: Tensor) -> Measure:
        B, D = s.shape
        k = s[:, self.dim]
        if self.forward:
            atom_mask, piece_mask, atom_x = k == self.n_steps, k < self.n_steps, s
        else:
            atom_mask, piece_mask, atom_x = k == 1, k >= 2, torch.zeros_like(s)
        atom_mask = atom_mask[:, None]
        sink = atom_mask if self.forward else torch.zeros_like(atom_mask)  # the forward atom is the sink, s0 is not
        atoms = Atoms(atom_x[:, None], torch.zeros(B, 1, dtype=s.dtype, device=s.device), atom_mask, sink)
        return Measure(atoms, (Piece(self.chart, s, piece_mask),))


class SDEKernel(LevelKernel):
    """:math:`\\kappa` (``forward``) or :math:`\\kappa_b` of the Euler-Maruyama graph (module docstring): increments in
    :math:`\\mathbb R^n`, charted in units ``scale``."""

    def __init__(self, dim: int, n_steps: int, scale: float, forward: bool):
        super().__init__(dim, n_steps, AffineChart(_r(dim), range(dim), scale=scale, relative=True, advance={dim: 1.0 if forward else -1.0}), forward)


class FourierTime(nn.Module):
    """:math:`\\gamma(t) = [\\sin(\\omega t + \\phi), \\cos(\\omega t + \\phi)]`, :math:`\\omega` = ``linspace(0.1, 100, C)``, learnable phase :math:`\\phi` (PIS)."""

    omega: Tensor

    def __init__(self, n_harmonics: int):
        super().__init__()
        self.register_buffer("omega", torch.linspace(0.1, 100.0, n_harmonics))
        self.phase = nn.Parameter(torch.zeros(n_harmonics))

    def forward(self, t: Tensor) -> Tensor:
        a = t[:, None] * self.omega + self.phase
        return torch.cat([torch.sin(a), torch.cos(a)], 1)


def _linear(layer: nn.Module) -> nn.Linear:
    """``layer``, a Linear layer of one of the networks here, typed as one (``nn.Sequential`` types its layers ``nn.Module``)."""
    assert isinstance(layer, nn.Linear)
    return layer


def _zero_last(net: nn.Sequential, bias: float = 0.0) -> nn.Sequential:
    last = _linear(net[-1])
    nn.init.zeros_(last.weight)
    nn.init.constant_(last.bias, bias)
    return net


class PISNetwork(nn.Module):
    """The PIS drift network: 2-layer MLPs on ``x`` and on a 128-dim Fourier feature of ``t``, then a 3-layer MLP on their concatenation.

    .. math:: f(x, t) = W_3\\, g(W_2\\, g(W_1\\, g([h_x(x); h_t(t)]) + b_1) + b_2) + b_3, \\qquad g = \\mathrm{GELU},

    evaluated as :math:`W_1 g([h_x; h_t]) + b_1 = W_1^x g(h_x) + \\tau(t)` with :math:`W_1 = [W_1^x \\mid W_1^t]` and the time part
    :math:`\\tau(t) = W_1^t g(h_t(t)) + b_1` (:meth:`time_part`) once per distinct time (a batch steps together), or given by
    the caller (a rollout's table over its levels, :meth:`EulerMaruyamaPolicy.for_rollout`); then one ``addmm`` per row
    block, so neither the concatenation nor :math:`g` of the time half is built per row. The layers are applied as
    functions of the modules' parameters (the parameters and their names are those of the modules). The last layer is
    zero-initialised, so training starts from the reference process (:math:`\\mu = 0`).
    """

    def __init__(self, dim: int, n_out: int, hidden: int = 64):
        super().__init__()
        self.t_net = nn.Sequential(FourierTime(hidden), nn.Linear(2 * hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.x_net = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.joint = _zero_last(
            nn.Sequential(nn.GELU(), nn.Linear(2 * hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, n_out))
        )

    def time_part(self, t: Tensor) -> Tensor:
        """:math:`\\tau(t) = W_1^t g(h_t(t)) + b_1` ``[len(t), hidden]``: what the first joint layer adds for the time ``t``."""
        (f, t1, _, t2), j1 = self.t_net, self.joint[1]
        t1, t2, j1 = _linear(t1), _linear(t2), _linear(j1)
        h_t = F.linear(F.gelu(F.linear(f(t), t1.weight, t1.bias)), t2.weight, t2.bias)
        return torch.addmm(j1.bias, F.gelu(h_t), j1.weight[:, t2.out_features :].t())

    def forward(self, x: Tensor, t: Tensor, time_part: Tensor | None = None) -> Tensor:
        """:math:`f(x, t)` ``[B, n_out]``; ``time_part``: :math:`\\tau` at the rows' times ``[B, hidden]`` when the caller has it (``t`` is then unused)."""
        (x1, _, x2), (_, j1, _, j2, _, j3) = self.x_net, self.joint
        x1, x2, j1, j2, j3 = _linear(x1), _linear(x2), _linear(j1), _linear(j2), _linear(j3)
        if time_part is None:
            times, index = torch.unique_consecutive(t, return_inverse=True)  # the distinct times, in runs (time-major batches: one run per time)
            time_part = self.time_part(times)
            time_part = time_part if len(times) == 1 else time_part.index_select(0, index)
        h_x = F.linear(F.gelu(F.linear(x, x1.weight, x1.bias)), x2.weight, x2.bias)
        z = torch.addmm(time_part, F.gelu(h_x), j1.weight[:, : x2.out_features].t())
        z = F.linear(F.gelu(z), j2.weight, j2.bias)
        return F.linear(F.gelu(z), j3.weight, j3.bias)


def _normal_rows(loc: Tensor, scale: Tensor, rows: Tensor) -> Distribution:
    """:math:`\\mathcal N(\\text{loc}_b, \\mathrm{diag}(\\text{scale}_b^2))` for the rows ``b`` that ``rows [B]`` selects (all of them, as a batch steps together: no gather)."""
    if bool(rows.all()):
        return diagonal_normal(loc, scale)
    return diagonal_normal(loc[rows], scale[rows])


class EulerMaruyamaPolicy(Policy):
    """:math:`P_F((x, k), \\cdot) = \\mathcal N(x + \\mu\\Delta t, v\\sigma^2\\Delta t\\, I)` w.r.t. Lebesgue, one network call per batch of states.

    In the chart's coordinates :math:`u = (x' - x)/(\\sigma\\sqrt{\\Delta t})` the step is
    :math:`\\mathcal N(\\mu\\sqrt{\\Delta t}/\\sigma, v I)`; the kernel's chart supplies :math:`\\log|J| = n \\log(\\sigma\\sqrt{\\Delta t})`.

    Args:
        log_reward: :math:`\\log R` on ``x [B, n]``; with ``langevin`` the drift adds
            :math:`c_\\theta(t)\\, \\mathrm{clip}(\\nabla \\log R(x), \\pm\\text{clip})` (PIS-NN, Zhang & Chen 2022).
        learned_variance: :math:`v = \\exp(4 \\tanh(\\cdot))` per coordinate, else 1.
    """

    def __init__(
        self,
        kernel: SDEKernel,
        sigma: float,
        hidden: int = 64,
        learned_variance: bool = False,
        log_reward: Callable[[Tensor], Tensor] | None = None,
        langevin: bool = False,
        clip: float = 1e4,
    ):
        super().__init__(kernel)
        n = kernel.dim
        self.dim, self.n_steps, self.sigma, self.learned_variance, self.clip = n, kernel.n_steps, sigma, learned_variance, clip
        self.net = PISNetwork(n, 2 * n if learned_variance else n, hidden)
        if langevin and log_reward is None:
            raise ValueError("langevin=True needs the log_reward whose gradient it adds")
        self.log_reward = log_reward if langevin else None
        self.langevin = (
            _zero_last(
                nn.Sequential(FourierTime(hidden), nn.Linear(2 * hidden, hidden), nn.GELU(), nn.Linear(hidden, hidden), nn.GELU(), nn.Linear(hidden, 1)),
                bias=0.01,
            )
            if langevin
            else None
        )

    def _grad_log_reward(self, x: Tensor) -> Tensor:
        assert self.log_reward is not None  # kept with the Langevin term, which alone calls this
        with torch.inference_mode(False), torch.enable_grad():  # also inside an inference-mode rollout: on a copy of x, an ordinary tensor
            xg = x.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(self.log_reward(xg).sum(), xg)
        return g.clamp(-self.clip, self.clip)

    def for_rollout(self):
        """The policy with its network's time part :math:`\\tau(t_k)` (:meth:`PISNetwork.time_part`) computed once for every level
        :math:`t_k = k/T`, ``k = 0..T``, and looked up at each step."""
        fourier = self.net.t_net[0]
        assert isinstance(fourier, FourierTime)
        omega = fourier.omega
        levels = torch.arange(self.n_steps + 1, dtype=omega.dtype, device=omega.device) / self.n_steps
        return functools.partial(self, time_table=self.net.time_part(levels))

    def forward(self, s: Tensor, time_table: Tensor | None = None) -> KernelDensity:
        """The density at ``s``; ``time_table``: :meth:`PISNetwork.time_part` at the levels ``0..T`` (:meth:`for_rollout`)."""
        m = self.kernel.outline(s)
        return KernelDensity(m, *self.parameters_at(s, m, time_table))

    def parameters_at(self, s: Tensor, measure: Measure, time_table: Tensor | None = None):
        k = s[:, self.dim].detach()  # the step counter carries no gradient
        x, t = s[:, : self.dim], k / self.n_steps
        out = self.net(x, t, None if time_table is None else time_table.index_select(0, k.long()))
        drift = out[:, : self.dim]
        if self.langevin is not None:
            drift = drift + self.langevin(t) * self._grad_log_reward(x)
        dt = 1.0 / self.n_steps
        loc = drift * (math.sqrt(dt) / self.sigma)
        scale = torch.exp(2 * torch.tanh(out[:, self.dim :])) if self.learned_variance else torch.ones_like(loc)
        logits = torch.zeros(len(s), 2, dtype=s.dtype, device=s.device)
        return logits, [functools.partial(_normal_rows, loc, scale)]


class BrownianBridge(Policy):
    """:math:`P_B((x, k), \\cdot) = \\mathcal N(x(1 - a/k), \\sigma^2\\Delta t\\,\\tfrac{k-1}{k}\\, b\\, I)`, and :math:`s_0` with probability one from ``k = 1``.

    With :math:`a = b = 1` (the default, no parameters) the exact backward law of :math:`X_{t_k} = \\sigma W_{t_k}` given
    :math:`X_0 = 0`. ``learned``: per-coordinate corrections :math:`a = 1 + r\\tanh(g_1)`, :math:`b = 1 + r\\tanh(g_2)` from a
    PIS network :math:`g(x, t_k)` whose last layer starts at zero, so training starts from the bridge (the learned P_B of
    Sendera et al. 2024's public code, gfn-diffusion's ``learn_pb`` with ``pb_scale_range`` = r; Gritsaev et al. 2025
    study learning the destruction process). Any P_B keeps :math:`e^w` an unbiased estimate of Z.
    In chart coordinates: :math:`u \\sim \\mathcal N(-a x/(k\\sigma\\sqrt{\\Delta t}), \\tfrac{k-1}{k} b I)`.
    """

    def __init__(self, kernel: SDEKernel, sigma: float, learned: bool = False, hidden: int = 64, scale_range: float = 0.1):
        super().__init__(kernel)
        self.dim, self.n_steps, self.sigma, self.scale_range = kernel.dim, kernel.n_steps, sigma, scale_range
        self.net = PISNetwork(kernel.dim, 2 * kernel.dim, hidden) if learned else None

    def parameters_at(self, s: Tensor, measure: Measure):
        x, k = s[:, : self.dim], s[:, self.dim : self.dim + 1].detach().clamp(min=1)
        c = self.sigma / math.sqrt(self.n_steps)
        loc, var = -x / (k * c), ((k - 1) / k).expand_as(x)
        if self.net is not None:
            a, b = (1 + self.scale_range * torch.tanh(self.net(x, k[:, 0] / self.n_steps))).chunk(2, dim=1)
            loc, var = loc * a, var * b
        scale = var.clamp(min=1e-12).sqrt()
        logits = torch.zeros(len(s), 2, dtype=s.dtype, device=s.device)
        return logits, [functools.partial(_normal_rows, loc, scale)]


def level_graph(name: str, n: int, T: int, scale: float, log_reward) -> PointedGraph:
    """The Euler-Maruyama pointed graph of the module docstring on :math:`\\mathbb R^n \\times \\{0, \\dots, T\\}`, its
    kernels charted in units ``scale`` (the standard deviation of a typical step), with ``log_reward`` on ``x [B, n]``.

    Shared by the samplers here and by the diffusion models of :mod:`gflownet_measure.environments.diffusion`, which reparametrise the
    same space with a DDPM schedule."""
    # Lebesgue on level k, charted (like the kernels) in units of one step's standard deviation c
    level = [charted(AffineChart(_r(n), range(n), scale=scale, fixed={n: float(k)}), n + 1) for k in range(1, T + 1)]
    source = torch.zeros(n + 1)

    def encode(s: Tensor) -> Tensor:
        """``(x / c, t_k)``: states in units of one step, so the checks' test functions (envelope
        :math:`e^{-\\|e\\|^2/2}`) vary on the scale of the kernels' Monte Carlo nodes."""
        return torch.cat([s[:, :n] / scale, s[:, n:] / T], 1)

    return PointedGraph(
        name=name,
        source=source,
        kappa=SDEKernel(n, T, scale, forward=True),
        kappa_b=SDEKernel(n, T, scale, forward=False),
        nu=sum_measures(dirac(source), *level),
        terminal=level[-1],
        log_reward=lambda s: log_reward(s[:, :n]),
        max_length=T + 1,
        encode=encode,
    )


def level_kernels(graph: PointedGraph) -> tuple[SDEKernel, SDEKernel]:
    """``(kappa, kappa_b)`` of a :func:`level_graph`, typed as the :class:`SDEKernel` s they are (:class:`PointedGraph` types them
    :class:`~gflownet_measure.kernels.Kernel`). A cast, not a test: a :class:`~gflownet_measure.kernels.Materialised` wrapper
    of a kernel, which passes its attributes through, serves as well."""
    return cast(SDEKernel, graph.kappa), cast(SDEKernel, graph.kappa_b)


def make_graph(config: SDEConfig) -> PointedGraph:
    target = TARGETS[config.target]
    n, T, sigma = target.dim, config.n_steps, sigma_of(config)
    return level_graph(f"sde({target.name}, n={n}, T={T}, sigma={sigma:g})", n, T, sigma / math.sqrt(T), target.log_prob)


def make_policies(graph: PointedGraph, config: SDEConfig):
    """``(P_F, P_B)``: the PIS-style Euler-Maruyama policy (optionally with learned variance or PIS-NN's Langevin term) and the Brownian bridge (optionally learned)."""
    sigma = sigma_of(config)
    kappa, kappa_b = level_kernels(graph)
    pf = EulerMaruyamaPolicy(kappa, sigma, config.hidden, config.learned_variance, TARGETS[config.target].log_prob, config.langevin, config.langevin_clip)
    return pf, BrownianBridge(kappa_b, sigma, config.learned_backward, config.hidden, config.backward_range)
