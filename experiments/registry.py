"""Experiments registered by name: settings, presets and a run function writing the run-folder contract."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from gflownet_measure.config import ConfigError, Setting

__all__ = ["Experiment", "EXPERIMENTS", "register", "get_experiment"]


@dataclass(frozen=True)
class Experiment:
    """``run(cfg, out_dir, resume)`` writes config.json, history.jsonl, samples.npz, checkpoint.pt, PNGs, then metrics.json last."""

    name: str
    description: str
    settings: dict[str, Setting]
    presets: dict[str, dict]
    run: Callable[[dict, Path, bool], dict]


EXPERIMENTS: dict[str, Experiment] = {}


def register(exp: Experiment) -> Experiment:
    EXPERIMENTS[exp.name] = exp
    return exp


def get_experiment(name: str) -> Experiment:
    if name not in EXPERIMENTS:
        raise ConfigError(f"unknown experiment {name!r}; valid: {', '.join(sorted(EXPERIMENTS))}")
    return EXPERIMENTS[name]
