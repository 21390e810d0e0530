"""JSP-GFN's time per update against the public JAX implementation (Deleu et al. 2023; tristandeleu/jax-jsp-gfn), one core each.

usage: PYTHONPATH=. python benchmarks/jsp_vs_jax.py --jax-checkout PATH --jax-python PATH [--d 5] [--model lingauss-full]
           [--batch 64] [--theta-samples 64] [--n-data 100] [--updates 30] [--warmup 10] [--rounds 3] [--cpu 0] [--seed 0]
           [--out benchmarks/results/jsp_vs_jax.json]

The JAX side needs a checkout of the public code at commit d53b3b6 (``git clone https://github.com/tristandeleu/jax-jsp-gfn``;
nothing of it is copied here) and an interpreter with its dependencies. ``benchmarks/setup_jax_peer.sh`` makes both (by
default in ../jax-jsp-gfn and ../jax-jsp-gfn-venv, beside this repository) and prints this script's command line. The
versions that run the public code unchanged on Python 3.11 (the script's pins):
``pip install jax==0.4.13 jaxlib==0.4.13 ml_dtypes==0.2.0 dm-haiku==0.0.10 chex==0.1.82 optax==0.1.4 jraph==0.0.6.dev0
gym==0.26.2 pandas==2.2.3 numpy==1.26.4 scipy==1.11.4 tqdm==4.67.1``
(optax 0.1.4 is the public code's pin and needs a JAX that still has ``jnp.DeviceArray``, removed after 0.4.13;
``ml_dtypes<0.3`` for that JAX; ``numpy<2`` because the public code uses ``np.float_``).

At d = 20 (``--d 20``; both sides: uniform graph prior, no limit on parents, ER2 data, noise variance 0.01): one
iteration takes about a second on the JAX side, its warm-up minutes of XLA compilation (``DAGGFlowNet.step`` anew per
padded graph size; about 2 min in all on one loaded CPU), so fewer iterations fit: e.g. ``--d 20 --updates 10 --warmup 3 --rounds 2``.

What one iteration is, on each side (the same work; d, B, S, N and the data are the same):

* one collection step of 8 parallel walkers (theirs: ``DAGGFlowNet.act`` + ``GFlowNetDAGEnv.step`` +
  ``ReplayBuffer.add``; ours: ``Walkers.step`` + ``TransitionBuffer.add``), with 10% uniform moves;
* one update: B transitions from the replay buffer, the undirected sub-trajectory balance loss of JSP-GFN eq. 8 with S
  fresh theta samples at both ends (delta 1), its gradient, and an Adam step (theirs: ``DAGGFlowNet.step``, jit-compiled,
  which always adds the length-2 penalty of eq. C.21; ours: ``benchmarks/jsp_scaling.py``'s ``measure``, once without
  the penalty, as a run trains by default, and once with it, the public code's objective).

The data are the training rows of a run (``make_problem``: ER2 graph, N rows, noise variance 0.01), written to a
``.npy`` file for the JAX side. Each side runs in a fresh interpreter pinned to CPU ``--cpu`` (``sched_setaffinity``),
one torch thread / XLA without its thread pool, ``--warmup`` untimed iterations (XLA's compilation falls there) and
``--updates`` timed ones; ``--rounds`` rounds in the order ours, theirs, theirs, ours, ... so that a drift in the
machine's load falls on both. Reported: the median over all timed iterations of each side and the ratio ours / theirs;
beside it, from JAX's own log (``jax_log_compiles``), how many of the JAX side's timed iterations held an XLA
compilation (the public code pads each batch's graphs to a power of two of edges, and each new size compiles anew) and
its median without them.
Precision differs: JAX computes in float32, ours the reward in float64 (the closed forms' exactness at d <= 5).
Figures are printed and written (``--out`` JSON and the same name with ``.md``), never asserted.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jsp_scaling import write_results  # benchmarks/ is sys.path[0] when a script here runs

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "jsp_vs_jax.json"
JAX_MODELS = {"lingauss-diag": "lingauss_diag", "lingauss-full": "lingauss_full"}  # ours -> the public code's name
_RESULT = "JSP_VS_JAX_RESULT "
_XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def _pin(cpu: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})


def measure_jax(spec: dict) -> dict:
    """Seconds per iteration of the public JAX code (module docstring), in this interpreter (the JAX one)."""
    _pin(spec["cpu"])
    sys.path.insert(0, spec["checkout"])
    import jax
    import jax.numpy as jnp
    import numpy as np
    import optax
    from dag_gflownet.env import GFlowNetDAGEnv
    from dag_gflownet.gflownet import DAGGFlowNet
    from dag_gflownet.models.priors import UniformPrior
    from dag_gflownet.utils.data import Dataset
    from dag_gflownet.utils.factories import get_model
    from dag_gflownet.utils.jraph_utils import to_graphs_tuple
    from dag_gflownet.utils.replay_buffer import ReplayBuffer

    compiled = []  # seconds of each XLA compilation, from JAX's own log (jax_log_compiles), not from a guess

    class _Compilations(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            message = record.getMessage()
            if message.startswith("Finished XLA compilation of "):
                compiled.append(float(message.rsplit(" in ", 1)[1].split()[0]))

    jax.config.update("jax_log_compiles", True)
    jax_log = logging.getLogger("jax")
    jax_log.addHandler(_Compilations())
    jax_log.propagate = False  # counted, not printed

    x = np.load(spec["data"]).astype(np.float32)
    N, d = x.shape
    data = Dataset(data=jnp.asarray(x), interventions=jnp.zeros_like(jnp.asarray(x)))
    env = GFlowNetDAGEnv(num_envs=8, num_variables=d)
    replay = ReplayBuffer(100000, num_variables=d)
    model = get_model(JAX_MODELS[spec["model"]], UniformPrior(), data, spec["obs_scale"])
    gfn = DAGGFlowNet(model=model, delta=1.0, num_samples=spec["theta_samples"], update_target_every=0, dataset_size=N, batch_size=None)
    key = jax.random.PRNGKey(spec["seed"])
    key, sub = jax.random.split(key)
    params, state = gfn.init(sub, optax.adam(1e-4), replay.dummy["graph"], replay.dummy["mask"])
    rng = np.random.default_rng(spec["seed"])
    norm = jnp.array(N)
    live = {"obs": env.reset(), "indices": None, "key": key, "params": params, "state": state}

    def collect(epsilon: float) -> None:  # train.py's loop body; epsilon there is the probability of the policy's move
        obs = live["obs"]
        obs["graph"] = to_graphs_tuple(obs["adjacency"])
        actions, live["key"], logs = gfn.act(live["params"].online, live["key"], obs, jnp.array(epsilon), norm)
        nxt, delta, dones, _ = env.step(np.asarray(actions))
        live["indices"] = replay.add(obs, np.asarray(actions), np.asarray(logs["is_exploration"]), nxt, delta, dones, prev_indices=live["indices"])
        live["obs"] = nxt

    t0 = time.perf_counter()
    while len(replay) < 2 * spec["batch"]:
        collect(0.0)
    setup_s = time.perf_counter() - t0

    def iteration() -> float:
        collect(0.9)
        samples = replay.sample(batch_size=spec["batch"], rng=rng)
        live["params"], live["state"], logs = gfn.step(live["params"], live["state"], samples, data, norm)
        return float(logs["loss"])  # float() waits for the asynchronous computation

    t = time.perf_counter()
    losses = [iteration() for _ in range(spec["warmup"])]
    warmup_s = time.perf_counter() - t
    untimed = len(compiled)
    times, compiles = [], []  # compiles[i]: XLA compilations within timed iteration i (a new padded graph size)
    for _ in range(spec["updates"]):
        before = len(compiled)
        t = time.perf_counter()
        losses.append(iteration())
        times.append(time.perf_counter() - t)
        compiles.append(len(compiled) - before)
    return {"side": "jax", "times": times, "compiles": compiles, "untimed_compiles": untimed, "untimed_compile_s": sum(compiled[:untimed]), "setup_s": setup_s, "warmup_s": warmup_s, "last_loss": losses[-1],
            "jax": jax.__version__, "dtype": str(jnp.zeros(()).dtype), "load1": os.getloadavg()[0]}


def measure_ours(spec: dict) -> dict:
    """Seconds per iteration of ours: ``jsp_scaling.measure`` (collection step + update), pinned to one CPU."""
    _pin(spec["cpu"])
    from jsp_scaling import measure

    r = measure({k: spec[k] for k in ("d", "model", "n_data", "batch", "theta_samples", "updates", "warmup", "seed", "penalty")} | {"threads": 1, "batch_size_data": 0})
    return {"side": "ours+penalty" if spec["penalty"] else "ours", "times": r["times"], "setup_s": r["setup_s"], "last_loss": r["last_loss"], "load1": r["load1"]}


def _child(python: str, mode: str, spec: dict, timeout: float) -> dict:
    env = dict(os.environ, XLA_FLAGS=_XLA_ONE_THREAD, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    try:
        p = subprocess.run([python, __file__, mode, json.dumps(spec)], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"jsp_vs_jax: the {mode} side timed out after {timeout:.0f} s")
    lines = [line for line in p.stdout.splitlines() if line.startswith(_RESULT)]
    if p.returncode != 0 or not lines:
        raise SystemExit(f"jsp_vs_jax: the {mode} side failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(lines[-1][len(_RESULT):])


def _write_data(d: int, model: str, n: int, seed: int, folder: Path) -> tuple[Path, float]:
    """A run's training rows (``make_problem``) as ``.npy``, and the noise standard deviation of its Gaussian CPDs."""
    import numpy as np

    from gflownet_measure.environments import dag_params as env

    cfg = env.DagParamsConfig(d=d, model=model, edges_per_node=2, n_data=n, data_seed=seed)
    path = folder / "train.npy"
    np.save(path, env.make_problem(cfg).model.data.numpy())
    return path, cfg.obs_var**0.5


def markdown(result: dict) -> str:
    m, s = result["meta"], result["summary"]
    lines = [
        "# JSP-GFN per update: ours (PyTorch) against the public JAX code",
        "",
        f"d = {m['d']}, {m['model']}, B = {m['batch']} transitions, S = {m['theta_samples']} theta samples, N = {m['n_data']} rows; "
        f"one CPU each (CPU {m['cpu']}), one thread; {m['rounds']} rounds of {m['updates']} timed iterations after {m['warmup']} warm-up per side; "
        f"torch {m['torch']}, JAX {m.get('jax', '?')} ({m.get('jax_dtype', '?')}), Python {m['python']}; "
        f"load average at the start {m['load_start']:.2f}, at the end {m['load_end']:.2f}; {m['wall_s']:.0f} s in all.",
        "",
        "| side | ms per iteration (median) | (min) | ratio to JAX (median) |",
        "|---|---:|---:|---:|",
    ]
    for side in ("ours", "ours+penalty", "jax"):
        r = s[side]
        lines.append(f"| {side} | {r['median'] * 1e3:.1f} | {r['min'] * 1e3:.1f} | {r['median'] / s['jax']['median']:.2f} |")
    j = s["jax"]
    if "compiling_iterations" in j:
        steady = "none" if j["median_without_compiles"] is None else f"{j['median_without_compiles'] * 1e3:.1f} ms"
        lines += ["", f"JAX: {j['compiling_iterations']} of its {j['n']} timed iterations held an XLA compilation (a new padded graph size); "
                  f"its median without them: {steady}."]
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--jax-checkout", type=Path, help="a checkout of tristandeleu/jax-jsp-gfn")
    p.add_argument("--jax-python", help="an interpreter with JAX and the public code's dependencies (module docstring)")
    p.add_argument("--d", type=int, default=5)
    p.add_argument("--model", default="lingauss-full", choices=tuple(JAX_MODELS))
    p.add_argument("--batch", type=int, default=64, help="B: replayed transitions per update (the paper preset's)")
    p.add_argument("--theta-samples", type=int, default=64, help="S: theta samples at each end (the paper preset's)")
    p.add_argument("--n-data", type=int, default=100, help="N: simulated training rows")
    p.add_argument("--updates", type=int, default=30, help="timed iterations per side and round")
    p.add_argument("--warmup", type=int, default=10, help="untimed iterations before them (JAX compiles here, once per padded graph size)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--cpu", type=int, default=0, help="the CPU both sides are pinned to, one after the other")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per side and round")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file; the table goes beside it with the suffix .md")
    return p


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in ("--child-jax", "--child-ours"):
        spec = json.loads(argv[1])
        print(_RESULT + json.dumps(measure_jax(spec) if argv[0] == "--child-jax" else measure_ours(spec)), flush=True)
        return {}
    a = parser().parse_args(argv)
    if a.jax_checkout is None or a.jax_python is None:
        raise SystemExit("jsp_vs_jax: give --jax-checkout (a checkout of tristandeleu/jax-jsp-gfn) and --jax-python (an interpreter with JAX; see the module docstring)")
    if not (a.jax_checkout / "dag_gflownet" / "gflownet.py").is_file():
        raise SystemExit(f"jsp_vs_jax: --jax-checkout {a.jax_checkout} holds no dag_gflownet/gflownet.py; give a checkout of tristandeleu/jax-jsp-gfn")
    import torch

    t0 = time.perf_counter()
    meta = {"d": a.d, "model": a.model, "batch": a.batch, "theta_samples": a.theta_samples, "n_data": a.n_data, "updates": a.updates,
            "warmup": a.warmup, "rounds": a.rounds, "cpu": a.cpu, "seed": a.seed, "torch": torch.__version__,
            "python": platform.python_version(), "load_start": os.getloadavg()[0], "argv": argv}
    common = {k: getattr(a, k) for k in ("d", "model", "batch", "theta_samples", "n_data", "updates", "warmup", "cpu", "seed")}
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        data, obs_scale = _write_data(a.d, a.model, a.n_data, a.seed, Path(tmp))
        jax_spec = common | {"checkout": str(a.jax_checkout.resolve()), "data": str(data), "obs_scale": obs_scale}
        for r in range(a.rounds):
            order = ("ours", "jax") if r % 2 == 0 else ("jax", "ours")
            for side in order:
                if side == "jax":
                    got = [_child(a.jax_python, "--child-jax", jax_spec, a.timeout)]
                else:
                    got = [_child(sys.executable, "--child-ours", common | {"penalty": p}, a.timeout) for p in (False, True)]
                for g in got:
                    runs.append(g | {"round": r})
                    compiles = f"; XLA compilations: {g['untimed_compiles']} untimed ({g['untimed_compile_s']:.0f} s), {sum(g['compiles'])} timed" if side == "jax" else ""
                    print(f"  round {r}: {g['side']:<13} {statistics.median(g['times']) * 1e3:8.1f} ms/iteration (load {g['load1']:.2f}{compiles})", flush=True)
    summary = {}
    for side in ("ours", "ours+penalty", "jax"):
        times = [t for g in runs if g["side"] == side for t in g["times"]]
        summary[side] = {"median": statistics.median(times), "min": min(times), "n": len(times)}
    for side in ("ours", "ours+penalty"):
        summary[side]["ratio_to_jax"] = summary[side]["median"] / summary["jax"]["median"]
    jax_runs = [g for g in runs if g["side"] == "jax"]
    steady = [t for g in jax_runs for t, c in zip(g["times"], g["compiles"]) if c == 0]
    summary["jax"] |= {"compiling_iterations": sum(c > 0 for g in jax_runs for c in g["compiles"]),
                       "median_without_compiles": statistics.median(steady) if steady else None}
    jax_run = next(g for g in runs if g["side"] == "jax")
    meta |= {"jax": jax_run["jax"], "jax_dtype": jax_run["dtype"], "load_end": os.getloadavg()[0], "wall_s": time.perf_counter() - t0}
    result = {"meta": meta, "summary": summary, "runs": runs}
    write_results(a.out, result, markdown(result))
    return result


if __name__ == "__main__":
    main()
