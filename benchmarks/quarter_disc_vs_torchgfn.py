"""Quarter disc against torchgfn's polar Box: seconds per training iteration and JSD after the same iterations.

usage: python benchmarks/quarter_disc_vs_torchgfn.py [--iterations 2000 | --quick] [--seed 0] [--samples 10000]
       [--torchgfn-python PATH] [--ours-python PATH] [--torchgfn-debug]

Both sides train the same problem with the same settings: step rho = 0.25 (torchgfn's ``delta``), TB,
learned P_B tied to the P_F torso on both sides (the paper's "learned P_B"; torchgfn's ``trunk`` sharing, whose
own head is the only extra P_B parameter group, as the tutorial's tied option), Beta-mixture policies with 4 components at s0
and 2 elsewhere, concentrations in [0.1, 5.1], MLPs of 4 Linear+ELU blocks of width 128, batch 128,
Adam at lr 1e-3 for the policies and for log Z (the paper's and the tutorial's defaults), the
learning rate halved every 2,500 iterations, and the same number of iterations. torchgfn is driven
through its public API the way its ``tutorials/examples/train_box_legacy.py`` drives it (``BoxPolar``,
``BoxPFMLP``/``BoxPBMLP``, ``BoxPFEstimator``/``BoxPBEstimator``, ``TBGFlowNet``, ``Sampler`` with saved
log-probs, elementwise gradient clamp to [-10, 10]); ours uses the library's objects and the training
step of :class:`gflownet_measure.training.Trainer` (``make_graph``/``make_policies``, ``OBJECTIVES["tb"]``,
``make_optimizer``, ``make_scheduler``, ``sample_forward``, global gradient-norm clip 10). The child-process harness is ``benchmarks/peer.py``.

Each side runs in its own child process (taking turns of ``--chunk`` iterations, never at the same time: see ``benchmarks/peer.py``) with one torch
thread. The seconds per iteration are timed the same way for both: ``time.perf_counter`` around each
whole training iteration (sample a batch, loss, backward, clip, optimiser and scheduler step), nothing
else. After training each side draws ``--samples`` terminal states from its sampler, and the parent
scores both sets with OUR metric code (:mod:`gflownet_measure.metrics` through
``gflownet_measure.experiments.quarter_disc.Reference``): JSD on the 100 x 100 grid between the exponential-kernel KDE
(bandwidth 0.1) of the samples and (a) the exact normalised reward, (b) the KDE of as many rejection
samples from R (bound 2.6); and the level TV (the samples' mass on the reward's levels 0.1 / 0.6 / 2.6 against the
exact masses). Figures are printed, never asserted; the ratios ours / torchgfn are measured
in the same run, which is what to compare across machines (these are shared and noisy).

It needs an interpreter where both gflownet-measure and torchgfn import (torchgfn is a benchmark-only
extra, ``pip install -e .[bench]``, never a runtime dependency), for instance::

    python3 -m venv /tmp/benchvenv
    /tmp/benchvenv/bin/pip install torch==2.13.0 torchgfn==2.4.1 numpy scipy matplotlib tqdm
    /tmp/benchvenv/bin/pip install -e . --no-deps
    /tmp/benchvenv/bin/python benchmarks/quarter_disc_vs_torchgfn.py

or keep the two apart: run it with the project's interpreter and point ``--torchgfn-python`` at one
where torchgfn imports (the torchgfn child imports neither ``environments`` nor ``gflownet_measure``;
the parent and our child do).
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

RHO = 0.25
BATCH = 128
HIDDEN = 128
N_LAYERS = 4  # Linear+ELU blocks before each head; torchgfn's n_hidden_layers counts the same blocks
N_COMPONENTS_S0, N_COMPONENTS = 4, 2
C_MIN, C_MAX = 0.1, 5.1
LR, LR_LOGZ, MILESTONE, GAMMA = 1e-3, 1e-3, 2500, 0.5


def _train_ours(a, turns: Turns) -> tuple[list[float], np.ndarray, float, dict]:
    """Our quarter disc: the library's graph, policies, TB objective, optimiser, schedule and Trainer step."""
    from gflownet_measure.environments import quarter_disc as env
    from gflownet_measure.experiments.common import make_scheduler
    from gflownet_measure.experiments.training_config import TrainingConfig
    from gflownet_measure.objectives import OBJECTIVES, GFlowNet
    from gflownet_measure.rollout import sample_forward
    from gflownet_measure.training import make_optimizer, seed_everything

    seed_everything(a.seed)
    training = TrainingConfig(steps=a.iterations, lr_milestone=MILESTONE, lr_gamma=GAMMA)
    space = env.QuarterDiscConfig(rho=RHO, backward="learned", hidden=HIDDEN, n_layers=N_LAYERS, n_components_s0=N_COMPONENTS_S0, n_components=N_COMPONENTS)
    graph = env.make_graph(space)
    pf, pb = env.make_policies(graph, space)
    gfn = GFlowNet(pf, pb)
    optimizer = make_optimizer(gfn, LR, LR_LOGZ)
    scheduler = make_scheduler(optimizer, training)
    objective = OBJECTIVES["tb"]
    grad_clip = training.grad_clip

    def step(k: int) -> float:  # the body of Trainer.run, less its evaluation and checkpoint bookkeeping
        loss = objective(gfn, objective.sample(graph, gfn, BATCH))
        value = float(loss.detach())
        if not math.isfinite(value):
            raise RuntimeError(f"ours: loss is {value}")
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        params = [p for g in optimizer.param_groups for p in g["params"] if p.grad is not None]
        torch.nn.utils.clip_grad_norm_(params, grad_clip)
        optimizer.step()
        scheduler.step()
        return value

    seconds = timed(step, a.iterations, "ours", turns, a.chunk, a.seconds, a.turns)
    with torch.no_grad():
        x = sample_forward(graph, gfn.pf, a.samples).terminal
    meta = {"parameters": sum(p.numel() for p in gfn.parameters())}
    return seconds, x.double().numpy(), float(gfn.log_Z.detach()), meta


def _train_torchgfn(a, turns: Turns) -> tuple[list[float], np.ndarray, float, dict]:
    """torchgfn's BoxPolar, driven through its public API as train_box_legacy.py does (TB, learned P_B tied to the P_F trunk)."""
    import gfn as torchgfn
    from gfn.gflownet import TBGFlowNet
    from gfn.gym import BoxPolar
    from gfn.gym.helpers.box_utils import BoxPBEstimator, BoxPBMLP, BoxPFEstimator, BoxPFMLP
    from gfn.samplers import Sampler
    from gfn.utils.common import set_seed

    set_seed(a.seed)
    env = BoxPolar(delta=RHO, epsilon=1e-10, device="cpu", debug=a.torchgfn_debug)
    pf_module = BoxPFMLP(hidden_dim=HIDDEN, n_hidden_layers=N_LAYERS, n_components=N_COMPONENTS, n_components_s0=N_COMPONENTS_S0)
    pb_module = BoxPBMLP(hidden_dim=HIDDEN, n_hidden_layers=N_LAYERS, n_components=N_COMPONENTS, trunk=pf_module.trunk)
    pf = BoxPFEstimator(env, pf_module, n_components_s0=N_COMPONENTS_S0, n_components=N_COMPONENTS, min_concentration=C_MIN, max_concentration=C_MAX)
    pb = BoxPBEstimator(env, pb_module, n_components=N_COMPONENTS, min_concentration=C_MIN, max_concentration=C_MAX)
    gflownet = TBGFlowNet(pf=pf, pb=pb)
    sampler = Sampler(estimator=pf)
    log_z = dict(gflownet.named_parameters())["logZ"]
    optimizer = torch.optim.Adam(pf_module.parameters(), lr=LR)
    optimizer.add_param_group({"params": pb_module.last_layer.parameters(), "lr": LR})  # the trunk is P_F's
    optimizer.add_param_group({"params": [log_z], "lr": LR_LOGZ})
    milestones = [i * MILESTONE for i in range(1, 1 + a.iterations // MILESTONE)]
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=GAMMA)

    def step(k: int) -> float:
        trajectories = sampler.sample_trajectories(env, n=BATCH, save_logprobs=True)
        optimizer.zero_grad()
        loss = gflownet.loss_from_trajectories(env, trajectories, recalculate_all_logprobs=False)
        loss.backward()
        for p in gflownet.parameters():
            if p.ndim > 0 and p.grad is not None:  # log Z is not clamped, as in the tutorial
                p.grad.data.clamp_(-10, 10).nan_to_num_(0.0)
        optimizer.step()
        scheduler.step()
        return loss.item()

    seconds = timed(step, a.iterations, "torchgfn", turns, a.chunk, a.seconds, a.turns)
    with torch.no_grad():
        x = gflownet.sample_terminating_states(env, a.samples).tensor
    meta = {"parameters": sum(p.numel() for p in gflownet.parameters()), "torchgfn": torchgfn.__version__}
    return seconds, x.double().numpy(), float(log_z.detach()), meta


def _child(a) -> None:
    """One side, in this process: train, sample, and write the figures to ``a.out`` (npz)."""
    one_thread()
    turns = Turns()
    seconds, x, log_z, meta = (_train_ours if a.side == "ours" else _train_torchgfn)(a, turns)
    meta |= {"threads": torch.get_num_threads(), "torch": torch.__version__, "python": sys.executable}
    np.savez(a.out, seconds=np.asarray(seconds), x=x, log_Z=log_z, meta=json.dumps(meta))
    turns.give()


def _run_sides(a, workdir: Path) -> dict[str, dict]:
    """Both sides in child interpreters with one thread each, taking turns; each one's seconds, samples, log Z and metadata."""
    outs = {side: workdir / f"{side}.npz" for side in ("torchgfn", "ours")}
    wall = run_sides(__file__, {"torchgfn": a.torchgfn_python, "ours": a.ours_python}, a, outs)
    results = {}
    for side, out in outs.items():
        with np.load(out) as z:
            results[side] = {"seconds": z["seconds"], "x": torch.from_numpy(z["x"]), "log_Z": float(z["log_Z"]), "meta": json.loads(str(z["meta"])), "wall": wall[side]}
    return results


def main() -> None:
    p = parser(__doc__, 10000, "terminal states per sampler for the JSD (and rejection samples)", "BoxPolar(debug=True), as the tutorial's debug=__debug__ gives outside python -O")
    a = p.parse_args()
    if a.quick:
        a.iterations = 200
    if a.side:
        _child(a)
        return

    from gflownet_measure.environments import quarter_disc as env
    from gflownet_measure.experiments.quarter_disc import Reference
    from gflownet_measure.metrics import grid_jsd

    print(f"quarter disc vs torchgfn BoxPolar: rho={RHO}, TB, learned P_B (tied to the P_F torso), batch {BATCH}, {a.iterations} iterations, "
          f"Adam lr {LR} (log Z {LR_LOGZ}), seed {a.seed}, {a.samples} samples per sampler", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        sides = _run_sides(a, Path(tmp))
    theirs, ours = sides["torchgfn"], sides["ours"]
    torch.set_num_threads(1)
    ref = Reference.build(a.samples, 0.1, seed=a.seed)
    for r in (ours, theirs):
        r |= ref.scores(r["x"])
        r["outside"] = int(((r["x"] < 0) | (r["x"] > 1)).any(1).sum())

    mo, mt = ours["meta"], theirs["meta"]
    print(f"torch {mo['torch']} (ours) / {mt['torch']} (torchgfn side), torchgfn {mt['torchgfn']}, "
          f"torch threads per side: ours {mo['threads']}, torchgfn {mt['threads']} (each in its own process, taking turns of {a.chunk} iterations)")
    print(f"trainable parameters: ours {mo['parameters']}, torchgfn {mt['parameters']}; torchgfn BoxPolar debug={a.torchgfn_debug}")
    rows = [
        ("s/iteration (mean)", float(np.mean(ours["seconds"])), float(np.mean(theirs["seconds"])), "{:.4f}"),
        ("s/iteration (median)", float(np.median(ours["seconds"])), float(np.median(theirs["seconds"])), "{:.4f}"),
        (f"JSD to exact grid @{a.iterations}", ours["jsd_exact"], theirs["jsd_exact"], "{:.5f}"),
        (f"JSD to rejection KDE @{a.iterations}", ours["jsd_rejection"], theirs["jsd_rejection"], "{:.5f}"),
        (f"level TV @{a.iterations}", ours["level_tv"], theirs["level_tv"], "{:.4f}"),
    ]
    print(f"{'':34s} {'ours':>10s} {'torchgfn':>10s} {'ours/torchgfn':>14s}")
    for name, o, t, fmt in rows:
        print(f"{name:34s} {fmt.format(o):>10s} {fmt.format(t):>10s} {o / t:14.3f}")
    print(f"{'learned log Z (exact ' + format(env.LOG_Z, '.4f') + ')':34s} {ours['log_Z']:10.4f} {theirs['log_Z']:10.4f}")
    print(f"{'samples outside [0,1]^2':34s} {ours['outside']:10d} {theirs['outside']:10d}")
    print(f"{'wall of its turns (s, incl. sampling)':34s} {ours['wall']:10.1f} {theirs['wall']:10.1f}")
    print(f"JSD floor (the {a.samples} rejection samples themselves vs the exact grid): {grid_jsd(ref.log_kde, ref.log_R):.5f}")


if __name__ == "__main__":
    main()
