"""The GPU path: every registered space samples, scores and trains on CUDA without CPU-only code (skipped without a GPU).

Run by ``benchmarks/gpu_check.sh`` (``pytest -m device``) on a machine with a GPU. For each environment at its default
settings, and JSP-GFN's solver head (linear with its Newton step and the lookahead, MLP with conjugate gradients) beside it: trajectories sampled with the untrained policies on CUDA stay on CUDA, their log-densities under P_F and P_B
are finite and match the same trajectories scored on the CPU (float32 on two devices: relative 1e-4, the size of
reordered float sums over a few hundred terms), and a TB loss backpropagates to every policy parameter on the GPU.
"""
import pytest
import torch

from gflownet_measure.environments import ENVIRONMENTS
from gflownet_measure.experiments.settings import build, resolve
from gflownet_measure.rollout import log_densities, sample_forward
from gflownet_measure.training import use_device
from gflownet_measure.trajectories import Trajectories

pytestmark = [pytest.mark.device, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")]


# JSP-GFN's solver head runs its own solver on the GPU: Newton through the linear model's precision, CG through the MLP's
# Gauss-Newton products (gflownet_measure/jsp_gfn/dag_params/solver.py)
VARIANTS = [(name, {}) for name in sorted(ENVIRONMENTS)] + [
    ("dag-params", {"theta_head": "solver", "lookahead": "on"}),
    ("dag-params", {"theta_head": "solver", "model": "mlp", "solver_steps": 3}),
]


def _space(name: str, settings: dict):
    spec = ENVIRONMENTS[name]
    config = build(spec.config, resolve(spec.settings, settings))
    torch.manual_seed(0)
    graph = spec.make_graph(config)
    return (graph, *spec.make_policies(graph, config))


@pytest.mark.parametrize("name, settings", VARIANTS, ids=[f"{n}{''.join(f'-{v}' for v in s.values())}" for n, s in VARIANTS])
def test_space_samples_and_trains_on_cuda(name, settings):
    _, cpu_pf, cpu_pb = _space(name, settings)  # the reference, with the same weights
    use_device("cuda")
    try:
        graph, pf, pb = _space(name, settings)
        pf.load_state_dict(cpu_pf.state_dict())
        pb.load_state_dict(cpu_pb.state_dict())
        traj = sample_forward(graph, pf, 16)
        assert traj.states.device.type == "cuda"
        log_pf, log_pb = log_densities(traj, pf, pb)
        assert torch.isfinite(log_pf[traj.mask]).all() and torch.isfinite(log_pb[traj.mask]).all()
        loss = ((log_pf * traj.mask).sum(0) - (log_pb * traj.mask).sum(0) - traj.log_R).square().mean()
        loss.backward()
        assert all(p.grad is not None and p.grad.device.type == "cuda" for p in pf.parameters() if p.requires_grad)
    finally:
        use_device("cpu")
    ref_pf, ref_pb = log_densities(Trajectories(traj.states.cpu(), traj.sink.cpu(), traj.log_R.cpu()), cpu_pf, cpu_pb)
    torch.testing.assert_close(log_pf.detach().cpu(), ref_pf.detach(), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(log_pb.detach().cpu(), ref_pb.detach(), rtol=1e-4, atol=1e-4)
