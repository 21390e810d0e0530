r"""Where a trained torus sampler's basin masses come from: TB's stationary point, basin by basin (issue 43).

usage: python benchmarks/basin_balance.py RUN_DIR [--samples 10000] [--seed 0]

``RUN_DIR`` is a finished or checkpointed ``gflownet-measure run torus`` folder (any target with basins; R6's basins
are its modes). Shift every trajectory that ends in basin :math:`b` by a constant :math:`c_b` in :math:`\log P_F` (a
policy can do this with its first move's mixture weights). Trajectory balance's loss
:math:`\mathbb E_{\tau \sim D}[\delta(\tau)^2]`, :math:`\delta = \log \hat Z + \log P_F(\tau) - \log R(x) - \log P_B(\tau \mid x)`
(Malkin et al. 2022, eq. 14), is stationary in every :math:`c_b` only where the training trajectories that end in
:math:`b` have a mean residual of zero, :math:`\mathbb E_D[\delta \mid b] = 0`. Write :math:`m_b` for the sampler's mass
on :math:`b`, :math:`Z_b` for the reward's, and :math:`p_b = R / Z_b` on :math:`b`. For trajectories drawn by
:math:`P_F` itself,

.. math:: \mathbb E[\delta \mid b] = \log \hat Z + \log m_b - \log Z_b + \mathrm{KL}\big(P_F(\cdot \mid b) \,\|\, p_b P_B\big),

and for terminal states drawn from a law :math:`\rho_b` on :math:`b` and walked back with :math:`P_B` (a replay buffer),

.. math:: \mathbb E[\delta \mid b] = \log \hat Z + \log m_b - \log Z_b + \mathrm{KL}(\rho_b \,\|\, p_b) - \mathrm{KL}\big(\rho_b P_B \,\|\, P_F(\cdot \mid b)\big).

So at the stationary point :math:`\log m_b = \log Z_b - \log \hat Z - \beta_b`, with :math:`\beta_b` the training mixture's
average of those KL terms in :math:`b`: the basin masses are exact only where :math:`\beta_b` is the same in every
basin. A replay that draws the highest rewards first (rank priority) makes :math:`\mathrm{KL}(\rho_b \| p_b)` large and
different from basin to basin; replay drawn uniformly from states refined by MALA (which leaves :math:`p` invariant)
keeps it near zero.

Printed, per basin: the sampler's mass beside the exact one, the forward KL above
(:math:`\log Z_b - \log m_b - \mathbb E_{P_F}[\log w \mid b]`, :math:`\log w = \log R + \log P_B - \log P_F`), and the mean
residual under each kind of training batch the run used: its exploring batches and, with ``local_search``, its replay
drawn as it was trained (the run's ``rank_weight``) and drawn uniformly, each alone and mixed half and half as training
alternates them. Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import Tensor, nn

from gflownet_measure.environments import torus as env
from gflownet_measure.experiments.common import configure
from gflownet_measure.experiments.environment import make_environment
from gflownet_measure.experiments.local_search import backward_batch
from gflownet_measure.experiments.settings import build, resolve
from gflownet_measure.experiments.torus import SETTINGS, Reference, TorusRun, make_batches
from gflownet_measure.metrics import log_weights
from gflownet_measure.objectives import GFlowNet, get_objective
from gflownet_measure.rollout import log_densities, sample_forward
from gflownet_measure.training import WeightAverage


def per_basin(region: Tensor, values: Tensor, n_basins: int) -> list[tuple[float, float]]:
    """(share of the rows in basin b, mean of ``values`` over them; nan where none) for every basin."""
    out = []
    for b in range(n_basins):
        inside = region == b
        out.append((float(inside.double().mean()), float(values[inside].mean()) if inside.any() else math.nan))
    return out


def mix(*parts: tuple[float, float]) -> tuple[float, float]:
    """(share, mean) of a basin in equal parts of batches with the given (share, mean) in it."""
    inside = [(s, m) for s, m in parts if s > 0]
    share = sum(s for s, _ in inside)
    return share / len(parts), (sum(s * m for s, m in inside) / share if share > 0 else math.nan)


@dataclass
class Balance:
    """What :func:`balance` measures: per sampler, per basin (mass, exact mass, forward KL within the basin); per kind of
    training batch, per basin (share of the batch, mean TB residual)."""

    log_Z: float
    log_Z_learned: float
    basins: list[str]
    masses: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)
    residuals: dict[str, list[tuple[float, float]]] = field(default_factory=dict)


def load_run(run_dir: Path):
    """The space, GFlowNet, target, training batches and weight average of a ``run torus`` folder, at its checkpoint."""
    config, checkpoint = run_dir / "config.json", run_dir / "checkpoint.pt"
    if not (config.is_file() and checkpoint.is_file()):
        raise ValueError(f"{run_dir} holds no run (config.json and checkpoint.pt); give the folder of a `gflownet-measure run torus`")
    saved = json.loads(config.read_text())
    if saved.get("experiment") != "torus":
        raise ValueError(f"{run_dir} is a {saved.get('experiment')!r} run; this reads `run torus` runs with space=torus")
    settings = build(TorusRun, resolve(SETTINGS, saved["settings"]))
    if settings.space != "torus":
        raise ValueError(f"{run_dir} is a run with space={settings.space!r}; this reads `run torus` runs with space=torus")
    objective = configure(get_objective(settings.objective), settings)
    if objective.log_Z is None or objective.needs_flow:
        raise ValueError(f"{run_dir} trained objective={settings.objective}; the balance is trajectory balance's: a run with objective=tb")
    space, graph, pf, pb = make_environment("torus", settings.torus)
    gfn = GFlowNet(pf, pb, None)
    target = env.target_of(space)
    training = settings.training
    batches = make_batches(gfn, graph, objective, training, target, settings.search)
    average = WeightAverage(pf, settings.ema) if settings.ema > 0 else None
    held = {"gfn": gfn} | ({"batches": batches} if batches is not None else {}) | ({"average": average} if average is not None else {})
    (gfn if len(held) == 1 else nn.ModuleDict(held)).load_state_dict(torch.load(checkpoint, weights_only=False)["model"])
    return settings, space, graph, gfn, objective, target, training, batches, average


def balance(run_dir: Path, samples: int = 10000, seed: int = 0) -> Balance:
    """The module docstring's quantities for the run in ``run_dir``, from ``samples`` trajectories of each kind."""
    settings, space, graph, gfn, objective, target, training, batches, average = load_run(run_dir)
    torch.manual_seed(seed)
    ref = Reference.build(target, settings.evaluation.eval_grid, settings.evaluation.bandwidth)
    names, exact = list(target.regions), ref.exact_masses()
    found = Balance(ref.log_Z, float(objective.log_Z(gfn, graph)), names)

    def scored(traj) -> tuple[Tensor, Tensor]:
        return traj.terminal[:, : space.n_dim], log_weights(traj.log_R, *log_densities(traj, gfn.pf, gfn.pb), traj.mask).double()

    with torch.no_grad():
        for label, policy in [("sampler (weight average)", average.module), ("last iterate", gfn.pf)] if average is not None else [("sampler", gfn.pf)]:
            traj = sample_forward(graph, policy, samples)
            log_w = log_weights(traj.log_R, *log_densities(traj, policy, gfn.pb), traj.mask).double()
            rows = per_basin(target.region_of(traj.terminal[:, : space.n_dim]), log_w, len(names))
            found.masses[label] = [
                (m, exact[f"mass_exact/{b}"], math.log(exact[f"mass_exact/{b}"]) + ref.log_Z - math.log(m) - mean if m > 0 else math.nan)
                for b, (m, mean) in zip(names, rows)
            ]
        x, log_w = scored(sample_forward(graph, gfn.pf, samples, epsilon=training.epsilon))  # the exploring batches, as objective.sample draws them
        forward = found.residuals["exploring batches"] = per_basin(target.region_of(x), found.log_Z_learned - log_w, len(names))
        if batches is not None and len(batches.refined) > 0:
            ring = batches.refined
            for label, x in (
                (f"replay (rank_weight {ring.rank_weight:g})", ring.draw(samples)),
                ("replay (uniform)", ring.x[torch.randint(len(ring), (samples,))]),
            ):
                replay = backward_batch(graph, gfn, x)
                log_w = log_weights(replay.traj.log_R, replay.scores.log_pf, replay.scores.log_pb, replay.traj.mask).double()
                rows = found.residuals[label] = per_basin(target.region_of(x), found.log_Z_learned - log_w, len(names))
                found.residuals[f"half exploring, half {label}"] = [mix(f, r) for f, r in zip(forward, rows)]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--samples", type=int, default=10000, help="trajectories per kind of batch")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        found = balance(args.run_dir, args.samples, args.seed)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"{args.run_dir}: log Z exact {found.log_Z:.4f}, learned {found.log_Z_learned:.4f}")
    for label, rows in found.masses.items():
        print(f"\n{label}: basin, mass (exact), forward KL within the basin")
        for name, (m, e, kl) in zip(found.basins, rows):
            print(f"  {name:14s} {m:.4f} ({e:.4f})  {kl:.4f}")
    print("\nmean TB residual per basin (share of the batch in brackets); stationary where equal in every basin")
    for label, rows in found.residuals.items():
        print(f"  {label:45s} " + "  ".join(f"{n} {r:+.3f} ({s:.3f})" for n, (s, r) in zip(found.basins, rows) if s > 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
