"""A diffusion model trained by maximum likelihood on the 8-Gaussian ring against torchgfn's ``MLEDiffusion``: seconds
per step and the held-out NLL bounds.

usage: python benchmarks/mle_diffusion_vs_torchgfn.py [--iterations 1000 | --quick] [--seed 0] [--samples 16]
       [--torchgfn-python PATH] [--ours-python PATH] [--torchgfn-debug]

The data (both sides): the ``ring`` set of :mod:`gflownet_measure.environments.diffusion_data` (8 Gaussians of standard deviation 0.1
on a circle of radius 2; 20,000 training and 5,000 held-out points drawn once), loaded by the parent and handed to
both children; batches of 256 training points drawn uniformly with replacement; T = 100 steps; a PIS-style denoiser
of width 64; Adam at lr 3e-3, constant; the same number of steps; one torch thread each. The held-out NLL (nats per
point) of each side's trained model on the first 1,000 held-out points, from ``--samples`` (K) backward walks per
point: the bound -E[log P_F(tau) - log P_B(tau | x)] (Zhang et al. 2023a, eq. 28) and the K-sample
importance-weighted bound -log (1/K) sum_k P_F(tau_k) / P_B(tau_k | x) (eq. 27 estimated as Burda et al. 2016
do). The exact NLL of the ring on these points is 0.318 nats (docs/results.md).

What each trainer optimises. Both sides here keep P_B fixed, torchgfn's default (``MLEDiffusion(pf, pb=None, ...)``,
as in its docstring's usage), ours ``learn_backward=false``. torchgfn's ``MLEDiffusion.loss`` walks each data point
back with P_B (the Brownian bridge pinned at 0 at t = 0, plus P_B's learned corrections when there are any, attached
to the graph) and returns -mean sum_t log P_F: no -log P_B term. With a fixed P_B that term is a constant, so its
gradient is the bound's, the same work as ours. With a learned P_B it is neither the bound nor MLE-GFN: the
corrections are pushed, by reparametrisation, to raise log P_F alone (not exercised here). Ours
(``gflownet_measure.experiments.mle_diffusion``) trains P_F on -(log P_F - sg(log P_B)) and a learned P_B either by the same bound,
path-wise (``backward_rule=elbo``), or by MLE-GFN's trajectory-balance consistency Var_k[sg(log P_F(tau_k)) - log
P_B(tau_k | x)] (``tbc``, Zhang et al. 2023a eq. 33; Lahlou et al. 2023 section 4.5).

The models differ, by each library's construction: torchgfn's is the pinned Brownian motion of the diffusion
samplers (x_0 = 0, P_F steps N(x + f(x, t) dt, sigma^2 dt I) with sigma = 2, its docstring's value, on
t in [0, 1] with dt = 1/100; P_B the Brownian bridge back to 0, whose last step is deterministic), its network
``DiffusionPISGradNetForward(s_dim=2, hidden_dim=64)`` at its other defaults (64 Fourier harmonics, embeddings of
width 64, ``joint_layers=2``, no zero-init). Ours is DDPM's variance-preserving noising (x_T ~ N(0, I), P_B
N(sqrt(1 - beta_t) x_{t-1}, beta_t I), docs/diffusion.md) with a noise-predicting P_F and a learned variance factor,
the PIS network of width 64 of the ``quick`` preset, zero-initialised last layer; our step clips the global gradient
norm at 10 (part of our training step; torchgfn's loop does not clip). Both models' bounds are bounds on their own
terminal density at the same held-out points, in nats per point.

torchgfn is driven through its public API (``gfn.gflownet.mle.MLEDiffusion``, ``PinnedBrownianMotionForward``,
``DiffusionPISGradNetForward``); its bound is computed here by the same walk as ``MLEDiffusion.loss`` with the log
P_B terms added, and the child checks the walk against ``MLEDiffusion.loss`` (the same noise draws: the printed
``max |sum log P_F - (-MLEDiffusion.loss)|``). Each side runs in its own child process, taking turns of ``--chunk``
steps (``benchmarks/peer.py``), timed by ``time.perf_counter`` around each whole training step (draw a batch, walk
it back, loss, backward, clip where there is one, optimiser step). Figures are printed (and one JSON line starting
``JSON``), never asserted.

torchgfn 2.4.1 refuses numpy >= 2: give it its own interpreter, e.g.::

    python3 -m venv /tmp/tgfn && /tmp/tgfn/bin/pip install torch==2.13.0 torchgfn==2.4.1
    python benchmarks/mle_diffusion_vs_torchgfn.py --torchgfn-python /tmp/tgfn/bin/python

(the torchgfn child imports neither ``environments``, ``experiments`` nor ``gflownet_measure``).
"""
from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from peer import Turns, one_thread, parser, run_sides, timed

T = 100  # diffusion steps on both sides
BATCH = 256
WIDTH = 64
LR = 3e-3
SIGMA = 2.0  # torchgfn's Brownian-motion scale (its MLEDiffusion docstring's value)
EVAL_POINTS = 1000


def _data_file(a) -> Path:
    """The parent's copy of the training and held-out points, beside the children's result files."""
    return Path(a.out).parent / "data.pt"


def _tgfn_log_weights(trainer, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sum_t log P_F, sum_t log P_B)`` per row of ``x`` on one backward walk each: the walk of ``MLEDiffusion.loss``
    (fixed P_B, fixed P_F variance), with the Brownian bridge's log-densities of its non-degenerate steps."""
    dt, dim, n = trainer.dt, x.shape[1], len(x)
    std_f = trainer.sigma * math.sqrt(dt * trainer.t_scale)
    log_2pi = math.log(2 * math.pi)
    log_pf, log_pb = torch.zeros(n), torch.zeros(n)
    t_fwd_grid = torch.linspace(1.0 - dt, 0.0, trainer.num_steps)
    t_curr_grid = torch.linspace(1.0, dt, trainer.num_steps)
    s_curr = x
    for i in range(trainer.num_steps):
        t_curr = t_curr_grid[i].expand(n, 1)
        not_s0 = ((t_curr - dt) >= dt * 1e-2).float()
        std_b = trainer.sigma * (dt * (t_curr - dt) / t_curr).sqrt() * not_s0
        noise = torch.randn_like(s_curr)
        s_prev = s_curr * (1.0 - dt / t_curr) * not_s0 + std_b * noise
        if bool(not_s0.all()):
            log_pb += -0.5 * noise.square().sum(1) - dim * (std_b[:, 0].log() + 0.5 * log_2pi)
        drift = trainer.pf.module(torch.cat([s_prev, t_fwd_grid[i].expand(n, 1)], 1))
        log_pf += -0.5 * ((s_curr - s_prev - dt * drift) / std_f).square().sum(1) - dim * (math.log(std_f) + 0.5 * log_2pi)
        s_curr = s_prev
    return log_pf, log_pb


def _nll(elbo: torch.Tensor, iw: torch.Tensor) -> dict:
    """The NLL bound and the IW bound (nats per point) from the per-point ``elbo`` and ``iw`` estimates, with standard errors."""
    out = {}
    for name, v in (("nll_bound", elbo), ("nll_iw", iw)):
        out[name], out[name + "_se"] = -float(v.mean()), float(v.std() / math.sqrt(len(v)))
    return out


def _train_torchgfn(a, turns: Turns) -> dict:
    """torchgfn's MLEDiffusion with its default fixed P_B, the user-owned loop of its docstring."""
    import gfn as torchgfn
    from gfn.estimators import PinnedBrownianMotionForward
    from gfn.gflownet.mle import MLEDiffusion
    from gfn.utils.common import set_seed
    from gfn.utils.modules import DiffusionPISGradNetForward

    data = torch.load(_data_file(a))
    train, held_out = data["train"].float(), data["held_out"].float()
    set_seed(a.seed)
    pf = PinnedBrownianMotionForward(s_dim=2, pf_module=DiffusionPISGradNetForward(s_dim=2, hidden_dim=WIDTH), sigma=SIGMA, num_discretization_steps=T)
    trainer = MLEDiffusion(pf=pf, pb=None, num_steps=T, sigma=SIGMA, debug=a.torchgfn_debug)
    optimizer = torch.optim.Adam(trainer.parameters(), lr=LR)

    def step(k: int) -> float:
        batch = train[torch.randint(len(train), (BATCH,))]
        optimizer.zero_grad()
        loss = trainer.loss(None, batch)
        loss.backward()
        optimizer.step()
        value = loss.item()
        if not math.isfinite(value):
            raise RuntimeError(f"torchgfn: loss is {value} at step {k}")
        return value

    seconds = timed(step, a.iterations, "torchgfn", turns, a.chunk, a.seconds, a.turns)
    with torch.no_grad():
        torch.manual_seed(a.seed + 1)
        reference = -float(trainer.loss(None, held_out[:BATCH]))
        torch.manual_seed(a.seed + 1)
        check = float(_tgfn_log_weights(trainer, held_out[:BATCH])[0].mean())
        lp_f, lp_b = _tgfn_log_weights(trainer, held_out.repeat_interleave(a.samples, 0))
    meta = {"parameters": sum(p.numel() for p in trainer.parameters()), "torchgfn": torchgfn.__version__, "walk_vs_MLEDiffusion_loss": abs(check - reference)}
    log_w = (lp_f - lp_b).double().view(len(held_out), a.samples)
    return {"seconds": seconds, **_nll(log_w.mean(1), torch.logsumexp(log_w, 1) - math.log(a.samples)), "meta": meta}


def _ours_config(iterations: int) -> dict:
    """Our settings: the ``quick`` preset of ``mle-diffusion`` on the ring at T = 100 with a fixed (DDPM) P_B."""
    from gflownet_measure.experiments import mle_diffusion
    from gflownet_measure.experiments.settings import resolve

    shared = {"data": "ring", "n_steps": T, "hidden": WIDTH, "batch_size": BATCH, "lr": LR, "lr_milestone": 0, "steps": iterations, "learn_backward": False}
    return resolve(mle_diffusion.SETTINGS, mle_diffusion.PRESETS["quick"], shared)


def _train_ours(a, turns: Turns) -> dict:
    """Our diffusion GFlowNet: ``gflownet_measure.experiments.mle_diffusion``'s graph, objective and batches, the library's optimiser."""
    from gflownet_measure.environments.diffusion_data import load_data
    from gflownet_measure.experiments import mle_diffusion
    from gflownet_measure.experiments.settings import build
    from gflownet_measure.likelihood import log_likelihood_bounds
    from gflownet_measure.training import make_optimizer, seed_everything

    seed_everything(a.seed)
    cfg = _ours_config(a.iterations)
    data = load_data("ring")
    settings = build(mle_diffusion.MleDiffusionRun, cfg)
    graph, gfn = mle_diffusion.make_gflownet(settings.space, data)
    objective, batches = mle_diffusion.objective_of(settings), mle_diffusion.make_batches(gfn, graph, data, settings)
    optimizer = make_optimizer(gfn, cfg["lr"], 0.0)
    params = [p for g in optimizer.param_groups for p in g["params"]]

    def step(k: int) -> float:  # the body of Trainer's step, less its evaluation and checkpoint bookkeeping
        loss = objective(gfn, batches(k))
        value = float(loss.detach())
        if not math.isfinite(value):
            raise RuntimeError(f"ours: loss is {value} at step {k}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, cfg["grad_clip"])
        optimizer.step()
        return value

    seconds = timed(step, a.iterations, "ours", turns, a.chunk, a.seconds, a.turns)
    held_out = torch.load(_data_file(a))["held_out"].float()
    elbo, iw = log_likelihood_bounds(graph, gfn.pf, gfn.pb, mle_diffusion.data_states(held_out, T), a.samples)
    meta = {"parameters": sum(p.numel() for p in gfn.parameters()), "cfg": {k: v for k, v in cfg.items() if isinstance(v, (int, float, str, bool))}}
    return {"seconds": seconds, **_nll(elbo, iw), "meta": meta}


def _child(a) -> None:
    one_thread()
    turns = Turns()
    r = (_train_ours if a.side == "ours" else _train_torchgfn)(a, turns)
    r["meta"] |= {"threads": torch.get_num_threads(), "torch": torch.__version__}
    r["seconds"] = list(map(float, r["seconds"]))
    torch.save(r, a.out)
    turns.give()


def main() -> None:
    p = parser(__doc__, 16, "K: backward walks per held-out point for the two bounds", "MLEDiffusion(debug=True): a NaN check per loss")
    p.set_defaults(iterations=1000)
    a = p.parse_args()
    if a.quick:
        a.iterations = 200
    if a.side:
        _child(a)
        return

    torch.set_num_threads(1)
    from gflownet_measure.environments.diffusion_data import load_data

    data = load_data("ring")
    print(f"8-Gaussian ring, T = {T}, width {WIDTH}, batch {BATCH}, lr {LR}, {a.iterations} steps, seed {a.seed}, "
          f"held-out NLL on {EVAL_POINTS} points from K = {a.samples} backward walks each (exact NLL 0.318 nats)", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        outs = {side: Path(tmp) / f"{side}.pt" for side in ("torchgfn", "ours")}
        torch.save({"train": torch.as_tensor(data.train), "held_out": torch.as_tensor(data.test[:EVAL_POINTS])}, Path(tmp) / "data.pt")
        wall = run_sides(__file__, {"torchgfn": a.torchgfn_python, "ours": a.ours_python}, a, outs)
        theirs, ours = (torch.load(outs[s], weights_only=False) | {"wall": wall[s]} for s in ("torchgfn", "ours"))
    mo, mt = ours["meta"], theirs["meta"]
    print(f"torch {mo['torch']} (ours) / {mt['torch']} (torchgfn side), torchgfn {mt['torchgfn']}, threads {mo['threads']} / {mt['threads']}, "
          f"parameters {mo['parameters']} / {mt['parameters']}; max |sum log P_F - (-MLEDiffusion.loss)| of the torchgfn walk: {mt['walk_vs_MLEDiffusion_loss']:.2e}")
    for r in (ours, theirs):
        r["s_mean"], r["s_median"] = float(np.mean(r["seconds"])), float(np.median(r["seconds"]))
    print(f"{'':32s} {'ours':>16s} {'torchgfn':>16s} {'ours/torchgfn':>14s}")
    for name, key in (("s/step (mean)", "s_mean"), ("s/step (median)", "s_median")):
        print(f"{name:32s} {ours[key]:16.4f} {theirs[key]:16.4f} {ours[key] / theirs[key]:14.3f}")
    for name, key in (("NLL bound (nats)", "nll_bound"), (f"IW bound, K = {a.samples} (nats)", "nll_iw")):
        print(f"{name:32s} {ours[key]:9.3f} ± {ours[key + '_se']:.3f} {theirs[key]:9.3f} ± {theirs[key + '_se']:.3f}")
    print(f"{'wall of its turns (s)':32s} {ours['wall']:16.1f} {theirs['wall']:16.1f}")
    keys = ("s_mean", "s_median", "nll_bound", "nll_bound_se", "nll_iw", "nll_iw_se", "wall")
    print("JSON " + json.dumps({"iterations": a.iterations, "seed": a.seed, "K": a.samples, "ours": {k: ours[k] for k in keys}, "torchgfn": {k: theirs[k] for k in keys} | {"torchgfn": mt["torchgfn"]}}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
