"""Settings and helpers shared by every training experiment (one mechanism, parametrised)."""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from gflownet_measure.config import Setting
from gflownet_measure.graph import PointedGraph
from gflownet_measure.metrics import log_weights, log_z_bounds
from gflownet_measure.objectives import OBJECTIVES, GFlowNet
from gflownet_measure.rollout import log_densities, sample_forward
from gflownet_measure.training import Trainer, make_optimizer
from gflownet_measure.trajectories import Trajectories

__all__ = ["TRAINING_SETTINGS", "make_scheduler", "train_gflownet", "final_samples"]

TRAINING_SETTINGS = {
    "steps": Setting(3000, "gradient updates", low=1),
    "batch_size": Setting(32, "trajectories per update", low=1),
    "lr": Setting(1e-3, "Adam learning rate of the policies", low=0.0),
    "lr_logZ": Setting(1e-1, "Adam learning rate of log Z", low=0.0),
    "lr_flow": Setting(1e-3, "Adam learning rate of the state flow log F (db, subtb)", low=0.0),
    "lr_milestone": Setting(0, "multiply every learning rate by lr_gamma each lr_milestone updates (0 = constant)", low=0),
    "lr_gamma": Setting(0.5, "learning-rate decay factor at each milestone", low=0.0, high=1.0),
    "grad_clip": Setting(10.0, "max global gradient norm (0 = off)", low=0.0),
    "eval_every": Setting(100, "updates between evaluations", low=1),
}


def make_scheduler(optimizer: torch.optim.Optimizer, cfg: dict):
    """``MultiStepLR`` at every multiple of ``lr_milestone`` (all groups, log Z included), or ``None``."""
    if cfg["lr_milestone"] == 0:
        return None
    milestones = list(range(cfg["lr_milestone"], cfg["steps"], cfg["lr_milestone"]))
    return torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones, gamma=cfg["lr_gamma"])


def train_gflownet(gfn: GFlowNet, graph: PointedGraph, cfg: dict, out: Path, resume: bool, evaluate: Callable[[], dict], lam: float = 0.9) -> list[dict]:
    """Train ``gfn`` with ``OBJECTIVES[cfg["loss"]]`` on fresh batches of ``cfg["batch_size"]`` trajectories
    (``cfg["epsilon"]``-uniform exploration), with the shared optimiser, schedule, clipping and checkpoints."""
    optimizer = make_optimizer(gfn, cfg["lr"], cfg["lr_logZ"], cfg["lr_flow"])
    objective = OBJECTIVES[cfg["loss"]]

    def step_fn(step: int):
        return objective(gfn, graph, sample_forward(graph, gfn.pf, cfg["batch_size"], cfg["epsilon"]), lam)

    trainer = Trainer(gfn, optimizer, make_scheduler(optimizer, cfg), step_fn, evaluate, out, cfg["steps"], cfg["eval_every"], cfg["batch_size"], cfg["grad_clip"])
    return trainer.run(resume)


def final_samples(graph: PointedGraph, gfn: GFlowNet, n: int) -> tuple[Trajectories, float, float]:
    """``n`` on-policy trajectories and the two log Z estimates from them: (mean w, log-mean-exp w)."""
    with torch.no_grad():
        traj = sample_forward(graph, gfn.pf, n)
        w = log_weights(traj.log_R, *log_densities(traj, gfn.pf, gfn.pb), traj.mask)
    return (traj, *log_z_bounds(w))
