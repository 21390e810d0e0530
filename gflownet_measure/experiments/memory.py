"""A memory estimate before a run allocates anything: a setting whose batch, model, evaluation or table cannot fit is a
one-line error naming it, before the run folder is written, not a machine that swaps for an hour or a process killed
without a word by the kernel's out-of-memory killer after training.

A run's phases come one after another, each with a peak of its own, and each is estimated from the settings that drive
it (:func:`require_phases`): one update (``batch_size``: the batch and its graph for the backward pass), the model
(``hidden``: its parameters, their gradients and Adam's two moments, held for the whole run), the evaluations (the
sample counts: the samples kept, the policy scored on all their transitions at once, the KDE's distance matrices, the
baselines' particles) and a table's sub-runs (``seeds``, ``datasets``: the list of their settings and the metrics each
returns). Each must fit in the available memory on its own; the largest that does not is the error, naming its setting
with its value (``eval_samples=1000000000 needs about ... GiB ...; lower it``).

Each per-item constant is the peak resident memory per item measured on this project's 2-core machines (``/usr/bin/time
-f %M`` on runs of a few updates, or of ``steps=1`` for an evaluation, at two sizes of the setting; the difference
divided by the items), without the fixed cost of the interpreter and torch (about 0.4 GB). They are estimates, not
bounds: the refusal is for settings that exceed the available memory, and a setting within it can still run out beside
other work. The constants shared by the experiments are here; each experiment's ``validate`` documents its own.
"""

from __future__ import annotations

import os

from .settings import ConfigError

__all__ = [
    "PARAMETER_BYTES",
    "SCORED_UNIT_BYTES",
    "SUB_RUN_BYTES",
    "available_bytes",
    "mlp_parameters",
    "require_memory",
    "require_phases",
    "scored_bytes",
]

PARAMETER_BYTES = 23.0
"""Bytes per trained parameter for the whole run: float32 weights, their gradients and Adam's two moments (4 x 4 bytes),
and what initialising and checkpointing them adds (measured: the hypergrid's P_F at hidden 2,048 and 8,192, 4.2 and
67.3 million parameters, one update of batch 2: 23 bytes per parameter)."""

SCORED_UNIT_BYTES = 4.0
"""Bytes per sampled trajectory, transition, unit and layer of its MLP when a batch of trajectories is scored without
gradients (:func:`~gflownet_measure.rollout.log_densities`: the policy on all their transitions at once). Measured on
the hypergrid (8 x 8, 2 layers, ``steps=1``, 50,000 and 200,000 samples): 3.6 KB per sample at hidden 128 (3.0
transitions per trajectory), 7.1 KB at hidden 512 (1.6 transitions), i.e. 4.0 bytes per transition, unit and layer and
about 0.6 KB besides. An estimate takes every trajectory at the longest length (a trained policy walks further than the
untrained one measured)."""

SUB_RUN_BYTES = 10e3
"""Bytes per sub-run that a table holds from start to end: its :class:`~gflownet_measure.experiments.common.SubRun`
(folder, seed, flat settings), the metrics it returns (read back from its ``metrics.json``) and its history row
(measured: the mle-diffusion-table's settings and 60 metrics per run, 20,000 and 100,000 runs: 9.7 KB per run)."""


def available_bytes() -> int:
    """The memory the kernel could hand out now without swapping (``MemAvailable``), else the physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def require_memory(estimate: float, setting: str) -> None:
    """Raise a :class:`~gflownet_measure.experiments.settings.ConfigError` naming ``setting`` when ``estimate`` bytes exceed the available memory."""
    free = available_bytes()
    if estimate > free:
        raise ConfigError(
            f"{setting} needs about {estimate / 2**30:,.1f} GiB of memory at its peak (estimated), and {free / 2**30:,.1f} GiB is available; lower it"
        )


def require_phases(*phases: tuple[float, str]) -> None:
    """:func:`require_memory` of a run's phases, each ``(estimated bytes, the setting that drives it, e.g. "eval_samples=10000")``:
    the phases come one after another, so each must fit on its own, and the error names the largest."""
    estimate, setting = max(phases, key=lambda phase: phase[0])
    require_memory(estimate, setting)


def mlp_parameters(n_in: int, hidden: int, n_layers: int, n_out: int) -> int:
    """The parameters of :func:`~gflownet_measure.networks.mlp` (``n_layers`` Linear blocks of width ``hidden``, then a linear head of ``n_out``)."""
    if n_layers == 0:
        return (n_in + 1) * n_out
    return (n_in + 1) * hidden + (n_layers - 1) * (hidden + 1) * hidden + (hidden + 1) * n_out


def scored_bytes(hidden: int, n_layers: int, transitions: int) -> float:
    """Bytes per trajectory of ``transitions`` steps scored without gradients by an MLP policy of ``n_layers`` blocks of width ``hidden`` (:data:`SCORED_UNIT_BYTES`)."""
    return SCORED_UNIT_BYTES * hidden * max(1, n_layers) * transitions
