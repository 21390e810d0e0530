"""`gflownet-measure run torus`: the continuous torus of Lahlou et al. 2023, section 4.3 (R6 and alanine dipeptide).

Metrics, against the exact normalised density on the periodic grid of ``eval_grid`` points per angle (never a second KDE):
``jsd``, ``l1`` and ``kl`` (KL(exact || learned)) of a periodic Gaussian KDE (bandwidth ``bandwidth``) of ``eval_samples``
terminal states; ``floor_jsd`` etc. are what a perfect sampler scores at the same sample size (the KDE of as many draws
from the exact grid density, each uniform within its grid cell). Per basin of the target (R6: its modes; alanine: the
Ramachandran basins) the fraction of samples in it (``mass/<basin>``) and the exact mass by quadrature
(``mass_exact/<basin>``). ``log_Z_exact`` by quadrature; ``log_Z_learned`` (the TB parameter), ``log_Z_lower_bound``
(mean of w) and ``log_Z_importance_weighted`` (log-mean-exp of w) from ``eval_samples`` on-policy trajectories.
``paper_jsd``: the paper's own JSD (Lahlou et al. 2023, appendix C.1, as the public code computes it): a KDE of
``paper_samples`` terminal states against a KDE of as many draws from the target (the grid density's draws, as the floor's),
both on the public code's closed grid of ceil(1000^(1/n)) points per angle, 32 x 32 for two angles
(:func:`~gflownet_measure.environments.torus_targets.closed_grid`); the mean over the ``eval_samples // paper_samples`` disjoint sets of the
final samples (``paper_jsd_std`` their spread, 0 for one set), each against its own target draws, and ``floor_paper_jsd``
what exact draws score on it (not 0: both KDEs are noisy; on R6 0.061 at 1,000 samples, 0.0071 at 10,000).
For alanine the grid and basin masses use exact OpenMM energies; training reads the interpolated energy grid. With
``space=hybrid`` (:mod:`gflownet_measure.environments.hybrid_torus`) also ``exact_P_T/{jsd,l1,kl}``: the learned sampler's terminal density itself,
by enumeration of its discrete choices and quadrature of its angles (:func:`~gflownet_measure.environments.hybrid_torus.terminal_density`).
With ``ema`` > 0 the sampler is an exponential moving average of P_F's weights (Polyak averaging); the last iterate is
scored beside it at each evaluation (``last_*``), from the draws a run without ``ema`` would make, so that training and
``last_*`` are those of the same run without the average.

``samples.npz``: ``x [K, n]`` float64, the angles in :math:`[0, 2\\pi)^n` of ``eval_samples`` terminal states of the sampler (the
weight average with ``ema`` > 0), without the step counter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor

from gflownet_measure.densities import Policy
from gflownet_measure.environments import hybrid_torus
from gflownet_measure.environments import torus as env
from gflownet_measure.environments.torus_targets import TorusTarget, closed_grid, grid_log_normaliser, periodic_grid
from gflownet_measure.graph import PointedGraph
from gflownet_measure.metrics import grid_jsd, grid_kl, periodic_kde_jsd, periodic_kde_log_density
from gflownet_measure.networks import StateFlow
from gflownet_measure.objectives import GFlowNet, Objective, get_objective, objective_names
from gflownet_measure.options import Setting, check_options, option, settings_of
from gflownet_measure.rollout import sample_forward
from gflownet_measure.run_files import write_file
from gflownet_measure.training import WeightAverage, seeded_generator

from .common import configure, final_samples, learned_log_Z, train_gflownet
from .environment import make_environment
from .local_search import LOCAL_SEARCH_SETTINGS, LocalSearchBatches, LocalSearchConfig
from .memory import PARAMETER_BYTES, mlp_parameters, require_phases, scored_bytes
from .plots import optional_figure, plot_density_panels, plot_history
from .registry import Experiment, RunContext, register
from .settings import ConfigError
from .training_config import TrainingConfig, ema_option, training_settings


@dataclass(frozen=True)
class TorusEvaluation:
    """How the sampler is scored, at each evaluation and at the end (module docstring): the samples, the exact density's
    grid, the KDE bandwidth and the paper's JSD's sample size."""

    eval_samples: int = option(10000, "terminal states per evaluation (KDE, basin masses, log Z estimates)", low=10)
    eval_grid: int = option(
        120,
        "grid points per angle of the exact density (JSD, L1, KL, basin masses); 120: 3-degree cells whose edges hold the basin boundaries (multiples of 30 degrees for R6, 3 for alanine), so that the midpoint rule gives basin masses exactly",
        low=10,
        high=400,
    )
    bandwidth: float = option(0.1, "periodic Gaussian KDE bandwidth (radians), of both JSDs (the public code's 0.1)", low=1e-3)
    paper_samples: int = option(
        1000,
        "samples per KDE of the paper's JSD, paper_jsd (appendix C.1: sampler KDE vs target-draw KDE; the public code's test n: 1,000 for R6, 10,000 for alanine); at most eval_samples",
        low=10,
    )

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class TorusRun:
    """The settings of ``run torus``: the torus, its target and policies (:class:`~gflownet_measure.environments.torus.TorusConfig`),
    the training (:class:`~gflownet_measure.experiments.training_config.TrainingConfig`; its ``epsilon`` is the probability
    of the setting ``exploration``'s move, :data:`EPSILON`), the scoring (:class:`TorusEvaluation`), the replay-buffer local
    search (:class:`~gflownet_measure.experiments.local_search.LocalSearchConfig`), and the experiment's own: the space's
    kind, the objective, and the weight average."""

    torus: env.TorusConfig
    training: TrainingConfig
    evaluation: TorusEvaluation
    search: LocalSearchConfig
    space: str = option(
        "torus",
        "torus: every angle moves at each step; hybrid: stay or move one angle per step (gflownet_measure.environments.hybrid_torus; its exact P_T is reported)",
        choices=("torus", "hybrid"),
    )
    objective: str = option("tb", "training objective (gflownet_measure.objectives)", choices=objective_names(divergence=False, continuous=True))
    ema: float = ema_option(0.0)

    def __post_init__(self):
        check_options(self)

    @property
    def hybrid(self) -> bool:
        """Whether the space is the hybrid torus (a discrete choice per step, then an angle)."""
        return self.space == "hybrid"


EPSILON = Setting(
    0.1,
    "probability of an exploration move while sampling training trajectories (the move: the setting exploration, uniform by default; the public code draws von Mises(0, 5), exploration=von-mises)",
    low=0.0,
    high=1.0,
)
"""The torus's ``epsilon`` (:attr:`TrainingConfig.epsilon <gflownet_measure.experiments.training_config.TrainingConfig.epsilon>`):
its default and its move, the setting ``exploration``."""

_OWN = settings_of(TorusRun)
SETTINGS = {
    **env.SETTINGS,
    **training_settings(without=("lr_backward", "epsilon")),  # epsilon below: the move is the setting exploration
    "space": _OWN["space"],
    "objective": _OWN["objective"],
    "epsilon": EPSILON,
    **settings_of(TorusEvaluation),
    **LOCAL_SEARCH_SETTINGS,
    "ema": _OWN["ema"],
}
PAPER_TEST_POINTS = 1000  # the public code's test grid: ceil(1000^(1/n)) points per angle (closed_grid)

# Lahlou et al. 2023 / the public code's icml23 ctorus and alaninedipeptide configs (docs/torus.md): batch 100, T = 10, Adam lr 1e-5 with
# log Z lr 1e-2, 5,000 updates (R6) or 40,000 (alanine), exploration 0.1, evaluation every 500 updates.
_PAPER: dict[str, Any] = {"steps": 5000, "batch_size": 100, "lr": 1e-5, "lr_logZ": 1e-2, "lr_milestone": 0, "grad_clip": 10.0, "eval_every": 500}
_QUICK = _PAPER | {"steps": 1500, "lr": 1e-3, "lr_logZ": 0.1, "hidden": 64, "n_layers": 2, "eval_every": 500, "eval_samples": 2000}
PRESETS: dict[str, dict[str, Any]] = {
    # a working R6 sampler in about 90 s on one thread (docs/results.md, section 9: 'Quick preset')
    "quick": _QUICK,
    # R6 to the paper's criteria on a CPU: the quick network for 36,000 updates, every rate halved each 12,000, a moving
    # average of the weights (horizon 1,000 updates) as the sampler, the paper's JSD averaged over 10 sets of 1,000; on
    # seeds 0-2 the learned log Z within 0.03 of the exact and the paper's JSD within 0.0025 of exact draws' (its floor),
    # 28 min a seed beside another job (docs/results.md, section 9, 'Quick preset')
    "r6": _QUICK | {"steps": 36000, "eval_every": 4000, "lr_milestone": 12000, "eval_samples": 10000, "ema": 0.999},
    # alanine dipeptide on a CPU: the quick network with absolute von Mises locations and replay-buffer local search (MALA on
    # log R) drawn uniformly (rank priority biases the basin masses: docs/torus.md), 45,000 updates with every rate halved
    # each 15,000, a moving average of the weights (horizon 1,000 updates) as the sampler; the paper's 10,000 samples
    # (docs/results.md, section 9)
    "alanine": _QUICK
    | {
        "target": "alanine",
        "location": "absolute",
        "local_search": True,
        "rank_weight": 1000.0,
        "ema": 0.999,
        "steps": 45000,
        "lr_milestone": 15000,
        "eval_every": 5000,
        "eval_samples": 10000,
        "paper_samples": 10000,
    },
    "paper": _PAPER,
    "paper-alanine": _PAPER | {"target": "alanine", "steps": 40000, "paper_samples": 10000},
}


@dataclass(frozen=True)
class Reference:
    """The exact density on the evaluation grid and its basins: what every evaluation compares with."""

    target: TorusTarget
    points: Tensor  # [G^n, n]
    log_R: Tensor  # [G^n], exact
    G: int
    bandwidth: float
    paper_points: Tensor  # [m^n, n], the public code's closed test grid

    @staticmethod
    def build(target: TorusTarget, G: int, bandwidth: float) -> "Reference":
        points = periodic_grid(target.n_dim, G)
        m = next(k for k in range(1, PAPER_TEST_POINTS + 1) if k**target.n_dim >= PAPER_TEST_POINTS)
        return Reference(target, points, target.log_reward_exact(points).double(), G, bandwidth, closed_grid(target.n_dim, m))

    @property
    def log_Z(self) -> float:
        return grid_log_normaliser(self.log_R, self.target.n_dim, self.G)

    def exact_masses(self) -> dict:
        p = torch.softmax(self.log_R, 0)
        region = self.target.region_of(self.points)
        return {f"mass_exact/{name}": float(p[region == j].sum()) for j, name in enumerate(self.target.regions)}

    def exact_draws(self, n: int, generator: torch.Generator) -> Tensor:
        """``n`` draws ``[n, n_dim]`` of the grid density: a cell by its probability, then uniform within it (the floor's sampler)."""
        cell = torch.multinomial(torch.softmax(self.log_R, 0), n, replacement=True, generator=generator)
        jitter = (torch.rand(n, self.target.n_dim, dtype=torch.float64, generator=generator) - 0.5) * (2 * math.pi / self.G)
        return torch.remainder(self.points[cell] + jitter, 2 * math.pi)

    def log_kde(self, x: Tensor) -> Tensor:
        return periodic_kde_log_density(x, self.points, self.bandwidth)

    def distances(self, x: Tensor, prefix: str = "", log_kde: Tensor | None = None) -> dict:
        """JSD, L1 (sum over the grid of :math:`|p - q|`) and KL(exact || KDE) of the KDE of ``x`` (``log_kde`` if already computed) against the exact grid density."""
        q = self.log_kde(x) if log_kde is None else log_kde
        l1 = float((torch.softmax(self.log_R, 0) - torch.softmax(q, 0)).abs().sum())
        return {f"{prefix}jsd": grid_jsd(q, self.log_R), f"{prefix}l1": l1, f"{prefix}kl": grid_kl(self.log_R, q)}

    def paper_jsd(self, x: Tensor, n: int, seed: int, prefix: str = "") -> dict:
        """The paper's JSD (module docstring) of the ``len(x) // n`` disjoint sets of ``n`` samples in ``x``, each against the
        KDE of its own ``n`` :meth:`exact_draws` (drawn from ``seed``: the same target draws at every call, as the public code
        caches its reference KDE): mean, population std and the number of sets."""
        sets = x[: len(x) // n * n].reshape(-1, n, x.shape[1])
        generator = seeded_generator(seed)
        scores = torch.tensor([periodic_kde_jsd(s, self.exact_draws(n, generator), self.paper_points, self.bandwidth) for s in sets], dtype=torch.float64)
        return {f"{prefix}paper_jsd": float(scores.mean()), f"{prefix}paper_jsd_std": float(scores.std(correction=0)), f"{prefix}paper_jsd_sets": len(scores)}

    def masses(self, x: Tensor) -> dict:
        region = self.target.region_of(x)
        return {f"mass/{name}": float((region == j).double().mean()) for j, name in enumerate(self.target.regions)}


def basin_errors(masses: dict, exact: dict) -> dict:
    """The largest absolute and relative error of the sampled basin masses against the exact ones."""
    names = [k.split("/", 1)[1] for k in exact]
    abs_err = [abs(masses[f"mass/{b}"] - exact[f"mass_exact/{b}"]) for b in names]
    rel = [e / exact[f"mass_exact/{b}"] for e, b in zip(abs_err, names) if exact[f"mass_exact/{b}"] > 0]
    return {"mass_max_abs_error": max(abs_err), "mass_max_rel_error": max(rel) if rel else math.nan}


def _image(ref: Reference, log_density: Tensor) -> np.ndarray:
    return torch.softmax(log_density, 0).reshape(ref.G, ref.G).cpu().numpy() * (ref.G / (2 * math.pi)) ** 2  # density w.r.t. Haar


@optional_figure
def _figure4(ref: Reference, log_kde: Tensor, n_samples: int, path: Path, title: str) -> None:
    """The paper's Figure 4: the exact normalised density and the KDE of the learned samples, side by side on the torus (same colour scale)."""
    box = (0.0, 2 * math.pi, 0.0, 2 * math.pi)
    panels = [("exact density R/Z", _image(ref, ref.log_R), box), (f"KDE of {n_samples} GFlowNet samples", _image(ref, log_kde), box)]
    plot_density_panels(panels, path, title, share=(0, 1))


@optional_figure
def _ramachandran(ref: Reference, log_kde: Tensor, n_samples: int, path: Path, title: str) -> None:
    """The Ramachandran plot: (phi, psi) in degrees on [-180, 180)^2, exact Boltzmann density and the learned KDE."""
    shift = ref.G // 2  # grid columns from [0, 360) to [-180, 180)
    roll = lambda img: np.roll(np.roll(img, shift, 0), shift, 1)  # noqa: E731
    box = (-180.0, 180.0, -180.0, 180.0)
    panels = [
        ("exact Boltzmann density (OpenMM)", roll(_image(ref, ref.log_R)), box),
        (f"KDE of {n_samples} GFlowNet samples", roll(_image(ref, log_kde)), box),
    ]
    plot_density_panels(panels, path, title, share=(0, 1))


def make_batches(
    gfn: GFlowNet, graph: PointedGraph, objective: Objective, training: TrainingConfig, target: TorusTarget, search: LocalSearchConfig
) -> LocalSearchBatches | None:
    """The training batches: the objective's own (``batch_size`` trajectories with ``epsilon`` exploration) or, with
    ``local_search``, those alternating with buffered terminal states refined by MALA on the target's training
    :math:`\\log R` and walked back with P_B (:class:`~gflownet_measure.experiments.local_search.LocalSearchBatches`; the
    chains run on the unrolled angles and are wrapped back onto the torus)."""
    if not search.local_search:
        return None
    return LocalSearchBatches(
        gfn,
        graph,
        lambda step: objective.sample(graph, gfn, training.batch_size, training.epsilon),
        training.batch_size,
        target.log_reward,
        search,
        wrap=lambda x: torch.remainder(x, env.TWO_PI),
        dtype=torch.float64,
    )


def run(settings: TorusRun, context: RunContext) -> dict:
    space, training, evaluation, out = settings.torus, settings.training, settings.evaluation, context.out
    _, graph, pf, pb = make_environment("hybrid-torus" if settings.hybrid else "torus", space)
    objective = configure(get_objective(settings.objective), settings)
    log_F = StateFlow(graph.encode, cast(env.Encoder, graph.encode).width, space.hidden, space.n_layers) if objective.needs_flow else None
    gfn = GFlowNet(pf, pb, log_F)
    target = env.target_of(space)
    ref = Reference.build(target, evaluation.eval_grid, evaluation.bandwidth)
    n = space.n_dim
    paper_seed = context.seed + 1  # the target draws of paper_jsd, independent of the floor's (seed context.seed)
    exact = ref.exact_masses()

    ema = WeightAverage(pf, settings.ema) if settings.ema > 0 else None  # when on, the average is the sampler
    sampler = pf if ema is None else cast(Policy, ema.module)  # the average's copy of P_F

    def scores(policy, prefix: str = "") -> dict:
        x = sample_forward(graph, policy, evaluation.eval_samples).terminal[:, :n]
        masses = ref.masses(x)
        found = ref.distances(x) | {"paper_jsd": ref.paper_jsd(x, evaluation.paper_samples, paper_seed)["paper_jsd"]} | masses | basin_errors(masses, exact)
        return {prefix + k: v for k, v in found.items()}

    def evaluate() -> dict:
        found = scores(pf, "last_" if ema is not None else "")  # first, from the run's stream: as a run without ema draws it
        if ema is not None:
            with torch.random.fork_rng():  # the average's draws leave the training stream as it was
                found |= scores(sampler)
        return found | learned_log_Z(objective, gfn, graph)

    batches = make_batches(gfn, graph, objective, training, target, settings.search)
    history = train_gflownet(gfn, graph, objective, training, context, evaluate, batches, ema)
    traj, lower, iw = final_samples(graph, gfn, evaluation.eval_samples, sampler)
    x = traj.terminal[:, :n].double()
    write_file(out / "samples.npz", lambda f: np.savez(f, x=x.cpu().numpy()))
    exact_x = ref.exact_draws(len(x), seeded_generator(context.seed))
    floor = ref.distances(exact_x, "floor_") | ref.paper_jsd(exact_x, evaluation.paper_samples, paper_seed, "floor_")
    masses, log_kde = ref.masses(x), ref.log_kde(x)
    metrics = (
        ref.distances(x, log_kde=log_kde)
        | ref.paper_jsd(x, evaluation.paper_samples, paper_seed)
        | floor
        | masses
        | exact
        | basin_errors(masses, exact)
        | {
            "log_Z_exact": ref.log_Z,
            **{f"{k}_learned": v for k, v in learned_log_Z(objective, gfn, graph).items()},
            "log_Z_lower_bound": lower,
            "log_Z_importance_weighted": iw,
            "seconds": history[-1]["seconds"],
            "seconds_per_step": history[-1]["seconds"] / training.steps,
            "steps": training.steps,
            "trajectories": training.steps * training.batch_size,
        }
        | {f"target/{k}": v for k, v in target.info}
        | {k: v for k, v in history[-1].items() if k.startswith("last_")}  # the last evaluation scored the final weights
    )
    if settings.hybrid:  # P_T itself, by enumeration of the discrete choices and quadrature of the angles: no KDE
        log_p_T = hybrid_torus.terminal_density(graph, sampler, ref.G).clamp(min=1e-300).log()
        metrics |= {
            "exact_P_T/jsd": grid_jsd(log_p_T, ref.log_R),
            "exact_P_T/l1": float((torch.softmax(log_p_T, 0) - torch.softmax(ref.log_R, 0)).abs().sum()),
            "exact_P_T/kl": grid_kl(ref.log_R, log_p_T),
        }
    label = (
        f"{target.name}{' hybrid' if settings.hybrid else ''}, T={space.n_steps}, {settings.objective}{' + LS' if settings.search.local_search else ''}, "
        f"P_B {space.backward}{', absolute locations' if space.location == 'absolute' else ''}"
    )
    plot_history(history, "jsd", out / "jsd.png", f"JSD to the exact density ({label})")
    if n == 2:
        _figure4(ref, log_kde, len(x), out / "figure4.png", label)
        if space.target == "alanine":
            _ramachandran(ref, log_kde, len(x), out / "ramachandran.png", label)
    return metrics


KDE_SAMPLE_BYTES = 11e3
"""Bytes per terminal sample and angle of an evaluation besides its scoring: the periodic KDE's ``[512, K, n]`` float64
differences and their squares (measured with ``steps=1`` on R6, 2 angles, hidden 64, scoring included: 21.9 KB per
sample from 1,000 to 20,000 samples, 23.8 KB from 1,000 to 10,000; the peaks of runs between are up to 0.5 GB apart,
the allocator's fragmentation over the KDE's chunks)."""


def validate(settings: TorusRun) -> None:
    """The settings that do not go together (their :class:`~gflownet_measure.environments.torus.TorusConfig`, with its one-line
    errors for a bad temperature, structure, force field or reward, is checked when the settings are built), the target
    built (the molecule's energy grid computed or read from its cache), and the memory of each phase
    (:func:`~gflownet_measure.experiments.memory.require_phases`): one update (about 4.1 bytes per trajectory, step, unit
    and layer of P_F's and P_B's MLPs, as the quarter disc's); the model (P_F, P_B, a state flow where the objective has one,
    :data:`~gflownet_measure.experiments.memory.PARAMETER_BYTES`); an evaluation, ``eval_samples`` terminal states, each
    trajectory scored (:func:`~gflownet_measure.experiments.memory.scored_bytes`) and :data:`KDE_SAMPLE_BYTES` per angle."""
    space, evaluation, batch_size = settings.torus, settings.evaluation, settings.training.batch_size
    if evaluation.paper_samples > evaluation.eval_samples:
        raise ConfigError(f"paper_samples={evaluation.paper_samples} exceeds eval_samples={evaluation.eval_samples}; raise eval_samples or lower paper_samples")
    if space.n_dim != 2 and evaluation.eval_grid**space.n_dim > 4_000_000:
        raise ConfigError(f"eval_grid={evaluation.eval_grid} with n_dim={space.n_dim} is {evaluation.eval_grid**space.n_dim} grid points; lower eval_grid")
    try:
        env.target_of(space)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    n, networks = evaluation.eval_samples, 2 + get_objective(settings.objective).needs_flow
    require_phases(
        (4.1 * batch_size * (space.n_steps + 1) * space.hidden * max(1, space.n_layers) * 2, f"batch_size={batch_size}"),
        (PARAMETER_BYTES * networks * mlp_parameters(space.hidden, space.hidden, space.n_layers, space.hidden), f"hidden={space.hidden}"),
        (n * (scored_bytes(space.hidden, space.n_layers, space.n_steps + 1) + KDE_SAMPLE_BYTES * space.n_dim), f"eval_samples={n}"),
    )


register(
    Experiment(
        "torus",
        "continuous torus, von Mises mixture policies, R6 or alanine dipeptide; JSD, basin masses and log Z vs exact",
        SETTINGS,
        PRESETS,
        run,
        validate,
        settings_type=TorusRun,
        evaluation_settings=("eval_samples", "eval_grid", "paper_samples"),
    )
)
