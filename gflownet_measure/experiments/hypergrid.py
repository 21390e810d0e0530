"""`gflownet-measure run hypergrid`: every objective on the discrete hypergrid, exact L1 to the target.

``samples.npz``: ``x [K, D]`` int64, the grid coordinates of ``eval_samples`` terminal states drawn from the trained
policy (no exploration).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from gflownet_measure.environments import hypergrid as env
from gflownet_measure.exact import enumerate_states, terminating_distribution
from gflownet_measure.metrics import l1_distance
from gflownet_measure.networks import StateFlow
from gflownet_measure.objectives import GFlowNet, get_objective, objective_names
from gflownet_measure.options import Setting
from gflownet_measure.run_files import write_file

from .common import configure, final_samples, learned_log_Z, run_id, train_gflownet
from .environment import make_environment
from .memory import require_memory
from .plots import plot_grid_pair, plot_history
from .registry import Experiment, register
from .settings import build
from .training_config import TrainingConfig, training_settings

SETTINGS = {
    **env.SETTINGS,
    **training_settings(without=("lr_backward",), epsilon=0.1),
    "objective": Setting("tb", "training objective (gflownet_measure.objectives)", choices=objective_names(divergence=False), aliases=("loss",)),
    "subtb_lambda": Setting(0.9, "SubTB weight lambda^(j-i)", low=0.0),
    "eval_samples": Setting(10000, "terminal samples saved and used for the log Z bounds", low=1),
}

PRESETS = {
    # 8 x 8: a lower L1 than 3,000 updates of 32 at lr 1e-3, in about half the time (docs/results.md, section 1: 'The quick preset')
    "quick": {"height": 8, "ndim": 2, "steps": 1500, "batch_size": 64, "lr": 2e-3},
    "paper": {"height": 8, "ndim": 4, "steps": 20000, "batch_size": 16, "hidden": 256, "eval_every": 500},  # Malkin et al. 2022 (TB paper), 4-D hypergrid
}


def run(cfg: dict, out: Path, resume: bool) -> dict:
    space, graph, pf, pb = make_environment("hypergrid", cfg)
    objective = configure(get_objective(cfg["objective"]), cfg)
    log_F = StateFlow(graph.encode, space.ndim * space.height, space.hidden, space.n_layers) if objective.needs_flow else None
    gfn = GFlowNet(pf, pb, log_F)
    states = enumerate_states(graph)
    log_R = graph.log_reward(states).double()
    target = torch.softmax(log_R, 0)
    log_Z_exact = float(torch.logsumexp(log_R, 0))

    def evaluate() -> dict:
        return {"l1_to_target": l1_distance(terminating_distribution(graph, pf, states), target)} | learned_log_Z(objective, gfn, graph)

    history = train_gflownet(gfn, graph, objective, build(TrainingConfig, cfg), run_id(cfg), out, resume, evaluate)
    traj, lower, iw = final_samples(graph, gfn, cfg["eval_samples"])
    write_file(out / "samples.npz", lambda f: np.savez(f, x=traj.terminal.cpu().numpy().astype(np.int64)))
    p_T = terminating_distribution(graph, pf, states)
    l1 = l1_distance(p_T, target)
    plot_history(history, "l1_to_target", out / "l1_to_target.png", f"hypergrid {cfg['ndim']}-D, H={cfg['height']}, {cfg['objective']}")
    if cfg["ndim"] == 2:
        shape = (cfg["height"], cfg["height"])
        plot_grid_pair(
            target.reshape(shape).cpu().numpy(),
            p_T.reshape(shape).cpu().numpy(),
            out / "distribution.png",
            f"{cfg['objective']}, P_B {cfg['backward']}: L1 = {l1:.3f}",
        )
    return {
        "l1_to_target": l1,
        "log_Z_exact": log_Z_exact,
        **{f"{k}_learned": v for k, v in learned_log_Z(objective, gfn, graph).items()},
        "log_Z_lower_bound": lower,
        "log_Z_importance_weighted": iw,
        "seconds": history[-1]["seconds"],
        "steps": cfg["steps"],
        "trajectories": history[-1]["trajectories"],  # every replica's, in a data-parallel run
    }


def validate(cfg: dict) -> None:
    """The grid's size, and the memory of one update: about 2.4 bytes per trajectory, step of the longest trajectory,
    unit and layer of the MLP (measured at 8 x 8, hidden 128, 2 layers: 9.9 KB per trajectory)."""
    build(env.HypergridConfig, cfg)  # the grid's size
    max_length = cfg["ndim"] * (cfg["height"] - 1) + 2
    require_memory(2.4 * cfg["batch_size"] * max_length * cfg["hidden"] * max(1, cfg["n_layers"]), f"batch_size={cfg['batch_size']}")


register(Experiment("hypergrid", "discrete hypergrid with FM/DB/TB/SubTB; exact L1 between P_T and R/Z", SETTINGS, PRESETS, run, validate))
