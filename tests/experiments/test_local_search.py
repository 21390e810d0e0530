"""Replay-buffer local search on the torus (gflownet_measure.experiments.local_search): MALA on the unrolled angles, folded
back onto the torus, leaves a periodic target invariant; the batches alternate the policy's trajectories with refined
buffered states walked back to s0; a run with it writes the contract."""
import json
import math

import pytest
import torch
from scipy import stats

from conftest import check_contract
from gflownet_measure.experiments.cli import main
from gflownet_measure.metrics import ks_distance

pytestmark = pytest.mark.usefixtures("one_thread")

TINY = ["steps=4", "eval_every=2", "eval_samples=100", "batch_size=16", "hidden=16", "n_layers=1", "n_steps=2", "eval_grid=24", "paper_samples=50"]


@pytest.mark.parametrize("adjusted", [True, False])
def test_mala_on_the_unrolled_circle_leaves_a_von_mises_invariant(monkeypatch, adjusted):
    """20,000 chains started from exact draws of von Mises(3.0, 2) (mode near the cut at pi, so many chains cross it) stay
    exact after 30 adapted MALA moves on the unrolled angle, folded back onto [0, 2 pi): the KS distance to the exact CDF
    stays below 1.63 / sqrt(n), the 1% point of Kolmogorov's law (seeded). Without the Metropolis-Hastings correction
    (every proposal accepted: the unadjusted Langevin algorithm, same steps) the same test fails, so it has the power to
    see a kernel that is not invariant on the torus."""
    from gflownet_measure.baselines import smc

    loc, kappa, n = 3.0, 2.0, 20000
    gen = torch.Generator().manual_seed(3)
    x = torch.from_numpy(stats.vonmises.rvs(kappa, loc=loc, size=n, random_state=11) % (2 * math.pi))[:, None]
    if not adjusted:
        monkeypatch.setattr(smc, "_accept", lambda log_alpha, lt_y, generator: torch.ones_like(log_alpha, dtype=torch.bool))
    r = smc.mala_chain(lambda z: kappa * torch.cos(z[:, 0] - loc), x, 30, step_size=1.0, adapt=adjusted, generator=gen)
    y = torch.remainder(r.x[:, 0], 2 * math.pi)
    assert bool(((r.x[:, 0] < 0) | (r.x[:, 0] >= 2 * math.pi)).any())  # chains cross the cut
    cdf = lambda t: torch.from_numpy(stats.vonmises.cdf(t.numpy(), kappa, loc=loc) - stats.vonmises.cdf(0.0, kappa, loc=loc))  # noqa: E731
    ks = ks_distance(y, cdf)
    assert (ks < 1.63 / math.sqrt(n)) == adjusted, ks
    if adjusted:
        assert 0.3 < r.acceptance < 0.9


def test_torus_local_search_alternates_and_wraps():
    """Even steps: the policy's trajectories (terminal angles kept, float64); odd steps: buffered states refined by MALA
    on log R, wrapped into [0, 2 pi) and walked back with P_B to s0; both buffers are in the checkpoint's state."""
    from gflownet_measure.experiments import torus as experiment
    from gflownet_measure.experiments.environment import make_environment
    from gflownet_measure.experiments.local_search import LocalSearchBatches, LocalSearchConfig
    from gflownet_measure.experiments.settings import build, resolve
    from gflownet_measure.experiments.training_config import TrainingConfig
    from gflownet_measure.objectives import GFlowNet, get_objective

    torch.manual_seed(0)
    cfg = resolve(experiment.SETTINGS, dict(s.split("=") for s in TINY) | {"local_search": "true", "ls_every": "4", "ls_moves": "20", "ls_step": "2.0"})
    space, graph, pf, pb = make_environment("torus", build(experiment.env.TorusConfig, cfg))
    gfn, objective = GFlowNet(pf, pb), get_objective("tb")
    target = experiment.env.target_of(space)
    batches = experiment.make_batches(gfn, graph, objective, build(TrainingConfig, cfg), target, build(LocalSearchConfig, cfg))
    assert isinstance(batches, LocalSearchBatches)
    b0 = batches(0)
    assert len(batches.visited) == 16 and batches.visited.x.dtype == torch.float64
    assert torch.equal(batches.visited.x[:16], b0.traj.terminal[:, :-1])
    b1 = batches(1)
    assert len(batches.refined) == 16
    x1 = b1.traj.terminal[:, :-1]
    assert bool(((x1 >= 0) & (x1 < 2 * math.pi)).all())  # large steps cross the cut; the fold brings them back
    assert all(bool((batches.refined.x[:16] == row).all(1).any()) for row in x1)
    assert torch.equal(b1.traj.states[0], torch.zeros_like(b1.traj.states[0]))
    assert torch.allclose(b1.traj.log_R, target.log_reward(x1))
    assert {"visited.x", "refined.x", "refined.count"} <= set(batches.state_dict())


@pytest.mark.parametrize("space", ["torus", "hybrid"])
def test_run_with_local_search_writes_the_contract(space, tmp_path):
    out = tmp_path / space
    args = ["run", "torus", "--out", str(out), "--threads", "1", "--set", *TINY, f"space={space}", "local_search=true", "ls_every=2", "ls_moves=3"]
    assert main(args) == 0
    check_contract(out)
    config = json.loads((out / "config.json").read_text())
    assert config["settings"]["local_search"] is True
