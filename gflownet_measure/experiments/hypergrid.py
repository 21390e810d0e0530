"""`gflownet-measure run hypergrid`: every objective on the discrete hypergrid, exact L1 to the target.

``samples.npz``: ``x [K, D]`` int64, the grid coordinates of ``eval_samples`` terminal states drawn from the trained
policy (no exploration).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from gflownet_measure.environments import hypergrid as env
from gflownet_measure.exact import enumerate_states, terminating_distribution
from gflownet_measure.metrics import l1_distance
from gflownet_measure.networks import StateFlow
from gflownet_measure.objectives import GFlowNet, get_objective, objective_names
from gflownet_measure.options import check_options, option, settings_of
from gflownet_measure.run_files import write_file

from .common import configure, final_samples, learned_log_Z, train_gflownet
from .environment import make_environment
from .memory import PARAMETER_BYTES, mlp_parameters, require_phases, scored_bytes
from .plots import plot_grid_pair, plot_history
from .registry import Experiment, RunContext, register
from .training_config import TrainingConfig, training_settings


@dataclass(frozen=True)
class HypergridRun:
    """The settings of ``run hypergrid``: the grid and its policies (:class:`~gflownet_measure.environments.hypergrid.HypergridConfig`),
    the training (:class:`~gflownet_measure.experiments.training_config.TrainingConfig`), and the experiment's own."""

    space: env.HypergridConfig
    training: TrainingConfig
    objective: str = option("tb", "training objective (gflownet_measure.objectives)", choices=objective_names(divergence=False), aliases=("loss",))
    subtb_lambda: float = option(0.9, "SubTB weight lambda^(j-i)", low=0.0)
    eval_samples: int = option(10000, "terminal samples saved and used for the log Z bounds", low=1)

    def __post_init__(self):
        check_options(self)


SETTINGS = {**env.SETTINGS, **training_settings(without=("lr_backward",), epsilon=0.1), **settings_of(HypergridRun)}

PRESETS: dict[str, dict[str, Any]] = {
    # 8 x 8: a lower L1 than 3,000 updates of 32 at lr 1e-3, in about half the time (docs/results.md, section 1: 'The quick preset')
    "quick": {"height": 8, "ndim": 2, "steps": 1500, "batch_size": 64, "lr": 2e-3},
    "paper": {"height": 8, "ndim": 4, "steps": 20000, "batch_size": 16, "hidden": 256, "eval_every": 500},  # Malkin et al. 2022 (TB paper), 4-D hypergrid
}


def run(settings: HypergridRun, context: RunContext) -> dict:
    space = settings.space
    _, graph, pf, pb = make_environment("hypergrid", space)
    objective = configure(get_objective(settings.objective), settings)
    log_F = StateFlow(graph.encode, space.ndim * space.height, space.hidden, space.n_layers) if objective.needs_flow else None
    gfn = GFlowNet(pf, pb, log_F)
    states = enumerate_states(graph)
    log_R = graph.log_reward(states).double()
    target = torch.softmax(log_R, 0)
    log_Z_exact = float(torch.logsumexp(log_R, 0))

    def evaluate() -> dict:
        return {"l1_to_target": l1_distance(terminating_distribution(graph, pf, states), target)} | learned_log_Z(objective, gfn, graph)

    history = train_gflownet(gfn, graph, objective, settings.training, context, evaluate)
    traj, lower, iw = final_samples(graph, gfn, settings.eval_samples)
    write_file(context.out / "samples.npz", lambda f: np.savez(f, x=traj.terminal.cpu().numpy().astype(np.int64)))
    p_T = terminating_distribution(graph, pf, states)
    l1 = l1_distance(p_T, target)
    plot_history(history, "l1_to_target", context.out / "l1_to_target.png", f"hypergrid {space.ndim}-D, H={space.height}, {settings.objective}")
    if space.ndim == 2:
        shape = (space.height, space.height)
        plot_grid_pair(
            target.reshape(shape).cpu().numpy(),
            p_T.reshape(shape).cpu().numpy(),
            context.out / "distribution.png",
            f"{settings.objective}, P_B {space.backward}: L1 = {l1:.3f}",
        )
    return {
        "l1_to_target": l1,
        "log_Z_exact": log_Z_exact,
        **{f"{k}_learned": v for k, v in learned_log_Z(objective, gfn, graph).items()},
        "log_Z_lower_bound": lower,
        "log_Z_importance_weighted": iw,
        "seconds": history[-1]["seconds"],
        "steps": settings.training.steps,
        "trajectories": history[-1]["trajectories"],  # every replica's, in a data-parallel run
    }


def validate(settings: HypergridRun) -> None:
    """The memory of each phase (:func:`~gflownet_measure.experiments.memory.require_phases`; the grid's size is checked
    when the settings are built):

    - one update: about 2.4 bytes per trajectory, step of the longest trajectory, unit and layer of the MLP (measured at
      8 x 8, hidden 128, 2 layers: 9.9 KB per trajectory);
    - the model: P_F's MLP, a learned P_B's and a state flow's (:data:`~gflownet_measure.experiments.memory.PARAMETER_BYTES`);
    - the final samples (``eval_samples``): each trajectory scored at the longest length
      (:func:`~gflownet_measure.experiments.memory.scored_bytes`) and its states kept, about 50 bytes per step (measured at
      8 x 8 and 32 x 32, hidden 128, 50,000 and 200,000 samples: 3.6 and 4.9 KB per sample, the longest trajectories 15
      and 33 steps)."""
    space, batch_size, n = settings.space, settings.training.batch_size, settings.eval_samples
    max_length = space.ndim * (space.height - 1) + 2
    layers, width = max(1, space.n_layers), space.ndim * space.height
    networks = 1 + (space.backward == "learned") + get_objective(settings.objective).needs_flow
    require_phases(
        (2.4 * batch_size * max_length * space.hidden * layers, f"batch_size={batch_size}"),
        (PARAMETER_BYTES * networks * mlp_parameters(width, space.hidden, space.n_layers, space.ndim + 1), f"hidden={space.hidden}"),
        (n * (scored_bytes(space.hidden, space.n_layers, max_length) + 50 * max_length), f"eval_samples={n}"),
    )


register(
    Experiment(
        "hypergrid",
        "discrete hypergrid with FM/DB/TB/SubTB; exact L1 between P_T and R/Z",
        SETTINGS,
        PRESETS,
        run,
        validate,
        settings_type=HypergridRun,
        evaluation_settings=("eval_samples",),
    )
)
