"""`gflownet-measure run sde-table`: a paper's table of SDE samplers, every row over seeds, beside the paper's values.

Two suites (``suite=``), one mechanism (:class:`Suite`):

- ``lahlou2023``: Lahlou et al. 2023, Table 2 / C.1, on the 9-Gaussian mixture and the funnel (σ0 = 1): the bias of
  the log Z estimates, :math:`B = \\hat{\\log Z} - \\log Z` for the lower bound (the mean of the log-weights) and
  :math:`B_{RW}` for the importance-weighted estimate (their log-mean-exp), over 10 runs in the paper, with the
  annealed-SMC and AIS-HMC baselines beside the GFlowNet rows.
- ``sendera2024``: Sendera et al. 2024, Table 1, on the 25-Gaussian grid, the 10-D funnel (σ0 = 3) and the 32-D
  many-well: :math:`\\Delta\\log Z = \\log Z - \\hat{\\log Z}` and :math:`\\Delta\\log Z^{RW}` from K = 2,000
  trajectories, over 5 runs in the paper, for trajectory balance and VarGrad with exploration, the Langevin
  parametrisation (LP) and replay-buffer local search (LS). The paper's values carried are the best amortised value of
  each column, in the row it comes from (docs/references.md, 'Diffusion-sampler benchmark'). ``targets=lgcp`` adds the
  1,600-D log-Gaussian Cox process, whose log Z is unknown: its columns are the estimates themselves (log Ẑ), as Table 1's.

Each cell's runs are sub-runs of :func:`gflownet_measure.experiments.sde.run` in ``out/<target>/<row>/seed<k>``
(finished ones kept on resume); a run that diverges is counted, as the papers' "unstable", not averaged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np
import torch

from gflownet_measure.baselines.smc import annealed_smc
from gflownet_measure.environments.sde_targets import TARGETS
from gflownet_measure.options import check_options, option, settings_of
from gflownet_measure.training import TrainingDiverged, seeded_generator

from . import sde
from .common import ExecutionConfig, SubRun, run_many
from .memory import SUB_RUN_BYTES, require_phases
from .registry import Experiment, RunContext, register
from .settings import ConfigError, build, flatten
from .tables import write_table

Cell = tuple[float, float | None] | None  # a paper value: (mean, std), std None where the paper gives none


@dataclass(frozen=True)
class Column:
    """A log Z column: its name (the metric's prefix) and how it is read from a run, ``sign * (estimate - log Z)``, or the
    estimate itself where the target's log Z is unknown (``lgcp``: Sendera et al. 2024 report log Ẑ there)."""

    name: str
    estimate: str  # the run's metric: log_Z_lower_bound or log_Z_importance_weighted
    sign: float

    def value(self, estimate: float, log_Z: float | None) -> float:
        return estimate if log_Z is None else self.sign * (estimate - log_Z)

    def label(self, target: str) -> str:
        """The column's name for ``target``: the estimate's own (``log_Z_lower_bound``, ...) where its log Z is unknown."""
        return self.estimate if TARGETS[target].log_Z is None else self.name


@dataclass(frozen=True)
class Row:
    """One configuration: its label and the settings of :mod:`~gflownet_measure.experiments.sde` that make it (those
    it leaves out take their defaults, so no row inherits another's)."""

    label: str
    settings: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Suite:
    """A paper's table: its rows and default targets, its two columns, the paper's values per target and row (a row
    the library does not run, e.g. DDS, is printed with the paper's value only), the paper's runs per cell, and the
    sampling baselines (annealed SMC with MALA moves, AIS with HMC moves) with their options per target."""

    source: str
    rows: tuple[Row, ...]
    targets: tuple[str, ...]
    columns: tuple[Column, Column]
    paper: dict[str, dict[str, tuple[Cell, Cell]]]
    paper_runs: int
    note: str = ""
    baselines: dict[str, dict] = field(default_factory=dict)


_BIAS = (Column("B", "log_Z_lower_bound", 1.0), Column("B_RW", "log_Z_importance_weighted", 1.0))
_DELTA = (Column("delta_log_Z", "log_Z_lower_bound", -1.0), Column("delta_log_Z_RW", "log_Z_importance_weighted", -1.0))
_LP = {"langevin": True, "langevin_clip": 100.0}  # gfn-diffusion's lgv_clip

SUITES = {
    "lahlou2023": Suite(
        "Lahlou et al. 2023, Table 2 / C.1",
        (
            Row("off-policy GFlowNet TB", {"objective": "tb", "regime": "off"}),
            Row("off-policy reverse KL (IW)", {"objective": "reverse_kl", "regime": "off"}),
            Row("off-policy forward KL (IW)", {"objective": "forward_kl", "regime": "off"}),
            Row("on-policy GFlowNet TB", {"objective": "tb", "regime": "on"}),
            Row("on-policy reverse KL", {"objective": "reverse_kl", "regime": "on"}),
            Row("on-policy forward KL (IW)", {"objective": "forward_kl", "regime": "on"}),
            Row("PIS-NN (not black-box)", {"objective": "reverse_kl", "regime": "on", "langevin": True}),
        ),
        ("gmm9", "funnel"),
        _BIAS,
        {  # (B, B_RW) as (mean, std) over 10 runs; None = "unstable" or not reported
            "gmm9": {
                "off-policy GFlowNet TB": ((-0.150, 0.019), (-0.003, 0.011)),
                "off-policy reverse KL (IW)": ((-1.706, 0.537), (-1.609, 0.546)),
                "off-policy forward KL (IW)": ((-0.306, 0.036), (-0.001, 0.013)),
                "on-policy GFlowNet TB": ((-1.409, 0.427), (-1.301, 0.434)),
                "on-policy reverse KL": ((-1.348, 0.397), (-1.237, 0.413)),
                "on-policy forward KL (IW)": ((-0.254, 0.032), (-0.007, 0.023)),
                "SMC": ((-0.362, 0.293), None),
                "PIS-NN (not black-box)": ((-1.691, 0.370), (-1.192, 0.482)),
                "HMC": ((-1.876, 0.527), None),
            },
            "funnel": {
                "off-policy GFlowNet TB": ((-0.219, 0.020), (-0.026, 0.020)),
                "off-policy reverse KL (IW)": (None, None),
                "off-policy forward KL (IW)": ((-2.822, 0.576), (-0.087, 0.081)),
                "on-policy GFlowNet TB": ((-0.265, 0.026), (-0.012, 0.108)),
                "on-policy reverse KL": ((-0.259, 0.018), (-0.040, 0.023)),
                "on-policy forward KL (IW)": ((-1.384, 0.284), (-0.034, 0.143)),
                "SMC": ((-0.216, 0.157), None),
                "PIS-NN (not black-box)": ((-0.098, 0.005), (-0.018, 0.020)),
                "HMC": ((-0.835, 0.257), None),
            },
        },
        10,
        # the reference covers the mixture; MALA needs 5 moves on the funnel
        baselines={"gmm9": {"ref_std": 5.0}, "funnel": {"ref_std": 1.0, "n_moves": 5}},
    ),
    "sendera2024": Suite(
        "Sendera et al. 2024, Table 1",
        (
            Row("TB + expl.", {"objective": "tb", "regime": "off"}),
            Row("TB + expl. + LS", {"objective": "tb", "regime": "off", "local_search": True}),
            Row("TB + expl. + LP", {"objective": "tb", "regime": "off"} | _LP),
            Row("TB + expl. + LP + LS", {"objective": "tb", "regime": "off", "local_search": True} | _LP),
            Row("VarGrad + expl. + LP + LS", {"objective": "vargrad", "regime": "off", "local_search": True} | _LP),
        ),
        ("gmm25", "hard_funnel", "many_well"),
        _DELTA,
        {  # the best amortised value of each column (Δlog Z^RW without its std), in the row it comes from
            "gmm25": {"TB + expl. + LS": ((0.171, 0.013), (0.004, None))},
            "hard_funnel": {"TB + expl. + LP": (None, (0.051, None)), "DDS": ((0.424, 0.049), None)},
            "many_well": {"VarGrad + expl. + LP + LS": (None, (0.02, None)), "PIS": ((3.85, 0.03), None)},
            "lgcp": {"DDS": ((471.64, None), (489.30, None))},  # log Ẑ and log Ẑ^RW themselves: log Z is unknown
        },
        5,
        note="paper: only the best amortised value of each column, in the row it comes from; 25,000 iterations there",
    ),
}
_ROW_KEYS = sorted({key for suite in SUITES.values() for row in suite.rows for key in row.settings} | {"target"})


@dataclass(frozen=True)
class Baselines:
    """The sampling baselines' budget (annealed SMC with MALA moves, AIS with HMC moves), in the suites that have them."""

    smc_particles: int = option(2000, "particles of the SMC and HMC baselines (suites that have them)", low=10)
    smc_temps: int = option(100, "temperatures of the SMC and HMC baselines", low=1)

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class SDETableRun:
    """The settings of ``run sde-table``: those its runs share (``runs``: a :class:`~gflownet_measure.experiments.sde.SDERun`
    whose row settings, the keys of :data:`_ROW_KEYS`, are not the table's and keep their defaults there: each row sets its
    own), how the runs train (``execution``), the baselines' budget, and which suite, seeds, targets and rows."""

    runs: sde.SDERun
    execution: ExecutionConfig
    baselines: Baselines
    suite: str = option("lahlou2023", "which paper's table: its rows, targets, columns and values", choices=tuple(SUITES))
    seeds: int = option(3, "seeds per row and target: --seed, --seed + 1, ...", low=1)
    targets: str = option("", f"comma-separated targets (empty: the suite's); valid: {', '.join(TARGETS)}")
    rows: str = option("all", "which rows: all, or comma-separated indices into the suite's rows (0-based)")

    def __post_init__(self):
        check_options(self)


_OWN = settings_of(SDETableRun)
SETTINGS = (
    {k: v for k, v in sde.SETTINGS.items() if k not in _ROW_KEYS}
    | {k: _OWN[k] for k in ("suite", "seeds")}
    | settings_of(ExecutionConfig)
    | {k: _OWN[k] for k in ("targets", "rows")}
    | settings_of(Baselines)
)
PRESETS: dict[str, dict] = {
    "quick": sde.SHORT | {"steps": 100, "n_steps": 50, "eval_every": 50, "seeds": 1, "targets": "gmm9", "rows": "0,3", "smc_particles": 500},
    "paper": sde.PRESETS["paper"] | {"seeds": 10},
    # Table 1's targets, rows and 5 runs at 800 batches of 300 (sde.SHORT), T = 100, K = 2,000
    "sendera2024": sde.SHORT | {"suite": "sendera2024", "seeds": 5, "eval_samples": 0},
}


def _targets(settings: SDETableRun) -> list[str]:
    names = settings.targets.split(",") if settings.targets else list(SUITES[settings.suite].targets)
    bad = [t for t in names if t not in TARGETS]
    if bad:
        raise ConfigError(f"targets={settings.targets!r}: unknown {', '.join(bad)}; valid: {', '.join(TARGETS)}")
    return names


def _rows(settings: SDETableRun) -> list[Row]:
    rows, spec = SUITES[settings.suite].rows, settings.rows
    if spec == "all":
        return list(rows)
    try:
        idx = [int(i) for i in spec.split(",")]
    except ValueError:
        raise ConfigError(f"rows={spec!r}: valid: all, or comma-separated indices 0-{len(rows) - 1}") from None
    if any(not 0 <= i < len(rows) for i in idx):
        raise ConfigError(f"rows={spec!r}: suite {settings.suite} has rows 0-{len(rows) - 1}: " + "; ".join(f"{i} {r.label}" for i, r in enumerate(rows)))
    return [rows[i] for i in idx]


def _run_settings(settings: SDETableRun, row: Row, target: str) -> dict:
    """The flat settings of one sub-run (its ``config.json``): the table's common settings, the row's, the defaults of
    what the row leaves out, in the order the table has always written them (the row keys first)."""
    common = flatten(settings.runs)
    shared = {k: common[k] for k in sde.SETTINGS}  # the run's declared settings (not TrainingConfig's lr_flow, epsilon)
    return {k: shared[k] for k in _ROW_KEYS} | shared | row.settings | {"target": target}


SMC_PARTICLE_BYTES = (1000.0, 40.0)
"""Bytes per particle of the SMC and HMC baselines, fixed and per coordinate of the target: positions, gradients,
weights and the target's intermediates (measured with :func:`~gflownet_measure.baselines.smc.annealed_smc` at 100,000
and 1,000,000 particles, 3 temperatures: 0.98 KB per particle on gmm9, d = 2, with MALA and HMC moves; 1.29 and
1.35 KB on the funnel, d = 10)."""


def validate(settings: SDETableRun) -> None:
    """Each row's run (:func:`~gflownet_measure.experiments.sde.validate`, on every target), and the memory of the
    table's own phases (:func:`~gflownet_measure.experiments.memory.require_phases`): the baselines'
    ``smc_particles`` (:data:`SMC_PARTICLE_BYTES`, on the largest target that has them) and the sub-runs, one per
    target, row and seed (:data:`~gflownet_measure.experiments.memory.SUB_RUN_BYTES`)."""
    targets, rows = _targets(settings), _rows(settings)
    for target in dict.fromkeys(targets):
        for row in rows:
            sde.validate(build(sde.SDERun, _run_settings(settings, row, target)))
    particles, seeds = settings.baselines.smc_particles, settings.seeds
    dims = [TARGETS[t].dim for t in targets if t in SUITES[settings.suite].baselines]
    require_phases(
        (particles * (SMC_PARTICLE_BYTES[0] + SMC_PARTICLE_BYTES[1] * max(dims, default=0)) if dims else 0.0, f"smc_particles={particles}"),
        (SUB_RUN_BYTES * len(targets) * len(rows) * seeds, f"seeds={seeds}"),
    )


def _fmt(v: Cell) -> str:
    if v is None:
        return ""
    return f"{v[0]:+.3f}" + ("" if v[1] is None else f" ± {v[1]:.3f}")


def _folder(label: str) -> str:
    return re.sub(r"[^\w-]+", "_", label).strip("_")


def _mean_std(values: list[float]) -> tuple[float, float] | None:
    a = np.array(values, dtype=float)
    return None if np.isnan(a).all() else (float(a.mean()), float(a.std()))


def run(settings: SDETableRun, context: RunContext) -> dict:
    """Every requested row and target over seeds, the suite's baselines, then the table beside the paper."""
    suite, base_seed, out, seeds = SUITES[settings.suite], context.seed, context.out, settings.seeds
    rows, targets = _rows(settings), _targets(settings)
    col_a, col_b = suite.columns
    keys = [(target, row, base_seed + k) for target in targets for row in rows for k in range(seeds)]
    jobs = [
        SubRun(out / target / _folder(row.label) / f"seed{seed}", seed, _run_settings(settings, row, target), settings_type=sde.SDERun)
        for target, row, seed in keys
    ]
    execution = settings.execution
    finished = run_many(sde.run, jobs, context.resume, execution.jobs, diverged_ok=True, executor=execution.executor, address=execution.address)
    cells: dict[str, dict[str, list[tuple[float, float, float]]]] = {t: {} for t in targets}  # (column a, column b, s/step)
    diverged: dict[tuple[str, str], int] = {}
    history: list[dict] = []
    for (target, row, seed), m in zip(keys, finished):
        entry = {"step": len(history) + 1, "trajectories": 0, "target": target, "row": row.label, "seed": seed}
        cells[target].setdefault(row.label, [])
        if "diverged" in m:
            diverged[target, row.label] = diverged.get((target, row.label), 0) + 1
            history.append(entry | {"diverged": m["diverged"]})
            continue
        a, b = col_a.value(m[col_a.estimate], m.get("log_Z_exact")), col_b.value(m[col_b.estimate], m.get("log_Z_exact"))
        cells[target][row.label].append((a, b, m["seconds_per_step"]))
        history.append(entry | {col_a.label(target): a, col_b.label(target): b})
    for target in targets:
        for name, move, threshold in (("SMC", "mala", 0.5), ("HMC", "hmc", 0.0)) if target in suite.baselines else ():
            for k in range(seeds):  # HMC: annealed importance sampling with HMC moves (no resampling)
                torch.manual_seed(base_seed + k)
                opts = dict(suite.baselines[target]) | ({"n_moves": 1} if move == "hmc" else {})
                r = annealed_smc(
                    TARGETS[target].log_prob,
                    TARGETS[target].dim,
                    settings.baselines.smc_particles,
                    settings.baselines.smc_temps,
                    move=move,
                    ess_threshold=threshold,
                    generator=seeded_generator(base_seed + k),
                    **opts,
                )
                cells[target].setdefault(name, []).append((col_a.value(r.log_Z, TARGETS[target].log_Z), float("nan"), float("nan")))
    metrics: dict[str, float] = {}
    lines: list[str] = []
    plural = "s" if seeds != 1 else ""
    for target in targets:
        lines += [
            f"\n{target}: {suite.source} (ours: mean ± std over {seeds} seed{plural}; paper: {suite.paper_runs} runs){'; ' + suite.note if suite.note else ''}",
            f"{'row':<30} {col_a.label(target) + ' (ours)':>16} {col_a.label(target) + ' (paper)':>18} {col_b.label(target) + ' (ours)':>18} {col_b.label(target) + ' (paper)':>20} {'s/step':>7}",
        ]
        paper = suite.paper.get(target, {})
        for label, vals in cells[target].items():
            ref = paper.get(label, (None, None))
            n_div = diverged.get((target, label), 0)
            note = f"  ({n_div} of {n_div + len(vals)} seeds diverged)" if n_div else ""
            if n_div:
                metrics[f"diverged/{target}/{label}"] = n_div
            if not vals:
                lines.append(f"{label:<30} {'diverged':>16} {_fmt(ref[0]) or 'unstable':>18} {'diverged':>18} {_fmt(ref[1]) or 'unstable':>20}{note}")
                continue
            ours = [_mean_std([v[i] for v in vals]) for i in range(3)]
            for column, value in zip((col_a.label(target), col_b.label(target), "seconds_per_step"), ours):
                if value is not None:
                    metrics[f"{column}/{target}/{label}/mean"], metrics[f"{column}/{target}/{label}/std"] = value
            step = "" if ours[2] is None else f"{ours[2][0]:.3f}"
            lines.append(f"{label:<30} {_fmt(ours[0]):>16} {_fmt(ref[0]):>18} {_fmt(ours[1]):>18} {_fmt(ref[1]):>20} {step:>7}{note}")
        for label, ref in paper.items():
            if label not in cells[target] and label not in {r.label for r in suite.rows} | {"SMC", "HMC"}:
                lines.append(f"{label + ' (not run here)':<30} {'':>16} {_fmt(ref[0]):>18} {'':>18} {_fmt(ref[1]):>20}")
    first = next((job.out for job, m in zip(jobs, finished) if "diverged" not in m), None)  # the first run with samples
    write_table(out, "\n".join(lines).strip() + "\n", history, first, ("samples.png",))
    if first is None:
        raise TrainingDiverged(f"every run of the table diverged (see {out / 'table.txt'}); no samples to keep")
    return metrics | {"seeds": seeds}


register(
    Experiment(
        "sde-table",
        "a paper's table of SDE samplers over seeds beside its values: Lahlou et al. 2023 Table 2 / C.1 (B, B_RW; SMC, HMC) or Sendera et al. 2024 Table 1 (Δlog Z, Δlog Z^RW; LP, LS, VarGrad)",
        SETTINGS,
        PRESETS,
        run,
        validate,
        multi_run=True,
        settings_type=SDETableRun,
    )
)
