"""Experiments registered by name: settings, presets, a check of the resolved settings, and a run function writing the run-folder contract."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gflownet_measure.options import Setting, lookup

from .settings import ConfigError

__all__ = ["Experiment", "EXPERIMENTS", "register", "get_experiment"]


def _accept(cfg: dict) -> None:
    """The default check: the settings' own types and ranges (:func:`~gflownet_measure.experiments.settings.resolve`) are all there is."""


@dataclass(frozen=True)
class Experiment:
    """``run(cfg, out_dir, resume)`` writes config.json, history.jsonl, samples.npz, checkpoint.pt, PNGs, then metrics.json last.

    ``validate(cfg)`` raises :class:`~gflownet_measure.experiments.settings.ConfigError` for settings that are each in range but do not
    go together, inputs that cannot be read, or a batch that cannot fit in memory; the command line calls it before it
    touches the run folder, so a bad setting never costs a finished run. ``multi_run``: the run trains sub-runs in
    sub-folders (their checkpoints are there, not in ``out``).
    """

    name: str
    description: str
    settings: dict[str, Setting]
    presets: dict[str, dict]
    run: Callable[[dict, Path, bool], dict]
    validate: Callable[[dict], None] = _accept
    multi_run: bool = False


EXPERIMENTS: dict[str, Experiment] = {}


def register(exp: Experiment) -> Experiment:
    EXPERIMENTS[exp.name] = exp
    return exp


def get_experiment(name: str) -> Experiment:
    try:
        return lookup(EXPERIMENTS, name, "experiment")
    except ValueError as e:
        raise ConfigError(str(e)) from None
