"""`gflownet-measure run quarter-disc` and `quarter-disc-figure1`: the continuous grid of Lahlou et al. 2023, section 4.1.

Metrics (the public code's evaluation; docs/references.md, 'Quarter disc'): the JSD on a 100 x 100 grid (``linspace(0.001, 1, 100)``)
between an exponential-kernel KDE (bandwidth 0.1) of ``eval_samples`` terminal states and (a) the exact
normalised reward on the grid (``jsd_exact``), (b) the same KDE of as many rejection samples from R,
bound 2.6 (``jsd_rejection``, the paper's procedure with the bound corrected). The floors are what a perfect
sampler scores: ``jsd_floor`` is (a) for the rejection samples themselves, ``jsd_rejection_floor`` is (b) for a second,
independent set of as many rejection samples.

A KDE of bandwidth 0.1 cannot see the reward's 0.1-wide squares, so both JSDs pass a sampler that smooths them out.
``level_tv`` sees it, without a KDE: the total variation between the fractions of the samples on each of the reward's
three levels (0.1, 0.6, 2.6; :func:`gflownet_measure.environments.quarter_disc.reward_level`) and their exact masses
(0.246, 0.413, 0.341; :func:`gflownet_measure.environments.quarter_disc.level_masses`), beside the fractions themselves
(``level_mass_<v>``). Its floor ``level_tv_floor`` is the exact expected value for ``eval_samples`` exact samples
(:func:`gflownet_measure.metrics.expected_sample_tv`); ``level_tv_exact_samples`` is the value of the rejection samples.

``samples.npz``: ``x [K, 2]`` float64, the terminal points in :math:`[0, 1]^2` of ``eval_samples`` trajectories of the trained
policy (no exploration).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from gflownet_measure.densities import Policy
from gflownet_measure.environments import quarter_disc as env
from gflownet_measure.graph import PointedGraph
from gflownet_measure.metrics import expected_sample_tv, grid_jsd, kde_log_density, rejection_sample, total_variation
from gflownet_measure.networks import StateFlow
from gflownet_measure.objectives import GFlowNet, get_objective, objective_names
from gflownet_measure.options import check_options, option, settings_of
from gflownet_measure.rollout import sample_backward, sample_forward
from gflownet_measure.run_files import write_file
from gflownet_measure.training import read_history, seeded_generator

from .common import ExecutionConfig, SubRun, configure, final_samples, learned_log_Z, run_many, train_gflownet
from .environment import make_environment
from .memory import PARAMETER_BYTES, SUB_RUN_BYTES, mlp_parameters, require_phases, scored_bytes
from .plots import optional_figure, plot_bands, plot_density_panels, plot_history
from .registry import Experiment, RunContext, register
from .settings import flatten
from .tables import write_table
from .training_config import TrainingConfig, training_settings


@dataclass(frozen=True)
class QuarterDiscEvaluation:
    """How every evaluation scores the sampler (module docstring): the terminal states drawn (and as many rejection
    samples) and the bandwidth of their KDEs."""

    eval_samples: int = option(10000, "terminal states per evaluation (KDE, log Z bounds) and rejection samples", low=10)
    bandwidth: float = option(0.1, "KDE bandwidth (exponential kernel)", low=1e-3)

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class QuarterDiscRun:
    """The settings of ``run quarter-disc``: the space and its policies (:class:`~gflownet_measure.environments.quarter_disc.QuarterDiscConfig`),
    the training (:class:`~gflownet_measure.experiments.training_config.TrainingConfig`, all but ``lr_backward``: a learned
    P_B trains at ``lr``), the evaluation (:class:`QuarterDiscEvaluation`), and the objective."""

    space: env.QuarterDiscConfig
    training: TrainingConfig
    evaluation: QuarterDiscEvaluation
    objective: str = option(
        "tb",
        "training objective (gflownet_measure.objectives; flow matching needs atoms only)",
        choices=objective_names(divergence=False, continuous=True),
        aliases=("loss",),
    )

    def __post_init__(self):
        check_options(self)


SETTINGS = {**env.SETTINGS, **training_settings(without=("lr_backward",)), **settings_of(QuarterDiscRun), **settings_of(QuarterDiscEvaluation)}

_PAPER = {"steps": 20000, "batch_size": 128, "lr": 1e-3, "lr_logZ": 1e-3, "lr_flow": 1e-2, "lr_milestone": 2500, "lr_gamma": 0.5, "eval_every": 500}
PRESETS = {
    # under 2 minutes on one thread (docs/results.md, section 2: 'Quick preset, TB + learned P_B, rho = 0.25')
    "quick": _PAPER | {"steps": 4000, "lr_logZ": 5e-2, "lr_milestone": 1000, "eval_every": 1000, "eval_samples": 4000},
    "paper": _PAPER,  # main.py of the public code: Adam, batch 128, lr halved every 2,500 of 20,000 iterations
}

GRID = torch.linspace(0.001, 1.0, 100, dtype=torch.float64)


@dataclass(frozen=True)
class Reference:
    """What every evaluation compares with: grid points, exact log R there, the rejection samples and their KDE;
    ``control`` is a second set of rejection samples, drawn after ``samples`` from the same generator, for the floors;
    the exact masses of the reward's levels."""

    points: Tensor  # [G, 2]
    log_R: Tensor  # [G]
    samples: Tensor  # [K, 2]
    log_kde: Tensor  # [G]
    bandwidth: float
    control: Tensor  # [K, 2]
    masses: Tensor  # [3]: exact mass of each of env.LEVELS

    @staticmethod
    def build(n: int, bandwidth: float, seed: int) -> "Reference":
        points = torch.cartesian_prod(GRID, GRID).to(torch.get_default_device())  # GRID is built at import, on the CPU
        gen = seeded_generator(seed)
        samples, control = (rejection_sample(env.log_reward, torch.zeros(2), torch.ones(2), math.log(env.REWARD_MAX), n, gen) for _ in range(2))
        return Reference(points, env.log_reward(points), samples, kde_log_density(samples, points, bandwidth), bandwidth, control, env.level_masses())

    def scores(self, x: Tensor) -> dict:
        """The two JSDs and ``level_tv`` of the terminal states ``x [K, 2]`` (module docstring)."""
        log_kde = kde_log_density(x, self.points, self.bandwidth)
        return {
            "jsd_exact": grid_jsd(log_kde, self.log_R),
            "jsd_rejection": grid_jsd(log_kde, self.log_kde),
            "level_tv": total_variation(self.level_fractions(x), self.masses),
        }

    def level_fractions(self, x: Tensor) -> Tensor:
        """The fraction of ``x [K, 2]`` on each of the reward's levels, ``[3]`` float64."""
        return torch.bincount(env.reward_level(x), minlength=len(env.LEVELS)).double() / len(x)

    def floors(self) -> dict:
        """What a perfect sampler scores at this sample size: ``jsd_floor`` (exact grid, the KDE's smoothing),
        ``jsd_rejection_floor`` (rejection KDE, sampling noise of both KDEs), ``level_tv_floor`` (expected level TV of as many
        exact samples) and ``level_tv_exact_samples`` (the rejection samples' level TV, one draw of it)."""
        return {
            "jsd_floor": grid_jsd(self.log_kde, self.log_R),
            "jsd_rejection_floor": self.scores(self.control)["jsd_rejection"],
            "level_tv_floor": expected_sample_tv(self.masses, len(self.samples)),
            "level_tv_exact_samples": total_variation(self.level_fractions(self.samples), self.masses),
        }

    def level_report(self, x: Tensor) -> dict:
        """The fraction of ``x`` on each level and the exact mass, keyed by the level's reward value (``level_mass_2.6``, ``level_mass_2.6_exact``)."""
        return {
            f"level_mass_{v:g}{tail}": float(m) for tail, masses in (("", self.level_fractions(x)), ("_exact", self.masses)) for v, m in zip(env.LEVELS, masses)
        }


@optional_figure
def _figure2(graph: PointedGraph, pf: Policy, pb: Policy, ref: Reference, x: Tensor, rho: float, path: Path, title: str) -> None:
    """Figure 2 of Lahlou et al. 2023, five panels in the order its public code draws them: (a) R/Z, (b) the KDE of the
    learned samples, (c) the law of s1 under R (x) the uniform P_B, (d) P_F(s0, .) on [0, rho]^2, (e) the law of s1 under
    R (x) the run's P_B.

    (c), (d) and (e) are densities w.r.t. area of the same point :math:`s_1`: at a solution of the balance conditions
    (d) equals the law of s1 under the P_B trained with, (c) with the fixed uniform P_B, (e) with a learned one (the two
    coincide for ``backward=uniform``, drawn from independent walks). They share one colour scale (that of P_F). A law of
    :math:`s_1` is a histogram of the backward walks from the rejection samples, on a grid coarse enough to hold about 30
    walks per cell; the order and content are those of the public code's ``density_figures.ipynb`` (which draws KDEs of
    bandwidth 0.01).
    """
    n = len(GRID)
    side = torch.linspace(0.0, rho, 60, dtype=torch.float64)[1:]
    disc = torch.cartesian_prod(side, side)
    inside = torch.linalg.vector_norm(disc, dim=1) < rho
    with torch.no_grad():
        log_p = pf(torch.zeros(int(inside.sum()), 2, dtype=torch.float64)).log_prob(disc[inside], torch.zeros(int(inside.sum()), dtype=torch.bool))
    pf_img = torch.full((len(disc),), float("nan"), dtype=torch.float64)
    pf_img[inside] = log_p.double().exp()
    bins = max(4, int(math.sqrt(len(ref.samples) / 30 * 4 / math.pi)))  # ~30 walks per cell of the quarter disc

    def law_of_s1(backward: Policy) -> np.ndarray:
        s1 = sample_backward(graph, backward, ref.samples).states[1].cpu().numpy()
        return np.histogram2d(s1[:, 0], s1[:, 1], bins=bins, range=[[0, rho], [0, rho]], density=True)[0]

    box, small = (0.0, 1.0, 0.0, 1.0), (0.0, rho, 0.0, rho)
    panels = [
        ("(a) reward density R/Z", torch.softmax(ref.log_R, 0).reshape(n, n).cpu().numpy(), box),
        ("(b) KDE of learned samples", torch.softmax(kde_log_density(x, ref.points, ref.bandwidth), 0).reshape(n, n).cpu().numpy(), box),
        ("(c) s1 of backward walks from R, uniform P_B", law_of_s1(env.uniform_backward(rho)), small),
        ("(d) learned P_F(s0, .) (density w.r.t. area)", pf_img.reshape(len(side), len(side)).cpu().numpy(), small),
        ("(e) s1 of backward walks from R, the run's P_B", law_of_s1(pb), small),
    ]
    plot_density_panels(panels, path, title, share=(3, 2, 4))


def run(settings: QuarterDiscRun, context: RunContext, figure2: bool = True) -> dict:
    """Train one configuration into ``context.out``; ``figure2=False`` skips the Figure 2 panels (``jsd.png`` is always drawn).
    The reference's rejection samples are drawn from the run's seed (``context.seed``)."""
    space, evaluation, out = settings.space, settings.evaluation, context.out
    _, graph, pf, pb = make_environment("quarter-disc", space)
    objective = configure(get_objective(settings.objective), settings)
    shared = pf.torso if space.flow_torso == "shared" else None
    assert shared is None or isinstance(shared, nn.Sequential)  # P_F is an MLPPolicy (env.make_policies), its torso an MLP
    log_F = StateFlow(graph.encode, 2, space.hidden, space.n_layers, shared, env.ACTIVATIONS[space.activation]) if objective.needs_flow else None
    gfn = GFlowNet(pf, pb, log_F)
    ref = Reference.build(evaluation.eval_samples, evaluation.bandwidth, seed=context.seed)

    def evaluate() -> dict:
        return ref.scores(sample_forward(graph, pf, evaluation.eval_samples).terminal) | learned_log_Z(objective, gfn, graph)

    history = train_gflownet(gfn, graph, objective, settings.training, context, evaluate)
    traj, lower, iw = final_samples(graph, gfn, evaluation.eval_samples)
    x = traj.terminal
    write_file(out / "samples.npz", lambda f: np.savez(f, x=x.cpu().numpy()))
    label = f"rho={space.rho}, {settings.objective}, P_B {space.backward}" + ("" if space.jacobian else ", no Jacobian")
    plot_history(history, "jsd_exact", out / "jsd.png", f"JSD to the exact reward grid ({label})")
    plot_history(history, "level_tv", out / "level_tv.png", f"TV of the reward-level masses ({label})")
    if figure2:
        _figure2(graph, pf, pb, ref, x, space.rho, out / "figure2.png", label)
    return (
        ref.scores(x)
        | ref.floors()
        | ref.level_report(x)
        | {
            "log_Z_exact": env.LOG_Z,
            **{f"{k}_learned": v for k, v in learned_log_Z(objective, gfn, graph).items()},
            "log_Z_lower_bound": lower,
            "log_Z_importance_weighted": iw,
            "seconds": history[-1]["seconds"],
            "seconds_per_step": history[-1]["seconds"] / settings.training.steps,  # evaluations included
            "steps": settings.training.steps,
            "trajectories": history[-1]["trajectories"],  # every replica's, in a data-parallel run
        }
    )


KDE_SAMPLE_BYTES = 3.2e3
"""Bytes per terminal sample of an evaluation besides its scoring: the KDE's ``[512, K]`` distance matrices, the
rejection samples and their proposals (measured with ``steps=1`` at 20,000 and 80,000 samples, rho 0.25, 4 layers:
5.5 KB per sample at hidden 128, 12.6 KB at hidden 512, i.e. 18.4 bytes per unit and 3.2 KB besides)."""


def _require_memory(space: env.QuarterDiscConfig, batch_size: int, eval_samples: int, networks: int, tables: tuple[float, str] | None = None) -> None:
    """The memory of each phase (:func:`~gflownet_measure.experiments.memory.require_phases`): one update, about 4.1
    bytes per trajectory, step of the longest trajectory (2 + 2 / rho), unit and layer of the MLP (measured at rho 0.25,
    hidden 128, 4 layers: 20.9 KB per trajectory); the model, ``networks`` MLPs of ``n_layers`` blocks (P_F, and a state
    flow on a torso of its own); an evaluation, ``eval_samples`` terminal states, each trajectory scored at the longest
    length (:func:`~gflownet_measure.experiments.memory.scored_bytes`) and :data:`KDE_SAMPLE_BYTES`; and ``tables``,
    a table's sub-runs, where there are."""
    max_length = 2 + math.ceil(2 / space.rho)
    require_phases(
        (4.1 * batch_size * max_length * space.hidden * max(1, space.n_layers), f"batch_size={batch_size}"),
        (PARAMETER_BYTES * networks * mlp_parameters(2, space.hidden, space.n_layers, space.hidden), f"hidden={space.hidden}"),
        (eval_samples * (scored_bytes(space.hidden, space.n_layers, max_length) + KDE_SAMPLE_BYTES), f"eval_samples={eval_samples}"),
        *([tables] if tables is not None else []),
    )


def _networks(space: env.QuarterDiscConfig, needs_flow: bool) -> int:
    """The MLPs of width ``hidden`` a run trains: P_F's (a learned P_B shares its torso), and a state flow's on a torso of its own."""
    return 1 + (needs_flow and space.flow_torso != "shared")


def validate(settings: QuarterDiscRun) -> None:
    """The memory of each phase (:func:`_require_memory`)."""
    space = settings.space
    _require_memory(space, settings.training.batch_size, settings.evaluation.eval_samples, _networks(space, get_objective(settings.objective).needs_flow))


register(
    Experiment(
        "quarter-disc",
        "continuous quarter-disc grid, Beta-mixture policies, TB/DB; JSD to R on a 100x100 grid",
        SETTINGS,
        PRESETS,
        run,
        validate,
        settings_type=QuarterDiscRun,
        evaluation_settings=("eval_samples",),
    )
)

# --- Figure 1 (b, c) and Figure 2: the 8 configurations over seeds -----------------------------------------

CONFIGS = [(loss, backward, rho) for rho in (0.25, 0.1) for loss in ("tb", "db") for backward in ("uniform", "learned")]
CONFIGURED = ("objective", "backward", "rho")  # the settings of a run that its configuration (a CONFIGS tuple) sets, in that order


@dataclass(frozen=True)
class Figure1Run:
    """The settings of ``run quarter-disc-figure1``: those of :class:`QuarterDiscRun` that every configuration shares, the
    seeds per configuration and the execution of the runs. The ``rho`` and ``backward`` of ``space`` are not settings of
    the table (each configuration sets them, and the objective: :data:`CONFIGURED`): they keep their defaults, never read.
    """

    space: env.QuarterDiscConfig
    training: TrainingConfig
    evaluation: QuarterDiscEvaluation
    execution: ExecutionConfig
    seeds: int = option(3, "seeds per configuration: --seed, --seed + 1, ...", low=1)

    def __post_init__(self):
        check_options(self)


FIGURE1_SETTINGS = {k: v for k, v in SETTINGS.items() if k not in CONFIGURED} | settings_of(Figure1Run) | settings_of(ExecutionConfig)
FIGURE1_PRESETS = {
    "quick": PRESETS["quick"] | {"steps": 200, "eval_every": 100, "eval_samples": 2000, "seeds": 1},
    "paper": PRESETS["paper"] | {"seeds": 6},  # the paper's 6 runs a configuration (Figure 1, mean ± std)
}


METRICS = ("jsd_exact", "jsd_rejection", "level_tv")  # what the table aggregates over seeds, at the end and over the curve


def _name(loss: str, backward: str, rho: float) -> str:
    return f"{loss}-{backward}-rho{rho}"


# The orderings Figure 1 of the paper reports: (position in a CONFIGS tuple, the value expected lower, the one expected higher).
ORDERINGS = {
    "tb_below_db": (0, "tb", "db"),
    "learned_below_uniform": (1, "learned", "uniform"),
    "rho0.25_below_rho0.1": (2, 0.25, 0.1),
}


def curve_mean(trajectories: list[float], values: list[float]) -> float:
    """The mean height of a JSD curve over the trajectories sampled, :math:`\\frac{1}{t_n - t_1}\\int_{t_1}^{t_n} \\mathrm{JSD}(t)\\,dt`
    (trapezoidal rule): Figure 1's curve as one number, lower for a configuration that learns faster. One point gives that point."""
    t, y = np.asarray(trajectories, dtype=float), np.asarray(values, dtype=float)
    return float(y[0]) if len(t) == 1 else float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(t)) / (t[-1] - t[0]))


def orderings_held(values: dict[tuple, list[float]]) -> dict[str, tuple[int, int]]:
    """For each of ``ORDERINGS``: in how many pairs of runs that differ in that factor only (same other factors, same seed)
    the expected-lower configuration scores lower, and the number of pairs. ``values[config]`` lists one figure per seed."""
    held = {}
    for label, (i, low, high) in ORDERINGS.items():
        pairs = [
            (a, b) for config, lows in values.items() if config[i] == low for a, b in zip(lows, values[config[:i] + (high,) + config[i + 1 :]], strict=True)
        ]
        held[label] = (sum(a < b for a, b in pairs), len(pairs))
    return held


def run_settings(settings: Figure1Run, loss: str, backward: str, rho: float) -> dict:
    """The flat settings of the table's run of one configuration, as its ``config.json`` records them: the table's shared
    settings in :data:`SETTINGS`' order, then the configuration's (:data:`CONFIGURED`)."""
    flat = flatten(settings)
    return {key: flat[key] for key in SETTINGS if key not in CONFIGURED} | {"objective": loss, "backward": backward, "rho": rho}


def run_figure1(settings: Figure1Run, context: RunContext) -> dict:
    """Each configuration and seed in ``out/<loss>-<backward>-rho<rho>/seed<k>`` (finished ones are kept on resume), then the figures:
    ``figure1.png`` (JSD to the exact grid), ``figure1_rejection.png`` (JSD to the rejection KDE), ``figure1_levels.png`` (level TV), each with a
    perfect sampler's floor, ``figure2.png``."""
    out, base_seed, execution = context.out, context.seed, settings.execution  # base_seed: the CLI's --seed
    headline = _name("tb", "learned", 0.25)  # Figure 2 is drawn for its first seed
    runs: dict[str, list[list[dict]]] = {}
    finals: dict[str, list[dict]] = {}
    jobs = [
        SubRun(
            out / _name(loss, backward, rho) / f"seed{base_seed + k}",
            base_seed + k,
            run_settings(settings, loss, backward, rho),
            QuarterDiscRun,
            {"figure2": _name(loss, backward, rho) == headline and k == 0},
        )
        for loss, backward, rho in CONFIGS
        for k in range(settings.seeds)
    ]
    for job, sub_metrics in zip(jobs, run_many(run, jobs, context.resume, execution.jobs, executor=execution.executor, address=execution.address)):
        name = job.out.parent.name
        runs.setdefault(name, []).append(read_history(job.out / "history.jsonl"))
        finals.setdefault(name, []).append(sub_metrics)
    panels = {f"rho = {rho}": [_name(loss, backward, r) for loss, backward, r in CONFIGS if r == rho] for rho in (0.25, 0.1)}
    # each run's metrics hold its references' floors (Reference.floors); the figures draw their mean over the runs
    floor_means = {
        f"{key}/mean": float(np.mean([m[key] for ms in finals.values() for m in ms])) for key in ("jsd_floor", "jsd_rejection_floor", "level_tv_floor")
    }
    for key, floor_key, file, title, ylabel, floor_label in (
        ("jsd_exact", "jsd_floor", "figure1.png", "JSD to the exact reward grid", "JSD", "perfect sampler (rejection samples)"),
        (
            "jsd_rejection",
            "jsd_rejection_floor",
            "figure1_rejection.png",
            "JSD to the KDE of rejection samples (the paper's Figure 1 metric)",
            "JSD",
            "perfect sampler (rejection samples)",
        ),
        (
            "level_tv",
            "level_tv_floor",
            "figure1_levels.png",
            "TV of the masses on the reward's levels 0.1 / 0.6 / 2.6",
            "total variation",
            "perfect sampler (expected)",
        ),
    ):
        curves = {name: ([r["trajectories"] for r in hs[0]], [[r[key] for r in h] for h in hs]) for name, hs in runs.items()}
        plot_bands(curves, out / file, f"{title} (mean ± std over {settings.seeds} seeds)", ylabel, panels, (floor_label, floor_means[f"{floor_key}/mean"]))
    history = [
        {"step": row["step"], "trajectories": row["trajectories"]}
        | {f"{key}/{name}": float(np.mean([h[i][key] for h in hs])) for name, hs in runs.items() for key in METRICS}
        for i, row in enumerate(runs[headline][0])
    ]
    write_table(out, None, history, out / headline / f"seed{base_seed}", ("figure2.png",))
    per_seed = {  # (metric, "final" | "curve") -> configuration name -> one figure per seed
        (key, when): {
            name: [m[key] for m in finals[name]] if when == "final" else [curve_mean([r["trajectories"] for r in h], [r[key] for r in h]) for h in hs]
            for name, hs in runs.items()
        }
        for key in METRICS
        for when in ("final", "curve")
    }
    metrics = {}
    for name, ms in finals.items():
        for key in (*METRICS, "log_Z_learned"):
            metrics[f"{key}/{name}/mean"] = float(np.mean([m[key] for m in ms]))
            metrics[f"{key}/{name}/std"] = float(np.std([m[key] for m in ms]))
        for key in METRICS:
            metrics[f"{key}_curve/{name}/mean"] = float(np.mean(per_seed[key, "curve"][name]))
    for (key, when), figures in per_seed.items():
        for label, (held, pairs) in orderings_held({c: figures[_name(*c)] for c in CONFIGS}).items():
            metrics[f"held/{label}/{key}/{when}"] = held
            metrics[f"pairs/{label}"] = pairs
    return metrics | floor_means | {"log_Z_exact": env.LOG_Z, "seeds": settings.seeds}


def validate_figure1(settings: Figure1Run) -> None:
    """The memory of each phase of the table's most demanding configuration (the smallest rho, the longest trajectories;
    DB's state flow), and of its sub-runs, ``seeds`` for each of the 8 configurations
    (:data:`~gflownet_measure.experiments.memory.SUB_RUN_BYTES`)."""
    space, seeds = dataclasses.replace(settings.space, rho=min(r for _, _, r in CONFIGS)), settings.seeds
    tables = (SUB_RUN_BYTES * len(CONFIGS) * seeds, f"seeds={seeds}")
    _require_memory(space, settings.training.batch_size, settings.evaluation.eval_samples, _networks(space, True), tables)


register(
    Experiment(
        "quarter-disc-figure1",
        "the 8 quarter-disc configurations (loss x P_B x rho) over seeds: Figures 1(b, c) and 2",
        FIGURE1_SETTINGS,
        FIGURE1_PRESETS,
        run_figure1,
        validate_figure1,
        multi_run=True,
        settings_type=Figure1Run,
    )
)
