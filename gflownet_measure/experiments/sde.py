"""`gflownet-measure run sde`: SDE samplers on R^n (Lahlou et al. 2023, section 4.2, Table 2 / C.1).

One run trains the Euler-Maruyama policy of :mod:`gflownet_measure.environments.sde` towards a target with one objective
and regime (docs/references.md, 'SDE targets and Table 2'):

- ``objective=tb``: trajectory balance with a learned log Z;
- ``objective=reverse_kl``: KL(P_F || P*), path-wise (reparametrised) on-policy, importance-weighted
  score function off-policy;
- ``objective=forward_kl``: KL(P* || P_F) by self-normalised importance weights of on- or off-policy
  trajectories, or ``regime=target``: exact target samples walked back with P_B (maximum likelihood);
- ``regime=off``: trajectories from the policy with extra variance :math:`\\epsilon^2` per step in x
  (:math:`\\epsilon` = ``exploration``, annealed linearly to 0 over training; the ``exploration_factor`` of github.com/GFNOrg/gfn-diffusion);
  log P_F is still scored under the policy itself.

Metrics: ``log_Z_lower_bound`` (B: mean of w) and ``log_Z_importance_weighted`` (B_RW: log-mean-exp of w)
over ``eval_samples`` on-policy trajectories, w = log R + sum log P_B - sum log P_F; the bias is the
estimate minus the exact log Z (Lahlou et al. 2023's B and B_RW), and ``delta_log_Z`` / ``delta_log_Z_RW`` the exact
log Z minus the estimate (Sendera et al. 2024's Δlog Z and Δlog Z^RW); ``eubo`` the upper bound from K exact samples
walked back with P_B (:func:`evaluate_eubo`; torchgfn's ELBO, IW-ELBO and EUBO are our lower bound, importance-weighted
estimate and ``eubo``), ``delta_log_Z_EUBO`` = EUBO - log Z; for a target whose log Z is unknown (``lgcp``)
the estimates alone, Sendera et al.'s log Ẑ and log Ẑ^RW. Of the samples (:func:`sample_metrics`): the KS distance of
the first coordinate to its exact marginal, the samples per mode against the exact share (mixtures), the mass per well (many-well); for
``lgcp`` the posterior mean of the intensity per cell, drawn beside the trees' counts. ``start_*``: the same of the
untrained sampler (steps = 0, the reference process: the network's last layer starts at zero), measured before
training on a forked random stream (``start.json``), so that training's share of each figure shows.

``samples.npz``: ``x [K, n]`` float, the terminal points in :math:`\\mathbb{R}^n` of the final evaluation's trajectories of the trained
sampler (``eval_samples`` of them; 0: the paper's K of the target), from which the bounds and sample metrics are computed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

import numpy as np
import torch

from gflownet_measure.environments import sde as env
from gflownet_measure.environments.sde_targets import TARGETS, CoxProcess, GridMixture, ManyWell, SDETarget
from gflownet_measure.graph import PointedGraph
from gflownet_measure.metrics import ks_distance, log_weights, log_z_bounds
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet, get_objective, objective_names
from gflownet_measure.options import check_options, option, settings_of
from gflownet_measure.rollout import log_densities, sample_forward
from gflownet_measure.run_files import write_file
from gflownet_measure.training import seeded_generator

from .common import configure, learned_log_Z, start_metrics, train_gflownet
from .environment import make_environment
from .local_search import LOCAL_SEARCH_SETTINGS, LocalSearchBatches, LocalSearchConfig, backward_batch
from .memory import PARAMETER_BYTES, require_phases
from .plots import optional_figure, plot_density_panels, plot_history, plot_sample_panels
from .registry import Experiment, RunContext, register
from .settings import ConfigError
from .training_config import TrainingConfig, training_settings


@dataclass(frozen=True)
class SDERun:
    """The settings of ``run sde``: the target, time grid and policy network (:class:`~gflownet_measure.environments.sde.SDEConfig`),
    the training (:class:`~gflownet_measure.experiments.training_config.TrainingConfig`; its ``lr_flow`` and ``epsilon``
    not declared: no state flow, batches of its own), the replay-buffer local search
    (:class:`~gflownet_measure.experiments.local_search.LocalSearchConfig`), and the experiment's own: the objective, the
    regime of its training trajectories and the evaluation's K."""

    space: env.SDEConfig
    training: TrainingConfig
    search: LocalSearchConfig
    objective: str = option(
        "tb",
        "training objective (gflownet_measure.objectives; those without a state flow)",
        choices=tuple(n for n in objective_names(continuous=True) if not OBJECTIVES[n].needs_flow),
    )
    regime: str = option(
        "off",
        "on: the policy's own trajectories; off: with exploration noise; target: exact samples walked back with P_B (forward_kl, tb)",
        choices=("on", "off", "target"),
    )
    exploration: float = option(0.1, "off-policy: extra variance exploration^2 per step in x, annealed linearly to 0 over training", low=0.0)
    eval_samples: int = option(0, "trajectories for the log Z estimates (0 = the paper's K: 2000 for gmm9, 6000 for funnel, 2000 for the others)", low=0)
    log_Z_init: str = option(
        "zero",
        "where a learned log Z (tb) starts: zero, or start (the untrained sampler's importance-weighted estimate from its K trajectories, start.json)",
        choices=("zero", "start"),
    )

    def __post_init__(self):
        check_options(self)


SETTINGS = {
    **env.SETTINGS,
    **training_settings(without=("lr_flow", "epsilon")),  # no state flow; batches of its own (exploration)
    **settings_of(SDERun),
    **LOCAL_SEARCH_SETTINGS,
}

_PAPER = {"steps": 1500, "batch_size": 300, "lr": 1e-2, "lr_logZ": 1e-1, "eval_every": 100}
# the paper's T = 100 for 800 batches, K = 1,000: the quick preset until 2026-12-06, and the budget of sde-table's Sendera et al. rows
SHORT = _PAPER | {"steps": 800, "eval_every": 200, "eval_samples": 1000}
PRESETS: dict[str, dict] = {
    # the paper's 1,500 batches with the Langevin term (gfn-diffusion's score clip 100) and the paper's K: the funnel's x_0
    # within KS 0.05 of its marginal and the 9 modes covered (docs/results.md, section 3: 'Quick preset: the Langevin term')
    "quick": _PAPER | {"eval_every": 500, "eval_samples": 0, "langevin": True, "langevin_clip": 100.0},
    "paper": _PAPER,  # Lahlou et al. 2023, Table 2: 1,500 batches of 300, lr 1e-2 (policy) and 1e-1 (log Z), T = 100
    # the 25-Gaussian grid at the quick preset's wall clock: wider exploration and no Langevin term (half the cost of a
    # batch), so twice the batches (docs/results/sde-sendera2024.md: chosen on seed 100, measured on seeds 0-2)
    "gmm25": _PAPER | {"target": "gmm25", "steps": 3000, "eval_every": 500, "eval_samples": 0, "exploration": 0.5},
}


class _ExactTarget(SDETarget, Protocol):
    """What the targets with an exact sampler add (every one but ``lgcp``): the box of their figures, the exact density of
    their first two coordinates, and exact samples."""

    limits: tuple[float, float]

    def log_marginal01(self, x: torch.Tensor) -> torch.Tensor: ...

    def sample(self, n: int, generator: torch.Generator | None = None) -> torch.Tensor: ...


PAPER_K = {"gmm9": 2000, "funnel": 6000, "gmm25": 2000, "hard_funnel": 2000, "many_well": 2000, "lgcp": 2000}  # Sendera et al. 2024: K = 2,000


SAMPLE_BYTES = (230.0, 100.0)
"""Bytes per trajectory of the final evaluation, fixed and per coordinate of the target: its log-weight and terminal
state kept, the figure's exact samples and scatter, the sample metrics (measured with ``steps=1`` of the quick preset,
T = 100: 0.43 KB per sample on gmm9, d = 2, from 20,000 to 200,000 samples; 3.46 KB on many_well, d = 32, from 20,000
to 100,000). The trajectories are drawn and scored 2,000 at a time (:func:`evaluate_bounds`), whatever their number."""


def network_parameters(space: env.SDEConfig) -> int:
    """About the parameters of P_F's networks (the PIS network, 7 hidden x hidden blocks and its input and output layers;
    the Langevin term's time network, 3 more), and as many again for a learned P_B's."""
    dim, h = TARGETS[space.target].dim, space.hidden
    policy = (7 + 3 * space.langevin) * (h + 1) * h + 4 * dim * (h + 1)
    return policy * (2 if space.learned_backward else 1)


def validate(settings: SDERun) -> None:
    """Settings that do not go together, and the memory of each phase (:func:`~gflownet_measure.experiments.memory.require_phases`):
    one update per trajectory and time step, about 3.6 KB at width 64 (measured at T = 50, d = 2: 182 KB per
    trajectory), taken as proportional to the width, twice that with a learned P_B, plus 112 bytes per coordinate of
    the state (the LGCP, d = 1,600, batch 300, T = 100: 5.4 GB peak); the model (:func:`network_parameters`,
    :data:`~gflownet_measure.experiments.memory.PARAMETER_BYTES`); the final evaluation's ``eval_samples`` trajectories
    (:data:`SAMPLE_BYTES`)."""
    space, objective, regime = settings.space, settings.objective, settings.regime
    if regime == "target" and get_objective(objective).pathwise:
        raise ConfigError(
            f"regime=target (exact samples walked back with P_B) does not apply to objective={objective}, whose on-policy gradient flows through the samples; valid: on, off"
        )
    if regime == "target" and not hasattr(TARGETS[space.target], "sample"):
        raise ConfigError(f"regime=target trains on exact samples, and target={space.target} has no exact sampler; valid: on, off")
    if settings.search.local_search and (get_objective(objective).pathwise or regime == "target"):
        raise ConfigError(
            f"local_search=true trains on buffered states walked back with P_B: it needs an objective without path-wise gradients and regime on or off, got objective={objective} regime={regime}; valid objectives: tb, vargrad, forward_kl"
        )
    networks = 2 if space.learned_backward else 1  # a learned P_B is a second network of the same size
    per_step = 3.6e3 * networks * space.hidden / 64 + 112 * TARGETS[space.target].dim
    batch_size, dim = settings.training.batch_size, TARGETS[space.target].dim
    K = settings.eval_samples or PAPER_K[space.target]
    require_phases(
        (per_step * batch_size * space.n_steps, f"batch_size={batch_size}"),
        (PARAMETER_BYTES * network_parameters(space), f"hidden={space.hidden}"),
        (K * (SAMPLE_BYTES[0] + SAMPLE_BYTES[1] * dim), f"eval_samples={K}"),
    )


def make_gflownet(settings: SDERun) -> tuple[PointedGraph, GFlowNet]:
    """The graph and a fresh GFlowNet (P_F, the Brownian-bridge P_B, log Z = 0) for ``settings``."""
    validate(settings)
    _, graph, pf, pb = make_environment("sde", settings.space)
    return graph, GFlowNet(pf, pb)


def _target_batch(graph: PointedGraph, gfn: GFlowNet, target: str, batch_size: int) -> Batch:
    """``batch_size`` exact samples of ``target`` walked back to s0 with P_B (:func:`~gflownet_measure.experiments.local_search.backward_batch`)."""
    return backward_batch(graph, gfn, cast(_ExactTarget, TARGETS[target]).sample(batch_size))  # one with a sampler (validate)


def exploration_noise(settings: SDERun, step: int) -> float:
    """Extra variance of the off-policy steps in chart units: :math:`\\epsilon_k^2 / c^2 = \\epsilon_k^2 T / \\sigma^2`, :math:`\\epsilon_k = \\epsilon \\max(0, 1 - k/K)`.

    In x the step variance becomes :math:`\\sigma^2 \\Delta t + \\epsilon_k^2` (as in gfn-diffusion; docs/references.md,
    'SDE targets and Table 2'). The
    alternative reading :math:`\\sigma^2 \\Delta t + \\epsilon_k^2 / T` adds 0.2% to the variance of a step at the
    paper's settings, and off-policy TB then collapses as on-policy TB does (3 of the mixture's 9 modes).
    """
    if settings.regime != "off":
        return 0.0
    eps = settings.exploration * max(0.0, 1.0 - step / settings.training.steps)
    return eps**2 * settings.space.n_steps / env.sigma_of(settings.space) ** 2


def make_batches(gfn: GFlowNet, graph: PointedGraph, settings: SDERun):
    """``step -> batch`` of one training iteration: ``batch_size`` fresh trajectories, all stepping together, drawn as the
    objective needs them (:meth:`~gflownet_measure.objectives.Objective.sample`: reparametrised on-policy for the
    path-wise reverse KL, else without gradients and scored by one batched call of each policy), with the regime's
    exploration noise; or, ``regime=target``, exact target samples walked back with P_B; or, ``local_search``, those
    batches alternating with refined buffered states (:class:`~gflownet_measure.experiments.local_search.LocalSearchBatches`)."""
    objective = get_objective(settings.objective)
    target, batch_size = settings.space.target, settings.training.batch_size

    def batches(step: int) -> Batch:
        if settings.regime == "target":
            return _target_batch(graph, gfn, target, batch_size)
        return objective.sample(graph, gfn, batch_size, noise=exploration_noise(settings, step))

    if settings.search.local_search:
        return LocalSearchBatches(gfn, graph, batches, batch_size, TARGETS[target].log_prob, settings.search)
    return batches


def evaluate_bounds(gfn: GFlowNet, graph: PointedGraph, K: int, chunk: int = 2000) -> dict:
    """B (mean of w) and B_RW (log-mean-exp of w) from ``K`` on-policy trajectories, and their terminal states ``samples [K, n]``."""
    ws, xs = [], []
    with torch.no_grad():
        for k in range(0, K, chunk):
            traj = sample_forward(graph, gfn.pf, min(chunk, K - k))
            ws.append(log_weights(traj.log_R, *log_densities(traj, gfn.pf, gfn.pb), traj.mask))
            xs.append(traj.terminal[:, :-1])
    w = torch.cat(ws)
    lower, iw = log_z_bounds(w)
    return {"log_Z_lower_bound": lower, "log_Z_importance_weighted": iw, "samples": torch.cat(xs)}


def evaluate_eubo(gfn: GFlowNet, graph: PointedGraph, x: torch.Tensor, chunk: int = 2000) -> float:
    """The evidence upper bound from exact target samples ``x [K, n]``, each walked back to s0 with P_B:

    .. math:: \\mathrm{EUBO} = \\mathbb E_{x \\sim R/Z,\\ \\tau \\sim P_B(\\cdot|x)}[w(\\tau)] = \\log Z + \\mathrm{KL}(P^*_B \\,\\|\\, P_F) \\ge \\log Z,

    :math:`w = \\log R + \\sum \\log P_B - \\sum \\log P_F` as for the lower bound (the walks of
    :func:`~gflownet_measure.experiments.local_search.backward_batch`), :math:`P^*_B` the target's path measure
    (:math:`R/Z` walked back with P_B). With the on-policy mean of ``w`` (the ELBO, ``log_Z_lower_bound``) it brackets
    :math:`\\log Z`; a sampler that misses a mode keeps a low ELBO gap but a large EUBO gap (the mode-covering side).
    torchgfn 2.4.1's ``DiffusionSampling`` reports the same pair."""
    ws = []
    with torch.no_grad():
        for k in range(0, len(x), chunk):
            walked = backward_batch(graph, gfn, x[k : k + chunk])
            assert walked.scores is not None  # backward_batch scores the walks it draws
            ws.append(log_weights(walked.traj.log_R, walked.scores.log_pf, walked.scores.log_pb, walked.traj.mask))
    return float(torch.cat(ws).double().mean())


@optional_figure
def _figure(target_name: str, x: np.ndarray, path: Path, title: str) -> None:
    """Figure C.1: samples of the first two coordinates over the exact density of their marginal (the whole density in
    2-D, the funnel's (x0, x1), many-well's first pair), beside as many exact samples. For ``lgcp``: the trees' counts
    per cell beside the samples' posterior mean of the intensity (trees per unit area)."""
    target = TARGETS[target_name]
    if isinstance(target, CoxProcess):
        extent = (0.0, 1.0, 0.0, 1.0)
        counts = (target.counts / target.area).reshape(target.grid, target.grid).numpy()
        plot_density_panels(
            [
                ("trees per unit area (counts / cell area)", counts, extent),
                ("posterior mean intensity, learned samples", target.field(torch.as_tensor(x)).numpy(), extent),
            ],
            path,
            title,
        )
        return
    exact = cast(_ExactTarget, target)
    lim = exact.limits
    g = torch.linspace(*lim, 200, dtype=torch.float64)
    dens = exact.log_marginal01(torch.cartesian_prod(g, g)).exp()
    ref = exact.sample(len(x), seeded_generator(0)).cpu().numpy()
    plot_sample_panels(dens.reshape(200, 200).cpu().numpy(), (*lim, *lim), {"exact samples": ref[:, :2], "learned samples": x[:, :2]}, path, title)


MODE_SHARE_TOLERANCE = 0.3
"""A mode is *within its share* when its sample count is within 30% of the exact expectation (Sendera et al. 2024's
targets; the 25-Gaussian grid at K = 2,000 expects 79 samples a mode, whose binomial standard deviation is 11% of that,
so an exact sampler leaves one mode of 25 outside 30% with probability about 2%)."""


def sample_metrics(target_name: str, x: torch.Tensor) -> dict:
    """Distances of the samples ``x [K, n]`` to the target: ``ks_x0``, the KS distance of the first coordinate to its exact
    marginal (for the funnels :math:`\\mathcal N(0, \\sigma_0^2)`: the neck); for the mixtures the samples per mode beside
    the exact expectation :math:`K p_m` (:meth:`~gflownet_measure.environments.sde_targets.GridMixture.mode_share`):
    ``mode_share_max_error``, :math:`\\max_m |n_m / (K p_m) - 1|`, and ``modes_within_share``, the modes within
    :data:`MODE_SHARE_TOLERANCE` of it; the mass in the right well of each pair beside the exact one (many-well)."""
    target = TARGETS[target_name]
    out = {"ks_x0": ks_distance(x[:, 0], target.cdf0)} if hasattr(target, "cdf0") else {}
    if isinstance(target, GridMixture):
        counts = target.mode_counts(x)
        error = (counts.double() / (len(x) * target.mode_share()) - 1.0).abs()
        out |= {f"mode_count/{i}": int(c) for i, c in enumerate(counts)} | {"modes_covered": int((counts > 0).sum())}
        out |= {"mode_share_max_error": float(error.max()), "modes_within_share": int((error <= MODE_SHARE_TOLERANCE).sum())}
    if isinstance(target, ManyWell):
        mass = target.well_mass(x)
        out |= {"right_well_mass_exact": target.right_mass(), "right_well_mass_max_error": float((mass - target.right_mass()).abs().max())}
        out |= {f"right_well_mass/{i}": float(m) for i, m in enumerate(mass)}
    return out


def sampler_metrics(gfn: GFlowNet, graph: PointedGraph, target_name: str, K: int) -> tuple[dict, torch.Tensor]:
    """What the module docstring lists, of ``K`` on-policy trajectories (:func:`evaluate_bounds`): the bounds, their
    distances to the exact log Z and the EUBO (targets with one; the EUBO's exact samples drawn after the trajectories),
    and :func:`sample_metrics`; with the trajectories' terminal states ``x [K, n]``."""
    out = evaluate_bounds(gfn, graph, K)
    x = out.pop("samples")
    target = TARGETS[target_name]
    if target.log_Z is not None:  # lgcp: the estimates are the result
        out |= {
            "log_Z_exact": target.log_Z,
            "bias_lower_bound": out["log_Z_lower_bound"] - target.log_Z,
            "bias_importance_weighted": out["log_Z_importance_weighted"] - target.log_Z,
            "delta_log_Z": target.log_Z - out["log_Z_lower_bound"],
            "delta_log_Z_RW": target.log_Z - out["log_Z_importance_weighted"],
        }
        if hasattr(target, "sample"):  # every target but lgcp
            eubo = evaluate_eubo(gfn, graph, cast(_ExactTarget, target).sample(K))
            out |= {"eubo": eubo, "delta_log_Z_EUBO": eubo - target.log_Z}
    return out | sample_metrics(target_name, x), x


def run(settings: SDERun, context: RunContext) -> dict:
    space, out = settings.space, context.out
    graph, gfn = make_gflownet(settings)
    objective = configure(get_objective(settings.objective), settings)
    K = settings.eval_samples or PAPER_K[space.target]
    start = start_metrics(out, context.resume, lambda: {k: v for k, v in sampler_metrics(gfn, graph, space.target, K)[0].items() if "/" not in k})

    def evaluate() -> dict:
        b = evaluate_bounds(gfn, graph, min(K, 1000))
        return {"log_Z_lower_bound": b["log_Z_lower_bound"], "log_Z_importance_weighted": b["log_Z_importance_weighted"]} | learned_log_Z(objective, gfn, graph)

    if settings.log_Z_init == "start":  # a resumed run's checkpoint restores the trained value over this one
        with torch.no_grad():
            gfn.log_Z.fill_(start["log_Z_importance_weighted"])
    batches = make_batches(gfn, graph, settings)
    history = train_gflownet(gfn, graph, objective, settings.training, context, evaluate, batches)
    final, samples = sampler_metrics(gfn, graph, space.target, K)
    x = samples.cpu().numpy()
    write_file(out / "samples.npz", lambda f: np.savez(f, x=x))
    label = (
        f"{space.target}, {settings.objective}, {settings.regime}-policy"
        + (" + LP" if space.langevin else "")
        + (" + LS" if settings.search.local_search else "")
        + (" + learned P_B" if space.learned_backward else "")
    )
    plot_history(history, "log_Z_importance_weighted", out / "log_z.png", f"B_RW during training ({label})", log_y=False)
    _figure(space.target, x, out / "samples.png", label)
    steps = settings.training.steps
    return (
        final
        | {f"start_{k}": v for k, v in start.items() if k != "log_Z_exact"}
        | {
            **{f"{k}_learned": v for k, v in learned_log_Z(objective, gfn, graph).items()},
            "eval_samples": K,
            "seconds": history[-1]["seconds"],
            "seconds_per_step": history[-1]["seconds"] / steps,  # evaluations included
            "steps": steps,
        }
    )


register(
    Experiment(
        "sde",
        "SDE sampler on R^n (9- and 25-Gaussian mixtures, 10-D funnels, 32-D many-well, 1,600-D LGCP): TB / reverse KL / forward KL, on- or off-policy; log Z bounds",
        SETTINGS,
        PRESETS,
        run,
        validate,
        settings_type=SDERun,
        evaluation_settings=("eval_samples",),
    )
)
