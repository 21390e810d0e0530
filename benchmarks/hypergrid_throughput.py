"""Hypergrid throughput on CPU: rollout trajectories per second, and loss evaluations (forward + backward) per second.

usage: python benchmarks/hypergrid_throughput.py [--height 8] [--ndim 2] [--batch 64] [--repeats 20] [--threads 1]

Figures are printed, never asserted. Each figure is also given as a ratio to TB in the same run,
which is what to compare across machines (these are shared and noisy).
"""
from __future__ import annotations

import argparse
import time

import torch

from gflownet_measure.environments import hypergrid as env
from gflownet_measure.networks import StateFlow
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet, objective_names
from gflownet_measure.rollout import sample_forward


def _best_of(fn, repeats: int) -> float:
    """The fastest of ``repeats`` timings (seconds): the least disturbed by other load on the machine."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--height", type=int, default=8)
    p.add_argument("--ndim", type=int, default=2)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cfg = env.HypergridConfig(height=a.height, ndim=a.ndim, backward="learned")
    graph = env.make_graph(cfg)
    pf, pb = env.make_policies(graph, cfg)
    gfn = GFlowNet(pf, pb, StateFlow(graph.encode, a.height * a.ndim))
    print(f"hypergrid H={a.height} D={a.ndim}, batch {a.batch}, torch {torch.__version__}, {torch.get_num_threads()} thread(s), best of {a.repeats}")
    t_roll = _best_of(lambda: sample_forward(graph, pf, a.batch, 0.1), a.repeats)
    print(f"rollout: {a.batch / t_roll:10.0f} trajectories/s  ({t_roll * 1e3:.2f} ms per batch)")
    batch = Batch(graph, sample_forward(graph, pf, a.batch, 0.1))
    rates = {}
    for name in objective_names(divergence=False):  # the divergences need scored batches
        objective = OBJECTIVES[name]

        def step():
            gfn.zero_grad()
            objective(gfn, batch).backward()

        rates[name] = a.batch / _best_of(step, a.repeats)
    for name, rate in rates.items():
        print(f"loss {name:>5}: {rate:10.0f} trajectories/s (loss + gradient)  {rate / rates['tb']:.2f} x TB")


if __name__ == "__main__":
    main()
