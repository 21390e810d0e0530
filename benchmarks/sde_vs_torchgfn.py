"""SDE sampler against torchgfn's diffusion sampler on the 2-D 9-Gaussian grid (or a target both ship): seconds per iteration, log Z bounds, modes.

usage: python benchmarks/sde_vs_torchgfn.py [--iterations 2000 | --quick | --seconds S [--turns 10]] [--seed 0] [--samples 2000]
       [--target gmm9 | gmm25 | hard_funnel | many_well] [--ours-set KEY=VALUE ...] [--torchgfn-python PATH] [--ours-python PATH] [--torchgfn-debug]

``--seconds S``: equal wall clock instead of equal iterations: each side trains until its timed iterations reach S
seconds (``benchmarks/peer.py``), and the iterations each reached are printed. ``--ours-set``: our side's settings
beyond the shared ones below (``gflownet-measure run sde``'s, e.g. ``regime=off exploration=0.2 langevin=true``: our
recipe against the tutorial's at the same clock); without it both sides train the same recipe. Beside the bounds, both
sides' samples are scored by ``gflownet_measure.experiments.sde.sample_metrics``: KS of x_0, the 25-Gaussian grid's
per-mode share against the exact one, many-well's right-well masses.

``--target``: the default ``gmm9`` is the problem described below. The others are the Sendera et al. 2024 targets that
torchgfn's ``DiffusionSampling`` registers itself (``gmm25_prior``, ``hard_funnel``, ``many_well``; ours:
``gflownet_measure.environments.sde_targets.TARGETS``), run with everything else as below except sigma, which is the
target's own on both sides (our ``DEFAULT_SIGMA``: sqrt 5 for gmm25, 1 for the funnel and many-well), and the checks of
the samples, which are the target's (the modes of the 25-Gaussian grid; the right-well mass of many-well's pairs). The
parent then compares torchgfn's ``log_reward`` with ours on torchgfn's samples, and the bounds with the exact log Z.

The problem (both sides): the equal-weight mixture of 9 Gaussians in R^2 with means {-5, 0, 5}^2 and
variance 0.3 per coordinate, R(x) = sum_m (1/9) N(x; mu_m, 0.3 I), so log Z = 0; an SDE sampler started
at x = 0, T = 32 time steps, trajectory balance with a learned log Z (initialised at 0), on-policy
batches of 200 trajectories, the same number of iterations, one torch thread each.

torchgfn (2.4.1, the newest on PyPI; its ``gfn.gym.diffusion_sampling`` has the diffusion sampler) is
driven through its public API as its ``tutorials/examples/train_diffusion_sampler.py`` drives it, with
that script's defaults: ``DiffusionSampling(target_str, target_kwargs, num_discretization_steps=32)``,
P_F ``PinnedBrownianMotionForward(s_dim=2, pf_module=DiffusionPISGradNetForward(s_dim=2), sigma=5.0,
num_discretization_steps=32)`` (the PIS network at its defaults: 64 Fourier harmonics of t, state and
time embeddings of width 64, ``joint_layers=2`` (a joint MLP of 3 Linear layers of width 64), GELU, no
zero-init, no output clipping, no learned variance: 21,122 weights), P_B the fixed Brownian bridge pinned at 0
``PinnedBrownianMotionBackward(pb_module=DiffusionFixedBackwardModule(2), sigma=5.0, ...)``,
``TBGFlowNet(pf, pb, init_logZ=0.0)``, ``Sampler(estimator=pf)``, Adam at lr 1e-3 on
``pf_pb_parameters()`` and lr 1e-1 on ``logz_parameters()``, and each iteration exactly the tutorial's
loop body: ``sample_trajectories(env, n=200, save_logprobs=True, save_estimator_outputs=False)``,
``zero_grad``, ``gflownet.loss(env, trajectories, recalculate_all_logprobs=False)``, ``backward``,
``step`` (no gradient clipping, no learning-rate schedule, no exploration noise). The tutorial's
``sigma`` default (5.0) is the one it gives "for simple_gmm target"; ``DiffusionSampling`` has no
9-Gaussian grid among its registered targets (``gmm2/4/8`` have random means and Wishart covariances,
``gmm25_prior`` is the 5 x 5 grid at spacing 5 from -10 to 10), so this file adds one: ``_NineGaussians``,
a subclass of the public ``gfn.gym.diffusion_sampling.BaseTarget`` registered in
``DiffusionSampling.DIFFUSION_TARGETS`` (the environment's own registry) in the torchgfn child only.
Note on T: in torchgfn 2.4.1 a state whose next step would reach t = 1 takes the exit action, so
``num_discretization_steps=32`` gives 31 Gaussian Euler-Maruyama transitions of dt = 1/32 (the P_F
network is still evaluated 32 times per trajectory, the last output being replaced by the exit action),
ending at t = 31/32, and 30 non-degenerate Brownian-bridge P_B factors; the child measures and reports
both figures (``gaussian_steps``, ``terminal_time``). This is the tutorial's T = 32 as torchgfn defines it.
``debug`` is off by default (``--torchgfn-debug`` turns on ``DiffusionSampling(debug=True)``, which the
tutorial's ``debug=__debug__`` gives outside ``python -O``; it adds a check per step, whose cost we
could not tell from noise over 200 iterations).

Ours is the library's SDE sampler (:mod:`gflownet_measure.environments.sde`), built and stepped by ``gflownet_measure.experiments.sde``:
the settings ``gflownet_measure.experiments.sde.SETTINGS`` at their defaults, validated by
:func:`gflownet_measure.experiments.settings.resolve`, with target ``gmm9``, ``n_steps`` 32, ``batch_size`` 200,
``objective`` tb, ``regime`` on (no exploration noise), ``steps`` = the iterations, and, set explicitly to
the tutorial's values (they are also our defaults): ``sigma`` 5, ``hidden`` 64, ``learned_variance`` and
``langevin`` off, ``lr`` 1e-3, ``lr_logZ`` 1e-1, ``lr_milestone`` 0 (constant learning rates);
``gflownet_measure.experiments.sde.make_gflownet(settings) -> (graph, gfn)`` (``settings``: those, typed as ``SDERun``; ``EulerMaruyamaPolicy`` with its ``PISNetwork``, the
``BrownianBridge`` P_B, log Z = 0); :func:`gflownet_measure.training.make_optimizer` (Adam, ``lr`` for the
policy, ``lr_logZ`` for log Z); and each iteration ``loss = objective(gfn, make_batches(gfn, graph, settings)(k))``, ``zero_grad``,
``backward``, global gradient-norm clip at ``grad_clip`` (10, our default), ``optimizer.step()`` (the
body of :class:`gflownet_measure.training.Trainer`'s step, less its evaluation and checkpoint bookkeeping).

What matches: the target density (the parent prints max |log R_torchgfn-side - log R_ours| on the
samples), the batch, TB = the batch mean of (log Z + sum log P_F - log R - sum log P_B)^2 with log Z
learned from 0, on-policy sampling, sigma = 5 in the same sense on both sides (P_F step
N(x + f(x, t) dt, sigma^2 dt I), P_B the Brownian bridge pinned at 0, N(x (1 - dt/t), sigma^2 dt (t - dt)/t I),
deterministic from t = dt to 0), the fixed (not learned) forward variance, Adam with lr 1e-3 / 1e-1 and no
schedule, a PIS-style drift network of width 64 on 64 Fourier harmonics of t (frequencies
linspace(0.1, 100), learnable phase) with GELU, K = 2000, one thread. What differs and cannot be made
equal through either public API: (1) the horizon: torchgfn's exit rule gives 31 Gaussian steps of 1/32
ending at t = 31/32 (see the note on T above) against our 32 steps ending at t = 1 (its
``num_discretization_steps=33`` would give 32 steps of 1/33, not the tutorial's setting); (2) the network:
ours concatenates a 2-layer x embedding and a 2-layer t embedding and applies a 3-Linear joint MLP whose last
layer is zero-initialised (training starts at the reference process; Fourier phase initialised at 0;
29,378 weights), torchgfn's ``DiffusionPISGradNetForward`` adds a 1-Linear x embedding to a 2-Linear t
embedding and applies a 3-Linear joint MLP with PyTorch's default initialisation (the tutorial leaves
``zero_init`` off; Fourier phase drawn from N(0, 1); 21,122 weights); neither library builds the other's. What differs by choice: our step clips the global gradient
norm at 10 (part of our training step; the tutorial does not clip). The settings actually used are
printed at the start of the run and given as ``settings`` in the JSON line.

Each side runs in its own child process (taking turns of ``--chunk`` iterations, never at the same time: see ``benchmarks/peer.py``) with one torch
thread (``torch.set_num_threads(1)``, ``OMP_NUM_THREADS=MKL_NUM_THREADS=1``). The seconds per iteration
are timed the same way for both: ``time.perf_counter`` around each whole training iteration (sample a
batch, loss, backward, clip where there is one, optimiser step), nothing else. After training each side
draws ``--samples`` (K, default 2000) on-policy trajectories and gives log w = log R(x) + sum log P_B -
sum log P_F per trajectory and the terminal x: torchgfn through ``Sampler.sample_trajectories`` and
``gfn.utils.prob_calculations.get_trajectory_pfs_and_pbs`` as its tutorial's
``evaluate_density_metrics`` does (its ``DiffusionSampling.density_metrics`` gives ``elbo`` and
``iw_elbo``, the same two bounds, reported as a cross-check), ours through
``gflownet_measure.experiments.sde.evaluate_bounds(gfn, graph, K)``. The bounds are B = mean of log w (the ELBO) and
B_RW = log-mean-exp of log w (the importance-weighted bound); both are <= log Z = 0 in expectation. The
parent counts, with the same code for both sides (``gflownet_measure.environments.sde_targets.TARGETS["gmm9"].mode_counts``,
cross-checked against this file's own rule), the samples in each mode: x is in mode m if
|x - mu_m|_2 < 3 sqrt(0.3). An exact sampler puts about K (1 - e^{-4.5}) / 9 ~ 220 samples in each mode
and K e^{-4.5} ~ 22 outside every disc (the chi^2_2 tail at 9). Figures are printed (and one JSON line starting
``JSON``), never asserted; the ratio ours / torchgfn is measured in the same run, which is what to
compare across machines (these are shared and noisy).

It needs an interpreter where both gflownet-measure and torchgfn import (torchgfn is a benchmark-only
extra, ``pip install -e .[bench]``, never a runtime dependency), for instance::

    python3 -m venv /tmp/benchvenv
    /tmp/benchvenv/bin/pip install torch==2.13.0 torchgfn==2.4.1 numpy scipy matplotlib tqdm
    /tmp/benchvenv/bin/pip install -e . --no-deps
    /tmp/benchvenv/bin/python benchmarks/sde_vs_torchgfn.py

or keep the two apart: run it with the project's interpreter and point ``--torchgfn-python`` at one
where torchgfn imports (the torchgfn child imports neither ``environments``, ``experiments`` nor
``gflownet_measure``; the parent and our child do).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from peer import Turns, one_thread, parser, run_sides, timed

T = 32  # time steps (torchgfn's num_discretization_steps, our n_steps)
BATCH = 200
MODE_VAR = 0.3  # variance per coordinate of each of the 9 Gaussians
MEANS = [(a, b) for a in (-5.0, 0.0, 5.0) for b in (-5.0, 0.0, 5.0)]
MODE_RADIUS = 3.0 * math.sqrt(MODE_VAR)  # a sample is in mode m if |x - mu_m|_2 < 3 standard deviations
# torchgfn's tutorial (tutorials/examples/train_diffusion_sampler.py) defaults
TGFN_SIGMA, TGFN_LR, TGFN_LR_LOGZ = 5.0, 1e-3, 1e-1
TGFN_NET = {"harmonics_dim": 64, "t_emb_dim": 64, "s_emb_dim": 64, "hidden_dim": 64, "joint_layers": 2, "zero_init": False}


def gmm9_log_density(x: torch.Tensor) -> torch.Tensor:
    """log R(x) = log sum_m (1/9) N(x; mu_m, 0.3 I) for x of shape [..., 2] (normalised: log Z = 0)."""
    mu = torch.tensor(MEANS, dtype=x.dtype, device=x.device)
    sq = ((x.unsqueeze(-2) - mu) ** 2).sum(-1)  # [..., 9]
    return torch.logsumexp(-0.5 * sq / MODE_VAR, -1) - math.log(9.0) - math.log(2.0 * math.pi * MODE_VAR)


def own_mode_counts(x: torch.Tensor) -> torch.Tensor:
    """Samples within MODE_RADIUS of each mean (the discs are disjoint: spacing 5 > 2 x 1.64)."""
    mu = torch.tensor(MEANS, dtype=x.dtype)
    return ((x.unsqueeze(1) - mu).norm(dim=-1) < MODE_RADIUS).sum(0)


# our target name -> torchgfn's DiffusionSampling target (gmm9: the grid this file registers)
TGFN_TARGETS = {"gmm9": "gmm9_grid", "gmm25": "gmm25_prior", "hard_funnel": "hard_funnel", "many_well": "many_well"}


def _sigma(target: str) -> float:
    """sigma on both sides: the tutorial's 5 on gmm9 (the original comparison), else the target's own (our DEFAULT_SIGMA)."""
    from gflownet_measure.environments.sde import DEFAULT_SIGMA

    return TGFN_SIGMA if target == "gmm9" else DEFAULT_SIGMA[target]


def _train_torchgfn(a, turns: Turns) -> dict:
    """torchgfn's diffusion sampler, driven through its public API as train_diffusion_sampler.py does."""
    import gfn as torchgfn
    from gfn.estimators import PinnedBrownianMotionBackward, PinnedBrownianMotionForward
    from gfn.gflownet import TBGFlowNet
    from gfn.gym.diffusion_sampling import BaseTarget, DiffusionSampling
    from gfn.samplers import Sampler
    from gfn.utils.common import set_seed
    from gfn.utils.modules import (
        DiffusionFixedBackwardModule,
        DiffusionPISGradNetForward,
    )
    from gfn.utils.prob_calculations import get_trajectory_pfs_and_pbs

    class _NineGaussians(BaseTarget):
        """The 9-Gaussian grid as a torchgfn diffusion target (log_reward, sample, gt_logz)."""

        def __init__(self, device: torch.device, dim: int = 2, seed: int = 0) -> None:
            assert dim == 2
            self.means = torch.tensor(MEANS, device=device)
            super().__init__(device=device, dim=dim, n_gt_xs=2000, seed=seed, plot_border=10.0)

        def log_reward(self, x: torch.Tensor) -> torch.Tensor:
            return gmm9_log_density(x)

        def sample(self, batch_size: int, seed: int | None = None) -> torch.Tensor:
            g = torch.Generator(device=self.device)
            g.manual_seed(0 if seed is None else seed)
            m = torch.randint(0, 9, (batch_size,), generator=g, device=self.device)
            return self.means[m] + math.sqrt(MODE_VAR) * torch.randn(batch_size, 2, generator=g, device=self.device)

        def gt_logz(self) -> float:
            return 0.0

    DiffusionSampling.DIFFUSION_TARGETS["gmm9_grid"] = (_NineGaussians, {})
    set_seed(a.seed)
    env = DiffusionSampling(
        target_str=TGFN_TARGETS[a.target], target_kwargs={"seed": a.seed}, num_discretization_steps=T, device=torch.device("cpu"), debug=a.torchgfn_debug
    )
    pf_module = DiffusionPISGradNetForward(s_dim=env.dim, **TGFN_NET)
    pb_module = DiffusionFixedBackwardModule(s_dim=env.dim)
    pf = PinnedBrownianMotionForward(s_dim=env.dim, pf_module=pf_module, sigma=a.sigma, num_discretization_steps=T)
    pb = PinnedBrownianMotionBackward(s_dim=env.dim, pb_module=pb_module, sigma=a.sigma, num_discretization_steps=T)
    gflownet = TBGFlowNet(pf=pf, pb=pb, init_logZ=0.0)
    sampler = Sampler(estimator=pf)
    optimizer = torch.optim.Adam(gflownet.pf_pb_parameters(), lr=TGFN_LR)
    optimizer.add_param_group({"params": gflownet.logz_parameters(), "lr": TGFN_LR_LOGZ})

    def step(k: int) -> float:  # the tutorial's loop body, less its evaluation/visualisation
        trajectories = sampler.sample_trajectories(env, n=BATCH, save_logprobs=True, save_estimator_outputs=False)
        optimizer.zero_grad()
        loss = gflownet.loss(env, trajectories, recalculate_all_logprobs=False)
        loss.backward()
        optimizer.step()
        value = loss.item()
        if not math.isfinite(value):
            raise RuntimeError(f"torchgfn: loss is {value} at iteration {k}")
        return value

    seconds = timed(step, a.iterations, "torchgfn", turns, a.chunk, a.seconds, a.turns)
    with torch.no_grad():  # the forward half of the tutorial's evaluate_density_metrics, K trajectories
        trajectories = Sampler(estimator=gflownet.pf).sample_trajectories(env, n=a.samples, save_logprobs=True, save_estimator_outputs=False)
        log_pfs, log_pbs = get_trajectory_pfs_and_pbs(gflownet.pf, gflownet.pb, trajectories, recalculate_all_logprobs=False)
        log_rewards = trajectories.log_rewards
        log_w = log_rewards + log_pbs.sum(0) - log_pfs.sum(0)
        dm = env.density_metrics(fwd_log_pfs=log_pfs, fwd_log_pbs=log_pbs, fwd_log_rewards=log_rewards, log_Z_learned=float(gflownet.logZ.item()))
        final = trajectories.terminating_states.tensor
        log_R_theirs = env.target.log_reward(final[:, :-1])
    actions = trajectories.actions.tensor  # [steps, K, 2], the exit action is -inf, padding (none here) too
    meta = {
        "parameters": sum(p.numel() for p in gflownet.parameters()),
        "torchgfn": torchgfn.__version__,
        "gaussian_steps": int(torch.isfinite(actions[..., 0]).sum(0).max()),
        "terminal_time": float(final[:, -1].max()),
        "elbo (torchgfn density_metrics)": float(dm["elbo"]),
        "iw_elbo (torchgfn density_metrics)": float(dm["iw_elbo"]),
        "ess% (torchgfn density_metrics)": float(dm["ess(%)"]),
        "debug": a.torchgfn_debug,
    }
    return {"seconds": seconds, "x": final[:, :-1], "log_w": log_w, "log_R": log_R_theirs, "log_Z": float(gflownet.logZ.item()), "meta": meta}


def _ours_config(iterations: int, target: str, ours_set: list[str]) -> dict:
    """Our settings: the defaults of gflownet_measure.experiments.sde.SETTINGS with the shared problem and budget, then
    ``--ours-set KEY=VALUE`` (our own recipe, e.g. ``regime=off langevin=true``; printed as differing)."""
    from gflownet_measure.experiments import sde
    from gflownet_measure.experiments.settings import parse_assignments, resolve

    shared = {"target": target, "n_steps": T, "batch_size": BATCH, "steps": iterations, "objective": "tb", "regime": "on"}
    as_tutorial = {"sigma": _sigma(target), "hidden": TGFN_NET["hidden_dim"], "learned_variance": False, "langevin": False, "lr": TGFN_LR, "lr_logZ": TGFN_LR_LOGZ, "lr_milestone": 0}
    return resolve(sde.SETTINGS, shared | as_tutorial, parse_assignments(ours_set))


def _train_ours(a, turns: Turns) -> dict:
    """Our SDE sampler: gflownet_measure.experiments.sde.make_gflownet / make_batches / evaluate_bounds and the library's optimiser."""
    from gflownet_measure.experiments import sde
    from gflownet_measure.experiments.settings import build
    from gflownet_measure.objectives import OBJECTIVES
    from gflownet_measure.training import make_optimizer, seed_everything

    seed_everything(a.seed)
    cfg = _ours_config(a.iterations, a.target, a.ours_set)
    settings = build(sde.SDERun, cfg)
    graph, gfn = sde.make_gflownet(settings)
    objective, batches = OBJECTIVES[cfg["objective"]], sde.make_batches(gfn, graph, settings)
    optimizer = make_optimizer(gfn, cfg["lr"], cfg["lr_logZ"])
    params = [p for g in optimizer.param_groups for p in g["params"]]
    grad_clip = float(cfg.get("grad_clip", 0.0))

    def step(k: int) -> float:  # the body of Trainer's step, less its evaluation and checkpoint bookkeeping
        loss = objective(gfn, batches(k))
        value = float(loss.detach())
        if not math.isfinite(value):
            raise RuntimeError(f"ours: loss is {value} at iteration {k}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if grad_clip > 0:
            torch.nn.utils.clip_grad_norm_([p for p in params if p.grad is not None], grad_clip)
        optimizer.step()
        return value

    seconds = timed(step, a.iterations, "ours", turns, a.chunk, a.seconds, a.turns)
    bounds = sde.evaluate_bounds(gfn, graph, a.samples)
    meta = {"parameters": sum(p.numel() for p in gfn.parameters()), "cfg": {k: v for k, v in cfg.items() if isinstance(v, (int, float, str, bool))}}
    return {
        "seconds": seconds,
        "x": bounds["samples"].detach(),
        "B": float(bounds["log_Z_lower_bound"]),
        "B_RW": float(bounds["log_Z_importance_weighted"]),
        "log_Z": float(gfn.log_Z.detach()),
        "meta": meta,
    }


def _child(a) -> None:
    """One side, in this process: train, evaluate, and write the figures to ``a.out`` (torch.save)."""
    one_thread()
    turns = Turns()
    r = (_train_ours if a.side == "ours" else _train_torchgfn)(a, turns)
    r["meta"] |= {"threads": torch.get_num_threads(), "torch": torch.__version__, "python": sys.executable}
    if "log_R" in r:  # torchgfn's own log R of its samples, for the parent's comparison
        r["log_R"] = r["log_R"].double().cpu()
    if "log_w" in r:
        log_w = r.pop("log_w").double()
        r["B"] = float(log_w.mean())
        r["B_RW"] = float(torch.logsumexp(log_w, 0) - math.log(log_w.numel()))
    r["x"] = r["x"].double().cpu()
    r["seconds"] = list(map(float, r["seconds"]))
    torch.save(r, a.out)
    turns.give()


def _run_sides(a, workdir: Path) -> dict[str, dict]:
    """Both sides in child interpreters with one thread each, taking turns; each one's seconds, samples, bounds and metadata."""
    outs = {side: workdir / f"{side}.pt" for side in ("torchgfn", "ours")}
    wall = run_sides(__file__, {"torchgfn": a.torchgfn_python, "ours": a.ours_python}, a, outs, ("--target", a.target, "--sigma", str(a.sigma), "--ours-set", *a.ours_set))
    return {side: torch.load(out, weights_only=False) | {"wall": wall[side]} for side, out in outs.items()}


def main() -> None:
    p = parser(__doc__, 2000, "K: on-policy trajectories per side for the bounds and mode counts", "DiffusionSampling(debug=True), as the tutorial's debug=__debug__ gives outside python -O")
    p.add_argument("--target", choices=tuple(TGFN_TARGETS), default="gmm9", help="the target (module docstring)")
    p.add_argument("--ours-set", nargs="*", default=[], metavar="KEY=VALUE", help="our side's settings beyond the shared ones (gflownet-measure run sde's), e.g. regime=off langevin=true")
    p.add_argument("--sigma", type=float, default=0.0, help=argparse.SUPPRESS)  # _sigma(target), set by the parent: the torchgfn child imports nothing of ours
    a = p.parse_args()
    if a.quick:
        a.iterations = 200
    if a.side:
        _child(a)
        return

    torch.set_num_threads(1)
    from gflownet_measure.environments.sde_targets import TARGETS

    a.sigma = _sigma(a.target)
    cfg = _ours_config(a.iterations, a.target, a.ours_set)
    target = TARGETS[a.target]
    problem = f"2-D 9-Gaussian grid (means {{-5,0,5}}^2, variance {MODE_VAR}, log Z = 0)" if a.target == "gmm9" else f"{a.target} (d = {target.dim}, log Z = {target.log_Z:.4f})"
    budget = f"{a.seconds:g} s of training each (equal wall clock)" if a.seconds > 0 else f"{a.iterations} iterations"
    print(f"{problem}: ours vs torchgfn diffusion sampler, TB with learned log Z, "
          f"{budget}, seed {a.seed}, K = {a.samples} trajectories for the bounds and checks", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        sides = _run_sides(a, Path(tmp))
    theirs, ours = sides["torchgfn"], sides["ours"]

    mo, mt = ours["meta"], theirs["meta"]
    settings = {
        "T": {"ours": cfg["n_steps"], "torchgfn": T},
        "Gaussian steps": {"ours": cfg["n_steps"], "torchgfn": mt["gaussian_steps"]},
        "terminal time": {"ours": 1.0, "torchgfn": mt["terminal_time"]},
        "batch": {"ours": cfg["batch_size"], "torchgfn": BATCH},
        "objective": {"ours": cfg["objective"], "torchgfn": "tb"},
        "regime": {"ours": cfg["regime"], "torchgfn": "on"},
        "sigma": {"ours": cfg["sigma"], "torchgfn": a.sigma},
        "width": {"ours": cfg["hidden"], "torchgfn": TGFN_NET["hidden_dim"]},
        "learned variance": {"ours": cfg["learned_variance"], "torchgfn": False},
        "lr": {"ours": cfg["lr"], "torchgfn": TGFN_LR},
        "lr_logZ": {"ours": cfg["lr_logZ"], "torchgfn": TGFN_LR_LOGZ},
        "lr schedule": {"ours": "none" if cfg["lr_milestone"] == 0 else f"x{cfg['lr_gamma']} every {cfg['lr_milestone']}", "torchgfn": "none"},
        "grad clip (global norm)": {"ours": cfg["grad_clip"], "torchgfn": 0.0},
        "parameters (log Z included)": {"ours": mo["parameters"], "torchgfn": mt["parameters"]},
    }
    if a.ours_set:
        print("our side's own settings (--ours-set): " + " ".join(a.ours_set))
    print("settings (ours / torchgfn): " + ", ".join(f"{k} {v['ours']} / {v['torchgfn']}" + ("" if v["ours"] == v["torchgfn"] else " (differ)") for k, v in settings.items()))
    from gflownet_measure.experiments.sde import sample_metrics

    checks: list[str] = []  # the per-target fields of each side, in the JSON record
    for r in (ours, theirs):
        r["s_per_it_mean"] = float(np.mean(r["seconds"]))
        r["s_per_it_median"] = float(np.median(r["seconds"]))
        r["iterations"] = len(r["seconds"])
        r["delta_log_Z"], r["delta_log_Z_RW"] = target.log_Z - r["B"], target.log_Z - r["B_RW"]
        r["sample"] = {k: v for k, v in sample_metrics(a.target, r["x"]).items() if "/" not in k}  # ks_x0, mode shares, well masses
        if hasattr(target, "mode_counts"):
            r["modes"] = [int(c) for c in target.mode_counts(r["x"])]
            r["in_modes"] = sum(r["modes"])
            r["modes_hit"] = sum(c > 0 for c in r["modes"])
            checks = ["modes", "in_modes", "modes_hit"]
        if hasattr(target, "well_mass"):
            r["right_well_mass_max_error"] = float((target.well_mass(r["x"]) - target.right_mass()).abs().max())
            checks = ["right_well_mass_max_error"]

    print(f"torch {mo['torch']} (ours) / {mt['torch']} (torchgfn side), torchgfn {mt['torchgfn']}, "
          f"torch threads per side: ours {mo['threads']}, torchgfn {mt['threads']} (each in its own process, taking turns of {a.chunk} iterations)")
    if a.target == "gmm9":
        log_r_gap = max(float((gmm9_log_density(r["x"]) - target.log_prob(r["x"])).abs().max()) for r in (ours, theirs))
        print(f"torchgfn DiffusionSampling debug={mt['debug']}; max |log R (torchgfn side) - log R (ours)| on both sample sets: {log_r_gap:.2e}")
    else:
        log_r_gap = float((theirs["log_R"] - target.log_prob(theirs["x"])).abs().max())
        print(f"torchgfn DiffusionSampling debug={mt['debug']}; max |torchgfn's log_reward - our log R| on torchgfn's samples: {log_r_gap:.2e}")
    rows = [
        ("s/iteration (mean)", ours["s_per_it_mean"], theirs["s_per_it_mean"], "{:.4f}"),
        ("s/iteration (median)", ours["s_per_it_median"], theirs["s_per_it_median"], "{:.4f}"),
    ]
    print(f"{'':36s} {'ours':>10s} {'torchgfn':>10s} {'ours/torchgfn':>14s}")
    for name, o, t, fmt in rows:
        print(f"{name:36s} {fmt.format(o):>10s} {fmt.format(t):>10s} {o / t:14.3f}")
    print(f"{'iterations trained':36s} {ours['iterations']:10d} {theirs['iterations']:10d}")
    print(f"{'seconds trained (timed iterations)':36s} {sum(ours['seconds']):10.1f} {sum(theirs['seconds']):10.1f}")
    for name, key in (("B = mean log w (ELBO)", "B"), ("B_RW = log-mean-exp log w (IW-ELBO)", "B_RW"), ("Delta log Z = log Z - B", "delta_log_Z"), ("Delta log Z^RW = log Z - B_RW", "delta_log_Z_RW"), (f"learned log Z (exact {target.log_Z:.4f})", "log_Z")):
        print(f"{name:36s} {ours[key]:10.4f} {theirs[key]:10.4f}")
    for key in ours["sample"]:
        print(f"{key:36s} {ours['sample'][key]:10.4g} {theirs['sample'][key]:10.4g}")
    print(f"{'wall of its turns (s, incl. evaluation)':36s} {ours['wall']:10.1f} {theirs['wall']:10.1f}")
    if "modes" in checks:
        n = len(target.means)
        print(f"{'samples in a mode (of ' + str(a.samples) + ')':36s} {ours['in_modes']:10d} {theirs['in_modes']:10d}")
        print(f"{f'modes hit (of {n})':36s} {ours['modes_hit']:10d} {theirs['modes_hit']:10d}")
        print(f"mode counts, means in the order {target.means[0].tolist()}, {target.means[1].tolist()}, ..., {target.means[-1].tolist()} (ideal ~{a.samples / n * (1 - math.exp(-4.5)):.0f} each, and {a.samples * math.exp(-4.5):.0f} outside every disc):")
        print(f"  ours     {ours['modes']}")
        print(f"  torchgfn {theirs['modes']}")
    if "right_well_mass_max_error" in checks:
        print(f"{'right-well mass, largest error of a pair':36s} {ours['right_well_mass_max_error']:10.4f} {theirs['right_well_mass_max_error']:10.4f}  (exact {target.right_mass():.4f})")
    print(f"torchgfn's own density_metrics on the same trajectories: elbo {mt['elbo (torchgfn density_metrics)']:.4f}, iw_elbo {mt['iw_elbo (torchgfn density_metrics)']:.4f}, ESS {mt['ess% (torchgfn density_metrics)']:.1f}%")
    if a.target == "gmm9":
        agree = all(r["modes"] == [int(c) for c in own_mode_counts(r["x"])] for r in (ours, theirs))
        print(f"TARGETS['gmm9'].mode_counts agrees with this file's 3-sigma rule on both sample sets: {agree}")
    record = {
        "benchmark": "sde_vs_torchgfn",
        "target": a.target,
        "iterations": a.iterations,
        "seconds": a.seconds,
        "ours_set": a.ours_set,
        "seed": a.seed,
        "K": a.samples,
        "settings": settings,
        "max_abs_log_R_gap": log_r_gap,
        "ratio_s_per_it_mean": ours["s_per_it_mean"] / theirs["s_per_it_mean"],
        "ratio_s_per_it_median": ours["s_per_it_median"] / theirs["s_per_it_median"],
    }
    for side, r in (("ours", ours), ("torchgfn", theirs)):
        keys = ("s_per_it_mean", "s_per_it_median", "iterations", "B", "B_RW", "delta_log_Z", "delta_log_Z_RW", "log_Z", "sample", *checks, "wall")
        record[side] = {k: r[k] for k in keys} | {"meta": r["meta"]}
    print("JSON " + json.dumps(record, default=str))


if __name__ == "__main__":
    main()
