"""A space of one's own whose reward misbehaves in training (JSP-GFN-independent; `run MODULE:FACTORY`): a NaN met
mid-training, R = 0 on part of the support (and the ``reward_floor`` that trains it), a state the policy made
non-finite, and an out-of-memory error without a message: each one line, the exit code the README promises.

The space is test_check_user_space's one-step Beta space (s0 -> [1, y], y in [0, 1], R(y) = y (1 - y)), with its
reward cut as each test says.
"""

import dataclasses
import json
import math
import re

import pytest
import torch
from test_check_user_space import BETA

from gflownet_measure.contract_error import ContractError
from gflownet_measure.experiments import cli
from gflownet_measure.experiments.cli import main

REWARD = "log_reward=lambda x: power * (x[:, 1].log() + (-x[:, 1]).log1p())"
assert REWARD in BETA
# R = 0 for y < 1/2: log Z = log of the integral of y (1 - y) over [1/2, 1] = log(1/12)
ZERO = BETA.replace(REWARD, "log_reward=lambda x: torch.where(x[:, 1] < 0.5, -torch.inf, power * (x[:, 1].log() + (-x[:, 1]).log1p()))")
# NaN for y > 0.97: met within the first updates of 64 trajectories, rarely by the trial rollout of 2
NAN = BETA.replace(REWARD, "log_reward=lambda x: torch.where(x[:, 1] > 0.97, torch.nan, power * (x[:, 1].log() + (-x[:, 1]).log1p()))")
BUDGET = ["--threads", "1", "--set", "steps=300", "batch_size=64", "eval_every=100", "eval_samples=2000"]


def _space(tmp_path, monkeypatch, name: str, source: str) -> str:
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    return f"{name}.py:make_graph"


def _one_line(capsys) -> str:
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("gflownet-measure")]
    assert len(err) == 1, err
    return err[0]


@pytest.mark.slow
def test_zero_reward_stops_with_one_line_and_trains_with_a_floor(tmp_path, monkeypatch, capsys):
    space = _space(tmp_path, monkeypatch, "space_zero", ZERO)
    assert main(["run", space, "--out", "bare", *BUDGET]) == 1
    line = _one_line(capsys)
    assert re.search(r"log R is -inf \(R = 0\) at the terminal state x=\[1\.0, 0\.\d+", line) and "reward_floor" in line, line
    assert (tmp_path / "bare" / "checkpoint.pt").exists() and not (tmp_path / "bare" / "metrics.json").exists()
    assert main(["run", space, "--out", "floored", *BUDGET[:-1], "eval_samples=2000", "reward_floor=1e-6"]) == 0
    m = json.loads((tmp_path / "floored" / "metrics.json").read_text())
    # the importance-weighted log Z scores the true R (zero below 1/2) and is consistent whatever the policy; the
    # floor adds at most 1e-6 / 2 of mass. 0.05: the Beta head cannot represent the cut at 1/2, so the 2,000 weights
    # vary (a relative standard error of a few percent measured on this run)
    assert abs(m["log_Z_importance_weighted"] - math.log(1 / 12)) < 0.05, m
    assert m["log_Z_lower_bound"] == -math.inf or m["log_Z_lower_bound"] <= m["log_Z_importance_weighted"]


@pytest.mark.slow
def test_a_nan_reward_met_in_training_is_one_line_naming_the_state(tmp_path, monkeypatch, capsys):
    space = _space(tmp_path, monkeypatch, "space_nan", NAN)
    code = main(["run", space, "--out", "r", "--seed", "0", *BUDGET])
    line = _one_line(capsys)
    # the trial rollout may meet it (exit 2, before the folder) or training does (exit 1, the checkpoint kept): a
    # function of --seed either way, never a traceback
    assert re.search(r"log_reward is nan at x=\[1\.0, 0\.9[7-9]\d*", line), line
    assert (code == 1 and "(met at step" in line and (tmp_path / "r" / "checkpoint.pt").exists()) or (code == 2 and not (tmp_path / "r").exists())
    torch.manual_seed(12345)  # another global random state: the same command gives the same answer (--seed seeds the trial)
    assert main(["run", space, "--out", "r2", "--seed", "0", *BUDGET]) == code
    assert _one_line(capsys).removesuffix("r2") == line.removesuffix("r")


def _beta_graph():
    space: dict = {}
    exec(BETA, space)
    return space["make_graph"]()[0]


def test_a_non_finite_state_is_blamed_on_what_made_it_not_on_the_reward():
    graph = _beta_graph()
    with pytest.raises(ContractError, match=r"a terminal state is non-finite, x=\[1\.0, nan\].*the policy or a kernel chart produced it"):
        graph.checked_log_reward(torch.tensor([[1.0, 0.5], [1.0, math.nan]]))
    nan = dataclasses.replace(graph, log_reward=lambda x: torch.full((len(x),), math.nan))
    with pytest.raises(ContractError, match=r"log_reward is nan at x=\[1\.0, 0\.5\]"):
        nan.checked_log_reward(torch.tensor([[1.0, 0.5]]))


def test_a_reward_floor_raises_log_r_to_it_and_must_be_positive():
    graph = _beta_graph()
    zero = dataclasses.replace(graph, log_reward=lambda x: torch.where(x[:, 1] < 0.5, -torch.inf, x[:, 1].log()))
    x = torch.tensor([[1.0, 0.25], [1.0, 0.75]])
    torch.testing.assert_close(zero.with_reward_floor(1e-6).checked_log_reward(x), torch.tensor([math.log(1e-6), math.log(0.75)]))  # float32
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="floor must be finite and > 0"):
            graph.with_reward_floor(bad)


def test_out_of_memory_without_a_message_is_one_line_with_exit_2(monkeypatch, capsys):
    def oom(args):
        raise MemoryError()

    monkeypatch.setattr(cli, "cmd_run", oom)
    assert main(["run", "hypergrid"]) == 2
    assert _one_line(capsys) == "gflownet-measure: error: out of memory (MemoryError); lower the batch size or the number of samples (batch_size, eval_samples, theta_samples, --samples)"
