"""`gflownet-measure run sde` and `sde-table`: SDE samplers on R^n (Lahlou et al. 2023, section 4.2, Table 2 / C.1).

One run trains the Euler-Maruyama policy of :mod:`gflownet_measure.environments.sde` towards a target with one objective
and regime (docs/references.md, 'SDE targets and Table 2'):

- ``objective=tb``: trajectory balance with a learned log Z;
- ``objective=reverse_kl``: KL(P_F || P*), path-wise (reparametrised) on-policy, importance-weighted
  score function off-policy;
- ``objective=forward_kl``: KL(P* || P_F) by self-normalised importance weights of on- or off-policy
  trajectories, or ``regime=target``: exact target samples walked back with P_B (maximum likelihood);
- ``regime=off``: trajectories from the policy with extra variance :math:`\\epsilon^2` per step in x
  (:math:`\\epsilon` = ``exploration``, annealed linearly to 0 over training; the ``exploration_factor`` of github.com/GFNOrg/gfn-diffusion);
  log P_F is still scored under the policy itself.

Metrics: ``log_Z_lower_bound`` (B: mean of w) and ``log_Z_importance_weighted`` (B_RW: log-mean-exp of w)
over ``eval_samples`` on-policy trajectories, w = log R + sum log P_B - sum log P_F; the bias is the
estimate minus the exact log Z (Lahlou et al. 2023's B and B_RW), and ``delta_log_Z`` / ``delta_log_Z_RW`` the exact
log Z minus the estimate (Sendera et al. 2024's Δlog Z and Δlog Z^RW). Of the samples (:func:`sample_metrics`): the KS
distance of the first coordinate to its exact marginal, the samples per mode (mixtures), the mass per well (many-well).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
from torch import nn

from gflownet_measure.baselines.smc import annealed_smc, mala_chain
from gflownet_measure.environments import sde as env
from gflownet_measure.environments.sde_targets import TARGETS
from gflownet_measure.graph import PointedGraph
from gflownet_measure.metrics import ks_distance, log_weights, log_z_bounds
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet, get_objective, objective_names
from gflownet_measure.options import Setting
from gflownet_measure.rollout import Scores, log_densities, sample_backward, sample_forward
from gflownet_measure.training import TrainingDiverged, seeded_generator

from .common import EXECUTION_SETTINGS, SubRun, configure, learned_log_Z, run_id, run_many, train_gflownet
from .environment import make_environment
from .memory import require_memory
from .plots import optional_figure, plot_history, plot_sample_panels
from .registry import Experiment, register
from .settings import ConfigError, build
from .tables import write_table
from .training_config import TrainingConfig, training_settings

SETTINGS = {
    **env.SETTINGS,
    **training_settings(without=("lr_flow", "lr_backward", "epsilon")),  # no state flow; P_B fixed; batches of its own (exploration)
    "objective": Setting(
        "tb",
        "training objective (gflownet_measure.objectives; those without a state flow)",
        choices=tuple(n for n in objective_names(continuous=True) if not OBJECTIVES[n].needs_flow),
    ),
    "regime": Setting(
        "off",
        "on: the policy's own trajectories; off: with exploration noise; target: exact samples walked back with P_B (forward_kl, tb)",
        choices=("on", "off", "target"),
    ),
    "exploration": Setting(0.1, "off-policy: extra variance exploration^2 per step in x, annealed linearly to 0 over training", low=0.0),
    "eval_samples": Setting(0, "trajectories for the log Z estimates (0 = the paper's K: 2000 for gmm9, 6000 for funnel, 2000 for the others)", low=0),
    "local_search": Setting(
        False,
        "replay-buffer local search (Sendera et al. 2024): every other batch is buffered terminal states refined by MALA, walked back with P_B",
        choices=(True, False),
    ),
    "ls_every": Setting(100, "local search: refine a batch of buffered states by MALA every this many steps (gfn-diffusion's ls_cycle)", low=1),
    "ls_moves": Setting(200, "local search: MALA moves per refinement (gfn-diffusion's max_iter_ls)", low=1),
    "ls_step": Setting(0.1, "local search: initial MALA step eps^2/2 (gfn-diffusion's ld_step), adapted towards acceptance 0.574", low=1e-8),
    "buffer_size": Setting(60000, "local search: capacity of each replay buffer (forward terminal states; refined states)", low=1),
    "rank_weight": Setting(0.01, "local search: rank-prioritised replay, P(i) proportional to 1 / (rank_weight N + rank_i) (gfn-diffusion's)", low=1e-8),
}

_PAPER = {"steps": 1500, "batch_size": 300, "lr": 1e-2, "lr_logZ": 1e-1, "eval_every": 100}
PRESETS = {
    # the paper's T = 100 for 800 batches, off-policy TB covering the 9 modes (docs/results.md, section 3: 'Quick preset: off-policy TB')
    "quick": _PAPER | {"steps": 800, "eval_every": 200, "eval_samples": 1000},
    "paper": _PAPER,  # Lahlou et al. 2023, Table 2: 1,500 batches of 300, lr 1e-2 (policy) and 1e-1 (log Z), T = 100
}
PAPER_K = {"gmm9": 2000, "funnel": 6000, "gmm25": 2000, "hard_funnel": 2000, "many_well": 2000}  # Sendera et al. 2024: K = 2,000


def _validate(cfg: dict) -> None:
    """Settings that do not go together, and the memory of one update: about 3.6 KB per trajectory and time step at
    width 64 (measured at T = 50: 182 KB per trajectory), taken as proportional to the width."""
    if cfg["regime"] == "target" and get_objective(cfg["objective"]).pathwise:
        raise ConfigError(
            f"regime=target (exact samples walked back with P_B) does not apply to objective={cfg['objective']}, whose on-policy gradient flows through the samples; valid: on, off"
        )
    if cfg.get("local_search") and (get_objective(cfg["objective"]).pathwise or cfg["regime"] == "target"):
        raise ConfigError(
            f"local_search=true trains on buffered states walked back with P_B: it needs an objective without path-wise gradients and regime on or off, got objective={cfg['objective']} regime={cfg['regime']}; valid objectives: tb, vargrad, forward_kl"
        )
    require_memory(3.6e3 * cfg["batch_size"] * cfg["n_steps"] * cfg["hidden"] / 64, f"batch_size={cfg['batch_size']}")


def make_gflownet(cfg: dict) -> tuple[PointedGraph, GFlowNet]:
    """The graph and a fresh GFlowNet (P_F, the Brownian-bridge P_B, log Z = 0) for ``cfg``."""
    _validate(cfg)
    _, graph, pf, pb = make_environment("sde", cfg)
    return graph, GFlowNet(pf, pb)


def _backward_batch(graph: PointedGraph, gfn: GFlowNet, x: torch.Tensor) -> Batch:
    """Terminal states ``x [B, n]`` walked back to s0 with P_B, scored so that :math:`q = R P_B` (for exact target samples
    the weights are uniform and log Z = 0)."""
    s = torch.cat([x, torch.full((len(x), 1), float(graph.max_length - 1), dtype=x.dtype)], 1)
    traj = sample_backward(graph, gfn.pb, s)
    log_pf, log_pb = log_densities(traj, gfn.pf, gfn.pb)
    log_q = log_pb.detach().clone()
    last = traj.length - 1
    log_q[last, torch.arange(len(last))] += traj.log_R  # the step into the sink carries log R: sum_t log q = log R + sum_t log P_B
    return Batch(graph, traj, Scores(log_pf, log_pb, log_q))


def _target_batch(graph: PointedGraph, gfn: GFlowNet, cfg: dict) -> Batch:
    """Exact target samples walked back to s0 with P_B (:func:`_backward_batch`)."""
    return _backward_batch(graph, gfn, TARGETS[cfg["target"]].sample(cfg["batch_size"]))


class StateRing(nn.Module):
    """A FIFO ring of at most ``capacity`` terminal states with their log-rewards, drawn with rank-based priority
    :math:`P(i) \\propto 1 / (k N + \\mathrm{rank}_i)` (rank 0 the highest log R, ``k`` = ``rank_weight``; gfn-diffusion's
    ``prioritized="rank"``). Its tensors are module buffers, so a run's checkpoint holds them."""

    def __init__(self, capacity: int, dim: int, rank_weight: float):
        super().__init__()
        self.rank_weight = rank_weight
        self.register_buffer("x", torch.zeros(capacity, dim))
        self.register_buffer("log_R", torch.zeros(capacity))
        self.register_buffer("count", torch.zeros((), dtype=torch.long))  # states ever added

    def __len__(self) -> int:
        return min(int(self.count), len(self.x))

    def add(self, x: torch.Tensor, log_R: torch.Tensor) -> None:
        idx = (int(self.count) + torch.arange(len(x))) % len(self.x)
        self.x[idx], self.log_R[idx] = x.detach().to(self.x.dtype), log_R.detach().to(self.log_R.dtype)
        self.count += len(x)

    def draw(self, n: int) -> torch.Tensor:
        size = len(self)
        rank = torch.argsort(torch.argsort(self.log_R[:size], descending=True))
        idx = torch.multinomial(1.0 / (self.rank_weight * size + rank.double()), n, replacement=True)
        return self.x[idx]


class LocalSearchBatches(nn.Module):
    """Training batches with replay-buffer local search (Sendera et al. 2024, section 3; gfn-diffusion's ``--both_ways
    --local_search``): even steps draw ``B`` trajectories from the (exploring) policy and keep their terminal states;
    odd steps train on ``B`` refined states walked back with P_B (:func:`_backward_batch`). Every ``ls_every`` steps
    ``B`` buffered states are refined by ``ls_moves`` MALA moves on log R (:func:`gflownet_measure.baselines.smc.mala_chain`, which leaves
    R/Z invariant) into a second buffer, from which the odd steps draw. gfn-diffusion keeps every accepted state after a
    burn-in of each chain; this keeps each chain's last state."""

    def __init__(self, gfn: GFlowNet, graph: PointedGraph, cfg: dict):
        super().__init__()
        self.cfg, self.graph, self.objective = cfg, graph, get_objective(cfg["objective"])
        self.gfn = [gfn]  # not a submodule: the checkpoint holds the GFlowNet on its own
        dim = TARGETS[cfg["target"]].dim
        self.visited, self.refined = StateRing(cfg["buffer_size"], dim, cfg["rank_weight"]), StateRing(cfg["buffer_size"], dim, cfg["rank_weight"])

    def forward(self, step: int) -> Batch:
        gfn, cfg, B = self.gfn[0], self.cfg, self.cfg["batch_size"]
        if step % 2 == 0 or len(self.visited) == 0:
            batch = self.objective.sample(self.graph, gfn, B, noise=exploration_noise(cfg, step))
            self.visited.add(batch.traj.terminal[:, :-1], batch.traj.log_R)
            return batch
        if step % cfg["ls_every"] < 2 or len(self.refined) == 0:
            r = mala_chain(TARGETS[cfg["target"]].log_prob, self.visited.draw(B), cfg["ls_moves"], math.sqrt(2 * cfg["ls_step"]))
            self.refined.add(r.x, r.log_target)
        return _backward_batch(self.graph, gfn, self.refined.draw(B))


def exploration_noise(cfg: dict, step: int) -> float:
    """Extra variance of the off-policy steps in chart units: :math:`\\epsilon_k^2 / c^2 = \\epsilon_k^2 T / \\sigma^2`, :math:`\\epsilon_k = \\epsilon \\max(0, 1 - k/K)`.

    In x the step variance becomes :math:`\\sigma^2 \\Delta t + \\epsilon_k^2` (as in gfn-diffusion; docs/references.md,
    'SDE targets and Table 2'). The
    alternative reading :math:`\\sigma^2 \\Delta t + \\epsilon_k^2 / T` adds 0.2% to the variance of a step at the
    paper's settings, and off-policy TB then collapses as on-policy TB does (3 of the mixture's 9 modes).
    """
    if cfg["regime"] != "off":
        return 0.0
    eps = cfg["exploration"] * max(0.0, 1.0 - step / cfg["steps"])
    return eps**2 * cfg["n_steps"] / env.sigma_of(build(env.SDEConfig, cfg)) ** 2


def make_batches(gfn: GFlowNet, graph: PointedGraph, cfg: dict):
    """``step -> batch`` of one training iteration: ``batch_size`` fresh trajectories, all stepping together, drawn as the
    objective needs them (:meth:`~gflownet_measure.objectives.Objective.sample`: reparametrised on-policy for the
    path-wise reverse KL, else without gradients and scored by one batched call of each policy), with the regime's
    exploration noise; or, ``regime=target``, exact target samples walked back with P_B; or, ``local_search``, those
    batches alternating with refined buffered states (:class:`LocalSearchBatches`)."""
    objective = get_objective(cfg["objective"])
    if cfg["local_search"]:
        return LocalSearchBatches(gfn, graph, cfg)

    def batches(step: int) -> Batch:
        if cfg["regime"] == "target":
            return _target_batch(graph, gfn, cfg)
        return objective.sample(graph, gfn, cfg["batch_size"], noise=exploration_noise(cfg, step))

    return batches


def evaluate_bounds(gfn: GFlowNet, graph: PointedGraph, K: int, chunk: int = 2000) -> dict:
    """B (mean of w) and B_RW (log-mean-exp of w) from ``K`` on-policy trajectories, and their terminal states ``samples [K, n]``."""
    ws, xs = [], []
    with torch.no_grad():
        for k in range(0, K, chunk):
            traj = sample_forward(graph, gfn.pf, min(chunk, K - k))
            ws.append(log_weights(traj.log_R, *log_densities(traj, gfn.pf, gfn.pb), traj.mask))
            xs.append(traj.terminal[:, :-1])
    w = torch.cat(ws)
    lower, iw = log_z_bounds(w)
    return {"log_Z_lower_bound": lower, "log_Z_importance_weighted": iw, "samples": torch.cat(xs)}


@optional_figure
def _figure(target_name: str, x: np.ndarray, path: Path, title: str) -> None:
    """Figure C.1: samples of the first two coordinates over the exact density of their marginal (the whole density in
    2-D, the funnel's (x0, x1), many-well's first pair), beside as many exact samples."""
    target = TARGETS[target_name]
    lim = target.limits
    g = torch.linspace(*lim, 200, dtype=torch.float64)
    dens = target.log_marginal01(torch.cartesian_prod(g, g)).exp()
    ref = target.sample(len(x), seeded_generator(0)).cpu().numpy()
    plot_sample_panels(dens.reshape(200, 200).cpu().numpy(), (*lim, *lim), {"exact samples": ref[:, :2], "learned samples": x[:, :2]}, path, title)


def sample_metrics(target_name: str, x: torch.Tensor) -> dict:
    """Distances of the samples ``x [K, n]`` to the target: ``ks_x0``, the KS distance of the first coordinate to its exact
    marginal (for the funnels :math:`\\mathcal N(0, \\sigma_0^2)`: the neck); the samples per mode (mixtures); the mass in
    the right well of each pair beside the exact one (many-well)."""
    target = TARGETS[target_name]
    out = {"ks_x0": ks_distance(x[:, 0], target.cdf0)}
    if hasattr(target, "mode_counts"):
        counts = target.mode_counts(x)
        out |= {f"mode_count/{i}": int(c) for i, c in enumerate(counts)} | {"modes_covered": int((counts > 0).sum())}
    if hasattr(target, "well_mass"):
        mass = target.well_mass(x)
        out |= {"right_well_mass_exact": target.right_mass(), "right_well_mass_max_error": float((mass - target.right_mass()).abs().max())}
        out |= {f"right_well_mass/{i}": float(m) for i, m in enumerate(mass)}
    return out


def run(cfg: dict, out: Path, resume: bool) -> dict:
    graph, gfn = make_gflownet(cfg)
    objective = configure(get_objective(cfg["objective"]), cfg)
    K = cfg["eval_samples"] or PAPER_K[cfg["target"]]

    def evaluate() -> dict:
        b = evaluate_bounds(gfn, graph, min(K, 1000))
        return {"log_Z_lower_bound": b["log_Z_lower_bound"], "log_Z_importance_weighted": b["log_Z_importance_weighted"]} | learned_log_Z(objective, gfn, graph)

    history = train_gflownet(gfn, graph, objective, build(TrainingConfig, cfg), run_id(cfg), out, resume, evaluate, make_batches(gfn, graph, cfg))
    final = evaluate_bounds(gfn, graph, K)
    x = final.pop("samples").cpu().numpy()
    np.savez(out / "samples.npz", x=x)
    target = TARGETS[cfg["target"]]
    label = f"{cfg['target']}, {cfg['objective']}, {cfg['regime']}-policy" + (" + LP" if cfg["langevin"] else "") + (" + LS" if cfg["local_search"] else "")
    plot_history(history, "log_Z_importance_weighted", out / "log_z.png", f"B_RW during training ({label})", log_y=False)
    _figure(cfg["target"], x, out / "samples.png", label)
    metrics = final | {
        "log_Z_exact": target.log_Z,
        "bias_lower_bound": final["log_Z_lower_bound"] - target.log_Z,
        "bias_importance_weighted": final["log_Z_importance_weighted"] - target.log_Z,
        "delta_log_Z": target.log_Z - final["log_Z_lower_bound"],
        "delta_log_Z_RW": target.log_Z - final["log_Z_importance_weighted"],
        **{f"{k}_learned": v for k, v in learned_log_Z(objective, gfn, graph).items()},
        "eval_samples": K,
        "seconds": history[-1]["seconds"],
        "seconds_per_step": history[-1]["seconds"] / cfg["steps"],  # evaluations included
        "steps": cfg["steps"],
    }
    return metrics | sample_metrics(cfg["target"], torch.as_tensor(x))


register(
    Experiment(
        "sde",
        "SDE sampler on R^n (9- and 25-Gaussian mixtures, 10-D funnels, 32-D many-well): TB / reverse KL / forward KL, on- or off-policy; log Z bounds",
        SETTINGS,
        PRESETS,
        run,
        _validate,
    )
)

# --- Table 2 / C.1: every row over seeds, beside the paper --------------------------------------------------

ROWS = [  # (label, objective, regime, langevin)
    ("off-policy GFlowNet TB", "tb", "off", False),
    ("off-policy reverse KL (IW)", "reverse_kl", "off", False),
    ("off-policy forward KL (IW)", "forward_kl", "off", False),
    ("on-policy GFlowNet TB", "tb", "on", False),
    ("on-policy reverse KL", "reverse_kl", "on", False),
    ("on-policy forward KL (IW)", "forward_kl", "on", False),
    ("PIS-NN (not black-box)", "reverse_kl", "on", True),
]
PAPER_TABLE = {  # Lahlou et al. 2023, Table 2 / C.1: (B, B_RW) as (mean, std) over 10 runs; None = "unstable" or not reported
    "gmm9": {
        "off-policy GFlowNet TB": ((-0.150, 0.019), (-0.003, 0.011)),
        "off-policy reverse KL (IW)": ((-1.706, 0.537), (-1.609, 0.546)),
        "off-policy forward KL (IW)": ((-0.306, 0.036), (-0.001, 0.013)),
        "on-policy GFlowNet TB": ((-1.409, 0.427), (-1.301, 0.434)),
        "on-policy reverse KL": ((-1.348, 0.397), (-1.237, 0.413)),
        "on-policy forward KL (IW)": ((-0.254, 0.032), (-0.007, 0.023)),
        "SMC": ((-0.362, 0.293), None),
        "PIS-NN (not black-box)": ((-1.691, 0.370), (-1.192, 0.482)),
        "HMC": ((-1.876, 0.527), None),
    },
    "funnel": {
        "off-policy GFlowNet TB": ((-0.219, 0.020), (-0.026, 0.020)),
        "off-policy reverse KL (IW)": (None, None),
        "off-policy forward KL (IW)": ((-2.822, 0.576), (-0.087, 0.081)),
        "on-policy GFlowNet TB": ((-0.265, 0.026), (-0.012, 0.108)),
        "on-policy reverse KL": ((-0.259, 0.018), (-0.040, 0.023)),
        "on-policy forward KL (IW)": ((-1.384, 0.284), (-0.034, 0.143)),
        "SMC": ((-0.216, 0.157), None),
        "PIS-NN (not black-box)": ((-0.098, 0.005), (-0.018, 0.020)),
        "HMC": ((-0.835, 0.257), None),
    },
}
SMC_SETTINGS = {"gmm9": {"ref_std": 5.0}, "funnel": {"ref_std": 1.0, "n_moves": 5}}  # the reference covers the mixture; MALA needs 5 moves on the funnel

TABLE_SETTINGS = {k: v for k, v in SETTINGS.items() if k not in ("target", "objective", "regime", "langevin")} | {
    "seeds": Setting(3, "seeds per row and target: --seed, --seed + 1, ...", low=1),
    **EXECUTION_SETTINGS,
    "targets": Setting("gmm9,funnel", "comma-separated targets", choices=("gmm9,funnel", "gmm9", "funnel")),
    "rows": Setting("all", "which rows: all, or the comma-separated indices into ROWS (0-6)"),
    "smc_particles": Setting(2000, "particles of the SMC and HMC baselines", low=10),
    "smc_temps": Setting(100, "temperatures of the SMC and HMC baselines", low=1),
}
TABLE_PRESETS = {
    "quick": PRESETS["quick"] | {"steps": 100, "n_steps": 50, "eval_every": 50, "seeds": 1, "targets": "gmm9", "rows": "0,3", "smc_particles": 500},
    "paper": PRESETS["paper"] | {"seeds": 10},
}


def _rows(spec: str) -> list[tuple]:
    if spec == "all":
        return ROWS
    try:
        idx = [int(i) for i in spec.split(",")]
    except ValueError:
        raise ConfigError(f"rows={spec!r}: valid: all, or comma-separated indices 0-{len(ROWS) - 1}") from None
    if any(not 0 <= i < len(ROWS) for i in idx):
        raise ConfigError(f"rows={spec!r}: indices must lie in 0-{len(ROWS) - 1}")
    return [ROWS[i] for i in idx]


def _validate_table(cfg: dict) -> None:
    common = {key: v for key, v in cfg.items() if key not in ("seeds", "targets", "rows", "smc_particles", "smc_temps", *EXECUTION_SETTINGS)}
    for _, objective, regime, langevin in _rows(cfg["rows"]):
        _validate(common | {"objective": objective, "regime": regime, "langevin": langevin, "target": cfg["targets"].split(",")[0]})


def _fmt(v) -> str:
    return "" if v is None else f"{v[0]:+.3f} ± {v[1]:.3f}"


def run_table(cfg: dict, out: Path, resume: bool) -> dict:
    """Every requested row and target over seeds (``out/<target>/<row>/seed<k>``, finished ones kept on resume), the SMC and HMC baselines, then the table."""
    base_seed = torch.initial_seed()
    rows = _rows(cfg["rows"])
    results: dict[str, dict[str, list[tuple[float, float]]]] = {}
    history = []
    common = {key: v for key, v in cfg.items() if key not in ("seeds", "targets", "rows", "smc_particles", "smc_temps", *EXECUTION_SETTINGS)}
    keys = [(target, label, base_seed + k) for target in cfg["targets"].split(",") for label, _, _, _ in rows for k in range(cfg["seeds"])]
    settings = {label: {"objective": objective, "regime": regime, "langevin": langevin} for label, objective, regime, langevin in rows}
    jobs = [
        SubRun(out / target / label.replace(" ", "_").replace("(", "").replace(")", "") / f"seed{seed}", seed, common | {"target": target} | settings[label])
        for target, label, seed in keys
    ]
    diverged: dict[tuple[str, str], int] = {}
    finished = run_many(run, jobs, resume, cfg["jobs"], diverged_ok=True, executor=cfg["executor"], address=cfg["address"])
    for (target, label, seed), m in zip(keys, finished):
        row = results.setdefault(target, {}).setdefault(label, [])
        if "diverged" in m:  # the paper's "unstable": counted, not averaged
            diverged[target, label] = diverged.get((target, label), 0) + 1
            history.append({"step": len(history) + 1, "trajectories": 0, "target": target, "row": label, "seed": seed, "diverged": m["diverged"]})
            continue
        row.append((m["bias_lower_bound"], m["bias_importance_weighted"]))
        history.append(
            {
                "step": len(history) + 1,
                "trajectories": 0,
                "target": target,
                "row": label,
                "seed": seed,
                "B": m["bias_lower_bound"],
                "B_RW": m["bias_importance_weighted"],
            }
        )
    for target in cfg["targets"].split(","):
        for name, move, threshold in (("SMC", "mala", 0.5), ("HMC", "hmc", 0.0)):  # HMC: annealed importance sampling with HMC moves (no resampling)
            for k in range(cfg["seeds"]):
                gen = seeded_generator(base_seed + k)
                torch.manual_seed(base_seed + k)
                opts = dict(SMC_SETTINGS[target]) | ({"n_moves": 1} if move == "hmc" else {})
                r = annealed_smc(
                    TARGETS[target].log_prob,
                    TARGETS[target].dim,
                    cfg["smc_particles"],
                    cfg["smc_temps"],
                    move=move,
                    ess_threshold=threshold,
                    generator=gen,
                    **opts,
                )
                results.setdefault(target, {}).setdefault(name, []).append((r.log_Z - TARGETS[target].log_Z, float("nan")))
    metrics, lines = {}, []
    for target, by_row in results.items():
        lines += [
            f"\n{target}: bias of the log Z estimates (mean ± std over {cfg['seeds']} seed{'s' if cfg['seeds'] != 1 else ''}; paper: 10 runs)",
            f"{'row':<30} {'B (ours)':>16} {'B (paper)':>16} {'B_RW (ours)':>16} {'B_RW (paper)':>16}",
        ]
        for label, vals in by_row.items():
            paper = PAPER_TABLE[target].get(label, (None, None))
            n_diverged = diverged.get((target, label), 0)
            note = f"  ({n_diverged} of {n_diverged + len(vals)} seeds diverged)" if n_diverged else ""
            if n_diverged:
                metrics[f"diverged/{target}/{label}"] = n_diverged
            if not vals:
                lines.append(f"{label:<30} {'diverged':>16} {_fmt(paper[0]) or 'unstable':>16} {'diverged':>16} {_fmt(paper[1]) or 'unstable':>16}{note}")
                continue
            b, brw = np.array([v[0] for v in vals]), np.array([v[1] for v in vals])
            ours_b, ours_rw = (float(b.mean()), float(b.std())), (None if np.isnan(brw).all() else (float(brw.mean()), float(brw.std())))
            lines.append(f"{label:<30} {_fmt(ours_b):>16} {_fmt(paper[0]):>16} {_fmt(ours_rw):>16} {_fmt(paper[1]):>16}{note}")
            metrics[f"B/{target}/{label}/mean"], metrics[f"B/{target}/{label}/std"] = ours_b
            if ours_rw is not None:
                metrics[f"B_RW/{target}/{label}/mean"], metrics[f"B_RW/{target}/{label}/std"] = ours_rw
    first = next((job.out for job, m in zip(jobs, finished) if "diverged" not in m), None)  # the first run with samples
    write_table(out, "\n".join(lines).strip() + "\n", history, first, ("samples.png",))
    if first is None:
        raise TrainingDiverged(f"every run of the table diverged (see {out / 'table.txt'}); no samples to keep")
    return metrics | {"seeds": cfg["seeds"]}


register(
    Experiment(
        "sde-table",
        "Table 2 / C.1: bias of B and B_RW for every objective and regime, plus SMC and HMC, beside the paper",
        TABLE_SETTINGS,
        TABLE_PRESETS,
        run_table,
        _validate_table,
        multi_run=True,
    )
)
