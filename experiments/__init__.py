"""Experiments: presets, runners, plots and the `gflownet-measure` command line."""
from . import hypergrid  # noqa: F401  (registers the experiment)
from .registry import EXPERIMENTS, Experiment, get_experiment

__all__ = ["EXPERIMENTS", "Experiment", "get_experiment"]
