"""The shared learning-rate schedule (gflownet_measure.experiments.common.make_scheduler): every group, log Z included, decays together."""
import pytest
import torch

from gflownet_measure.experiments.common import make_scheduler
from gflownet_measure.experiments.training_config import TrainingConfig


def test_every_group_decays_by_gamma_at_each_milestone():
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in range(3)]
    opt = torch.optim.Adam([{"params": [params[0]], "lr": 1e-3}, {"params": [params[1]], "lr": 1e-1}, {"params": [params[2]], "lr": 1e-2}])
    sched = make_scheduler(opt, TrainingConfig(lr_milestone=2, lr_gamma=0.5, steps=7))
    for step in range(1, 8):
        opt.step()
        sched.step()
        k = min(step // 2, 3)  # milestones at 2, 4, 6 (none at or after steps = 7)
        assert [g["lr"] for g in opt.param_groups] == pytest.approx([1e-3 * 0.5**k, 1e-1 * 0.5**k, 1e-2 * 0.5**k])


def test_no_milestone_is_no_schedule():
    opt = torch.optim.Adam([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    assert make_scheduler(opt, TrainingConfig(lr_milestone=0, lr_gamma=0.5, steps=7)) is None
