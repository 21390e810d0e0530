"""Diffusion models as GFlowNets trained from data (Zhang et al. 2023a; Lahlou et al. 2023, section 4.5 and C.6).

The state space is the Euler-Maruyama graph of :mod:`gflownet_measure.environments.sde` with ``T + 1`` levels
(:func:`~gflownet_measure.environments.sde.level_graph`): level :math:`k \\ge 1` holds the diffusion variable
:math:`x_{t}`, :math:`t = T + 1 - k`, so the first step draws the noise :math:`x_T` from :math:`s_0` and the last
level holds the data :math:`x_0`, which then steps into the sink. Densities are w.r.t. Lebesgue measure in ``x``
(the kernels' chart supplies the Jacobian of its coordinates); the terminal states are data, so there is no reward
(:math:`\\log R = 0` is a placeholder the maximum-likelihood objective never reads).

With the DDPM schedule :math:`\\bar\\beta_t` (Ho et al. 2020), written as the variance-preserving SDE of Song et al.
2021 with :math:`\\beta(s) = \\beta_{\\min} + s(\\beta_{\\max} - \\beta_{\\min})` on :math:`s \\in [0, 1]`:

.. math:: \\bar\\beta_t = 1 - \\exp\\Big(-\\int_{(t-1)/T}^{t/T} \\beta(s)\\, ds\\Big), \\qquad
   \\bar\\alpha_t = \\prod_{i \\le t} (1 - \\bar\\beta_i) = \\exp\\Big(-\\int_0^{t/T} \\beta(s)\\, ds\\Big),

the same noising for any ``T`` (:math:`\\bar\\alpha_T = e^{-10.05}` at the defaults 0.1 and 20), the policies are

- :math:`P_F` (:class:`Denoiser`): :math:`x_T \\sim \\mathcal N(0, I)` from :math:`s_0`, then
  :math:`P_F(x_{t-1} | x_t) = \\mathcal N\\big(\\tfrac{1}{\\sqrt{1 - \\bar\\beta_t}}(x_t - \\tfrac{\\bar\\beta_t}{\\sqrt{1 - \\bar\\alpha_t}}
  \\epsilon_\\theta(x_t, t)),\\ \\bar\\beta_t e^{4 \\tanh v_\\theta(x_t, t)} I\\big)`: the noise-prediction mean of Ho et al.
  2020 (eq. 11) and a per-coordinate variance factor in :math:`(e^{-4}, e^4)` around :math:`\\bar\\beta_t` (learned variances as
  Nichol & Dhariwal 2021, which the likelihood needs); :math:`(\\epsilon_\\theta, v_\\theta)` is one MLP with a Fourier time
  embedding (:class:`~gflownet_measure.environments.sde.PISNetwork`), zero-initialised at its output;
- :math:`P_B` (:class:`Noiser`): :math:`P_B(x_t | x_{t-1}) = \\mathcal N(\\sqrt{1 - \\bar\\beta_t}\\, x_{t-1},\\ \\beta_t I)`,
  :math:`\\beta_t = \\bar\\beta_t e^{\\phi_t}`, and :math:`s_0` with probability one from :math:`x_T`. The DDPM noising process is
  :math:`\\phi = 0` frozen; the learned one (section C.6 of Lahlou et al. 2023) moves each step's variance around the
  schedule, with its mean kept at the schedule's :math:`\\sqrt{1 - \\bar\\beta_t}` (so any :math:`\\phi` is a valid Markov
  kernel, no constraint :math:`\\beta_t < 1` needed).

The denoiser's mean and variance are written on the fixed schedule :math:`\\bar\\beta`, not on the learned :math:`\\beta`,
so the two policies have disjoint parameters and the DDPM baseline and the learned-:math:`P_B` model share the same
:math:`P_F` family.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from gflownet_measure.densities import Policy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.measures import Measure
from gflownet_measure.options import check_options, option, settings_of

from .sde import PISNetwork, SDEKernel, _normal_rows, level_graph, level_kernels

__all__ = ["DiffusionConfig", "SETTINGS", "ddpm_schedule", "Denoiser", "Noiser", "make_graph", "make_policies"]


@dataclass(frozen=True)
class DiffusionConfig:
    """The data dimension, the number of diffusion steps, the DDPM schedule, the denoiser's width and whether P_B is learned."""

    dim: int = option(2, "dimension n of the data (and of every level)", low=1)
    n_steps: int = option(50, "diffusion steps T (the GFlowNet's trajectories have T + 2 transitions: noise, T denoising steps, stop)", low=1, high=10000)
    beta_min: float = option(0.1, "beta(s) of the variance-preserving schedule at s = 0 (Song et al. 2021; DDPM's 1e-4 x 1000 steps)", low=0.0)
    beta_max: float = option(20.0, "beta(s) at s = 1 (DDPM's 0.02 x 1000 steps)", low=0.0)
    hidden: int = option(128, "width of the denoiser MLP", low=1)
    learn_backward: bool = option(
        True, "learn the noising variances beta_t = beta_bar_t exp(phi_t) (false: the DDPM baseline, phi = 0 frozen)", choices=(True, False)
    )

    def __post_init__(self):
        check_options(self)
        if self.beta_max + self.beta_min <= 0:
            raise ValueError(f"beta_min={self.beta_min} and beta_max={self.beta_max}: the schedule must add some noise (valid: beta_min + beta_max > 0)")


SETTINGS = settings_of(DiffusionConfig)


def ddpm_schedule(T: int, beta_min: float, beta_max: float) -> tuple[Tensor, Tensor]:
    """``(beta_bar [T], log_alpha_bar [T])`` in float64: :math:`\\bar\\beta_t` and :math:`\\log \\bar\\alpha_t` for ``t = 1..T`` (module docstring)."""
    s = torch.arange(T + 1, dtype=torch.float64) / T
    integral = beta_min * s + 0.5 * (beta_max - beta_min) * s.square()  # int_0^s beta(r) dr
    step = integral[1:] - integral[:-1]
    return -torch.expm1(-step), -integral[1:]


class _Schedule(nn.Module):
    """The schedule as float32 buffers indexed by ``t - 1``, and the diffusion index of a state's level."""

    log_beta_bar: Tensor
    sqrt_keep: Tensor
    eps_coef: Tensor

    def __init__(self, T: int, beta_min: float, beta_max: float):
        super().__init__()
        beta_bar, log_alpha_bar = ddpm_schedule(T, beta_min, beta_max)
        self.T = T
        self.register_buffer("log_beta_bar", beta_bar.log().float())
        self.register_buffer("sqrt_keep", (1 - beta_bar).sqrt().float())  # sqrt(1 - beta_bar_t)
        self.register_buffer("eps_coef", (beta_bar / (-torch.expm1(log_alpha_bar)).sqrt()).float())  # beta_bar_t / sqrt(1 - alpha_bar_t)

    def index(self, k: Tensor) -> Tensor:
        """``t - 1`` (long, clamped into ``0..T-1``) for the level ``k`` of a state: :math:`t = T + 1 - k`."""
        return (self.T + 1 - k).clamp(1, self.T).long() - 1  # k = 0 (s0) and the data level have no denoising step of their own


class Denoiser(Policy):
    """:math:`P_F` of the module docstring, w.r.t. the forward kernel of :func:`~gflownet_measure.environments.sde.level_graph` (Lebesgue in ``x``).

    In the kernel's chart coordinates :math:`u = (x' - x)/c` a step :math:`\\mathcal N(m, s^2 I)` in ``x`` is
    :math:`\\mathcal N((m - x)/c, (s/c)^2 I)`; the chart supplies :math:`\\log|J| = n \\log c`.
    """

    def __init__(self, kernel: SDEKernel, schedule: _Schedule, hidden: int):
        super().__init__(kernel)
        self.dim, self.schedule, self.c = kernel.dim, schedule, kernel.chart.scale[0]
        self.net = PISNetwork(kernel.dim, 2 * kernel.dim, hidden)

    def parameters_at(self, s: Tensor, measure: Measure):
        n, sch = self.dim, self.schedule
        x, k = s[:, :n], s[:, n].detach()
        i = sch.index(k)
        out = self.net(x, (i + 1).to(x.dtype) / sch.T)
        eps, v = out[:, :n], out[:, n:]
        mean = (x - sch.eps_coef[i, None] * eps) / sch.sqrt_keep[i, None]
        std = torch.exp(0.5 * sch.log_beta_bar[i, None] + 2 * torch.tanh(v))
        prior = (k == 0)[:, None]  # x_T ~ N(0, I) from s0
        loc = torch.where(prior, torch.zeros_like(mean), (mean - x) / self.c)
        scale = torch.where(prior, torch.full_like(std, 1.0 / self.c), std / self.c)
        logits = torch.zeros(len(s), 2, dtype=s.dtype, device=s.device)
        return logits, [functools.partial(_normal_rows, loc, scale)]


class Noiser(Policy):
    """:math:`P_B(x_t | x_{t-1}) = \\mathcal N(\\sqrt{1 - \\bar\\beta_t}\\, x_{t-1}, \\bar\\beta_t e^{\\phi_t} I)` w.r.t. Lebesgue, and :math:`s_0` with probability one from :math:`x_T`.

    ``learned``: :math:`\\phi` is a parameter (initialised at 0, the DDPM schedule); else a zero buffer (DDPM).
    """

    phi: Tensor

    def __init__(self, kernel: SDEKernel, schedule: _Schedule, learned: bool):
        super().__init__(kernel)
        self.dim, self.schedule, self.c = kernel.dim, schedule, kernel.chart.scale[0]
        phi = torch.zeros(schedule.T)
        if learned:
            self.phi = nn.Parameter(phi)
        else:
            self.register_buffer("phi", phi)

    def log_variances(self) -> Tensor:
        """:math:`\\log \\beta_t = \\log \\bar\\beta_t + \\phi_t`, ``t = 1..T`` ``[T]``."""
        return self.schedule.log_beta_bar + self.phi

    def parameters_at(self, s: Tensor, measure: Measure):
        n, sch = self.dim, self.schedule
        x, k = s[:, :n], s[:, n].detach()
        j = sch.index(k - 1)  # the parent at level k - 1 holds x_{t+1}: the noising step t -> t + 1
        loc = (sch.sqrt_keep[j, None] * x - x) / self.c
        scale = torch.exp(0.5 * self.log_variances()[j, None]).expand_as(x) / self.c
        logits = torch.zeros(len(s), 2, dtype=s.dtype, device=s.device)
        return logits, [functools.partial(_normal_rows, loc, scale)]


def make_graph(config: DiffusionConfig) -> PointedGraph:
    """:func:`~gflownet_measure.environments.sde.level_graph` with ``T + 1`` levels, charted in units of 1 (the data are scaled to about unit variance), no reward."""
    n, T = config.dim, config.n_steps

    def no_reward(x: Tensor) -> Tensor:
        return torch.zeros(len(x), dtype=x.dtype, device=x.device)

    return level_graph(f"diffusion(n={n}, T={T})", n, T + 1, 1.0, no_reward)


def make_policies(graph: PointedGraph, config: DiffusionConfig) -> tuple[Denoiser, Noiser]:
    """``(P_F, P_B)`` sharing one schedule: the denoiser and the noising process (learned or the DDPM one)."""
    schedule = _Schedule(config.n_steps, config.beta_min, config.beta_max)
    kappa, kappa_b = level_kernels(graph)
    return Denoiser(kappa, schedule, config.hidden), Noiser(kappa_b, schedule, config.learn_backward)
