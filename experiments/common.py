"""Settings and helpers shared by every training experiment (one mechanism, parametrised)."""
from __future__ import annotations

import torch

from gflownet_measure.config import Setting

__all__ = ["TRAINING_SETTINGS", "make_scheduler"]

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
