"""Annealed SMC and AIS estimates of :math:`\\log Z = \\log \\int_{\\mathbb{R}^n} e^{\\log \\tilde p(x)} dx`.

The "SMC" and "HMC" baselines of Lahlou et al. 2023, Table 2. Hand-written because no well-kept torch
library gives a batched SMC sampler on a plain log-density without a full probabilistic-programming
dependency.

Path: geometric, from the normalised reference :math:`\\rho = \\mathcal N(0, \\sigma^2 I)` (``ref_std`` =
:math:`\\sigma`, so :math:`Z_0 = 1`) to the target, on the linear schedule :math:`b_k = k/K`:

.. math:: \\gamma_b(x) = \\rho(x)^{1-b} e^{b \\log \\tilde p(x)},\\quad \\pi_b = \\gamma_b / Z_b,\\quad 0 = b_0 < b_1 < \\dots < b_K = 1

Step ``k = 1..K`` on particles :math:`x^i` that target :math:`\\pi_{b_{k-1}}` with normalised weights
:math:`W^i` (:math:`1/N` at the start and after resampling): reweight by the incremental weight

.. math:: \\log w_k(x) = \\log \\gamma_{b_k}(x) - \\log \\gamma_{b_{k-1}}(x) = (b_k - b_{k-1}) \\big(\\log \\tilde p(x) - \\log \\rho(x)\\big),

resample (systematic) when :math:`\\mathrm{ESS} = 1 / \\sum_i (W^i)^2 < ` ``ess_threshold`` :math:`\\cdot N`, then
make ``n_moves`` Metropolis-Hastings moves that leave :math:`\\pi_{b_k}` invariant. The estimate is

.. math:: \\log \\hat Z = \\sum_{k=1}^K \\log \\sum_i W^i_{k-1} w_k(x^i_{k-1}),

the standard SMC estimator (between two resamplings the per-step terms telescope to the log-mean-exp of
the accumulated weights); :math:`\\hat Z` is unbiased for fixed kernels. ``ess_threshold = 0`` never
resamples: that is AIS (Neal 2001), :math:`\\hat Z = \\frac1N \\sum_i \\prod_k w_k(x^i_{k-1})`.

Moves, with :math:`\\varepsilon` = ``step_size`` (a length) and :math:`\\xi, p \\sim \\mathcal N(0, I)`:

- MALA: :math:`y = x + \\tfrac{\\varepsilon^2}{2} \\nabla \\log \\pi_b(x) + \\varepsilon \\xi`,
  :math:`\\log \\alpha = \\log \\pi_b(y) - \\log \\pi_b(x) + \\log q(x | y) - \\log q(y | x)`,
  :math:`\\log q(y | x) = -\\|y - x - \\tfrac{\\varepsilon^2}{2} \\nabla \\log \\pi_b(x)\\|^2 / (2\\varepsilon^2)`.
- HMC: ``leapfrog`` steps of size :math:`\\varepsilon` from :math:`(x, p)` to :math:`(y, p')`,
  :math:`\\log \\alpha = H(x, p) - H(y, p')`, :math:`H(x, p) = -\\log \\pi_b(x) + \\|p\\|^2 / 2`.

A proposal whose log-target is -inf or NaN (or whose ratio is NaN) is rejected. Gradients come from
autograd on ``log_target`` (rows must be independent: ``[N, n] -> [N]``).

Adaptation (``adapt=True``): after the moves at :math:`b_k`,
:math:`\\varepsilon \\leftarrow \\varepsilon \\exp(\\bar a - a^*)` with :math:`\\bar a` their mean acceptance
probability and :math:`a^* = 0.574` (MALA, Roberts & Rosenthal 1998) or :math:`0.65` (HMC, Beskos et al.
2013). :math:`\\varepsilon` is fixed within a temperature, so every move is :math:`\\pi_{b_k}`-invariant
given the past and the estimator stays consistent (Beskos, Jasra, Kantas & Thiery 2016); since
:math:`\\varepsilon` depends on the population, exact unbiasedness of :math:`\\hat Z` needs ``adapt=False``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["MOVES", "TARGET_ACCEPTANCE", "SMCResult", "annealed_smc", "MALAResult", "mala_chain"]

MOVES = ("mala", "hmc")
TARGET_ACCEPTANCE = {"mala": 0.574, "hmc": 0.65}


@dataclass(frozen=True)
class SMCResult:
    """Output of :func:`annealed_smc`.

    ``particles [N, dim]`` with normalised ``log_weights [N]`` (:math:`\\mathrm{logsumexp} = 0`) target
    :math:`\\pi_1`; the weights are uniform when the last temperature resampled, and uneven in AIS.
    ``acceptance`` is the mean MH acceptance probability over all moves (particles of zero weight excluded).
    """

    log_Z: float
    particles: Tensor
    log_weights: Tensor
    n_resamples: int
    acceptance: float


def _eval(log_target: Callable[[Tensor], Tensor], x: Tensor) -> tuple[Tensor, Tensor]:
    """``(log p~(x) [N], grad log p~(x) [N, dim])``, detached; NaN log-targets become -inf."""
    with torch.enable_grad():
        xg = x.detach().requires_grad_(True)
        lt = log_target(xg)
        if lt.shape != (x.shape[0],):
            raise ValueError(f"annealed_smc: log_target must map [N, dim] to [N]; got {tuple(lt.shape)} for input {tuple(x.shape)}")
        g = torch.autograd.grad(lt.sum(), xg, allow_unused=True)[0] if lt.requires_grad else None
    lt = lt.detach().to(x.dtype)
    g = torch.zeros_like(x) if g is None else g.detach()
    return torch.where(torch.isnan(lt), -math.inf, lt), g


def _log_ref(x: Tensor, s: float) -> Tensor:
    """:math:`\\log \\mathcal N(x; 0, s^2 I)`, ``[N]``."""
    return -0.5 * x.square().sum(-1) / s**2 - 0.5 * x.shape[-1] * math.log(2 * math.pi * s**2)


def _log_pi(b: float, x: Tensor, lt: Tensor, g: Tensor, s: float) -> tuple[Tensor, Tensor]:
    """:math:`\\log \\gamma_b(x)` and its gradient from the cached ``log p~`` and its gradient (``b > 0``)."""
    return (1 - b) * _log_ref(x, s) + b * lt, -(1 - b) * x / s**2 + b * g


def _accept(log_alpha: Tensor, lt_y: Tensor, generator) -> Tensor:
    """MH decisions ``[N]``: reject non-finite targets and NaN ratios (NaN comparisons are False)."""
    u = torch.rand(log_alpha.shape, dtype=log_alpha.dtype, device=log_alpha.device, generator=generator)
    return (u.log() < log_alpha) & torch.isfinite(lt_y)


def _mala(log_target, b, x, lt, g, eps, s, generator):
    lp_x, gp_x = _log_pi(b, x, lt, g, s)
    mean_x = x + 0.5 * eps**2 * gp_x
    y = mean_x + eps * torch.randn(x.shape, dtype=x.dtype, device=x.device, generator=generator)
    lt_y, g_y = _eval(log_target, y)
    lp_y, gp_y = _log_pi(b, y, lt_y, g_y, s)
    log_q_fwd = -(y - mean_x).square().sum(-1) / (2 * eps**2)
    log_q_bwd = -(x - y - 0.5 * eps**2 * gp_y).square().sum(-1) / (2 * eps**2)
    return y, lt_y, g_y, lp_y - lp_x + log_q_bwd - log_q_fwd


def _hmc(log_target, b, x, lt, g, eps, s, generator, leapfrog):
    lp_x, gp = _log_pi(b, x, lt, g, s)
    p0 = torch.randn(x.shape, dtype=x.dtype, device=x.device, generator=generator)
    y, p = x, p0 + 0.5 * eps * gp
    for step in range(leapfrog):
        y = y + eps * p
        lt_y, g_y = _eval(log_target, y)
        lp_y, gp = _log_pi(b, y, lt_y, g_y, s)
        p = p + (eps if step < leapfrog - 1 else 0.5 * eps) * gp
    return y, lt_y, g_y, (lp_y - 0.5 * p.square().sum(-1)) - (lp_x - 0.5 * p0.square().sum(-1))


def _systematic(log_W: Tensor, generator) -> Tensor:
    """Systematic resampling indices ``[N]``; particles of zero weight are never drawn."""
    n = len(log_W)
    cdf = torch.cumsum(torch.exp(log_W - log_W.max()), 0)
    cdf = cdf / cdf[-1]
    u = (torch.rand((), dtype=log_W.dtype, device=log_W.device, generator=generator) + torch.arange(n, dtype=log_W.dtype, device=log_W.device)) / n
    return torch.searchsorted(cdf, u, right=True).clamp(max=n - 1)


def annealed_smc(
    log_target: Callable[[Tensor], Tensor],
    dim: int,
    n_particles: int = 2000,
    n_temps: int = 100,
    *,
    ref_std: float = 1.0,
    move: str = "mala",
    n_moves: int = 1,
    step_size: float = 0.1,
    leapfrog: int = 5,
    ess_threshold: float = 0.5,
    adapt: bool = True,
    generator: torch.Generator | None = None,
    dtype=torch.float64,
) -> SMCResult:
    """Annealed SMC (or AIS with ``ess_threshold=0``) estimate of :math:`\\log \\int e^{\\log \\tilde p}` on ``R^dim``.

    ``log_target`` maps ``[N, dim]`` to ``[N]`` (differentiable where finite; -inf outside the support).
    ``n_temps`` = K linear steps :math:`b_k = k/K` from :math:`\\mathcal N(0, \\)` ``ref_std`` :math:`^2 I)`;
    ``n_moves`` MALA or HMC (``leapfrog`` steps) moves per temperature at ``step_size``, adapted toward
    :data:`TARGET_ACCEPTANCE` between temperatures if ``adapt``; systematic resampling when
    ESS/N < ``ess_threshold``. The "HMC" baseline of Table 2 is ``move="hmc", ess_threshold=0.0``.
    Raises ``RuntimeError`` if every weight vanishes (no particle reached the support of the target).
    """
    if move not in MOVES:
        raise ValueError(f"annealed_smc: move must be one of {MOVES}, got {move!r}")
    for name, value, low in (("dim", dim, 1), ("n_particles", n_particles, 1), ("n_temps", n_temps, 1), ("leapfrog", leapfrog, 1), ("n_moves", n_moves, 0)):
        if int(value) != value or value < low:
            raise ValueError(f"annealed_smc: {name} must be an integer >= {low}, got {value!r}")
    if not 0.0 <= ess_threshold <= 1.0:
        raise ValueError(f"annealed_smc: ess_threshold must be in [0, 1] (0: never resample, i.e. AIS), got {ess_threshold!r}")
    if not (ref_std > 0 and step_size > 0 and math.isfinite(ref_std) and math.isfinite(step_size)):
        raise ValueError(f"annealed_smc: ref_std and step_size must be finite and > 0, got {ref_std!r}, {step_size!r}")

    device = generator.device if generator is not None else torch.device("cpu")
    s, eps, n = float(ref_std), float(step_size), int(n_particles)
    x = s * torch.randn(n, dim, dtype=dtype, device=device, generator=generator)
    lt, g = _eval(log_target, x)
    log_W = torch.full((n,), -math.log(n), dtype=dtype, device=device)
    log_Z, n_resamples, acc_sum, acc_n = 0.0, 0, 0.0, 0
    for k in range(1, n_temps + 1):
        b_prev, b = (k - 1) / n_temps, k / n_temps
        log_W = log_W + (b - b_prev) * (lt - _log_ref(x, s))
        inc = float(torch.logsumexp(log_W, 0))
        if not math.isfinite(inc):
            raise RuntimeError(
                f"annealed_smc: total weight is {inc} at b = {b:.4g} (no particle in the target's support, or log_target = +inf); raise n_particles or ref_std"
            )
        log_Z += inc
        log_W = log_W - inc
        if ess_threshold > 0 and math.exp(-float(torch.logsumexp(2 * log_W, 0))) < ess_threshold * n:  # ESS = 1 / sum W^2
            idx = _systematic(log_W, generator)
            x, lt, g = x[idx], lt[idx], g[idx]
            log_W = torch.full_like(log_W, -math.log(n))
            n_resamples += 1
        live = log_W > -math.inf
        acc_k = 0.0
        for _ in range(n_moves):
            if move == "mala":
                y, lt_y, g_y, log_alpha = _mala(log_target, b, x, lt, g, eps, s, generator)
            else:
                y, lt_y, g_y, log_alpha = _hmc(log_target, b, x, lt, g, eps, s, generator, leapfrog)
            ok = _accept(log_alpha, lt_y, generator)
            x, lt, g = torch.where(ok[:, None], y, x), torch.where(ok, lt_y, lt), torch.where(ok[:, None], g_y, g)
            alpha = torch.where(torch.isfinite(lt_y), log_alpha.clamp(max=0.0).exp(), torch.zeros_like(log_alpha)).nan_to_num(0.0)
            acc_k += float(alpha[live].mean())
        if n_moves:
            acc_sum, acc_n = acc_sum + acc_k, acc_n + n_moves
            if adapt:
                eps *= math.exp(acc_k / n_moves - TARGET_ACCEPTANCE[move])
    return SMCResult(log_Z=log_Z, particles=x, log_weights=log_W, n_resamples=n_resamples, acceptance=acc_sum / max(acc_n, 1))


@dataclass(frozen=True)
class MALAResult:
    """Output of :func:`mala_chain`: the states ``x [N, dim]``, their ``log_target [N]``, the step size after adaptation and
    the mean acceptance probability of the moves."""

    x: Tensor
    log_target: Tensor
    step_size: float
    acceptance: float


def mala_chain(
    log_target: Callable[[Tensor], Tensor], x: Tensor, n_moves: int, step_size: float, adapt: bool = True, generator: torch.Generator | None = None
) -> MALAResult:
    """``n_moves`` MALA moves (the module docstring's, at :math:`b = 1`) from the states ``x [N, dim]``, each leaving
    :math:`e^{\\log \\tilde p} / Z` invariant: the local search of Sendera et al. 2024 (gfn-diffusion's ``langevin.py``,
    whose ``ld_step`` is :math:`\\varepsilon^2 / 2`). With ``adapt``, :math:`\\varepsilon \\leftarrow \\varepsilon
    \\exp(\\bar a - 0.574)` after each move (:math:`\\bar a` its mean acceptance probability over the ``N`` chains): the
    step of a move depends only on the past, so each move is still invariant given it."""
    if int(n_moves) != n_moves or n_moves < 0 or not (step_size > 0 and math.isfinite(step_size)):
        raise ValueError(f"mala_chain: n_moves must be an integer >= 0 and step_size finite and > 0, got {n_moves!r}, {step_size!r}")
    x = x.detach()
    lt, g = _eval(log_target, x)
    eps, acc = float(step_size), []
    for _ in range(int(n_moves)):
        y, lt_y, g_y, log_alpha = _mala(log_target, 1.0, x, lt, g, eps, 1.0, generator)
        ok = _accept(log_alpha, lt_y, generator)
        x, lt, g = torch.where(ok[:, None], y, x), torch.where(ok, lt_y, lt), torch.where(ok[:, None], g_y, g)
        a = float(torch.where(torch.isfinite(lt_y), log_alpha.clamp(max=0.0).exp(), torch.zeros_like(log_alpha)).nan_to_num(0.0).mean())
        acc.append(a)
        if adapt:
            eps *= math.exp(a - TARGET_ACCEPTANCE["mala"])
    return MALAResult(x, lt, eps, sum(acc) / len(acc) if acc else float("nan"))
