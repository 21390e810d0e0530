"""Experiments: presets, runners, plots and the `gflownet-measure` command line."""

from . import hypergrid, jsp_gfn, mle_diffusion, quarter_disc, sde, sde_table, torus  # noqa: F401  (registers the experiments)
from .registry import EXPERIMENTS, Experiment, get_experiment

__all__ = ["EXPERIMENTS", "Experiment", "get_experiment"]
