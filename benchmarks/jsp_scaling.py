"""JSP-GFN's cost as d grows on CPU: seconds and peak memory per training update, and mini-batch rewards (eq. 13).

usage: PYTHONPATH=. python benchmarks/jsp_scaling.py [--dims 5,10,20] [--models lingauss-diag,mlp] [--batch 64]
           [--theta-samples 16,4] [--updates 5] [--warmup 2] [--mb-updates 3] [--paths-dim 20] [--paths-models lingauss-diag,mlp]
           [--threads 1] [--quick] [--out benchmarks/results/jsp_scaling.json]

One update is built as ``gflownet_measure/experiments/jsp_gfn.py`` builds it: ``DagParamsConfig(d, model, edges_per_node=2)``,
``make_problem``, ``make_graph``, ``make_policies``; a replay buffer of edge transitions filled by
``Walkers(graph, 8)`` (uniform moves until it holds 2 B transitions); then, per update, one ``walkers.step(pf, 0.1)``
into the replay, B replayed transitions, ``UNDIRECTED_SUBTB`` with S fresh theta samples at both ends (delta 1, no
penalty unless the spec asks), its backward pass and an Adam step (``make_optimizer``; no EMA, no clipping, no evaluation).

Three tables:

* scaling: d x model x S on the simulated data of a run (N = ``--n-data`` rows, the full-data reward);
* mini-batch rewards: at d = 11 (Sachs' size) on N = 7,466 simulated rows, the full-data reward against the estimate of
  eq. 13 on M = 100 fresh rows per update (``gflownet_measure.experiments.jsp_gfn._log_reward``), for lingauss-diag, mlp and
  categorical-mlp (the data of ``simulate_er`` cut at each column's tertiles into states 0, 1, 2, read from a CSV).
  S is ``--mb-theta-samples`` (4): the MLP models hold ``S * B * M * d * H`` doubles per hidden layer, 3.4 GB for the
  full data at S = 16; a configuration whose estimated peak exceeds ``--max-gb`` is reported as skipped.
* materialised vs fast kernels: at d = ``--paths-dim`` (20) for each of ``--paths-models``, S = ``--paths-theta-samples``, the
  same update with the kernels on their materialised path (:class:`~gflownet_measure.kernels.Materialised`: every child
  state of :math:`\\kappa` and :math:`\\kappa_b` built, ``[B, K, D]``) and on their fast one (:meth:`~gflownet_measure.kernels.Kernel.outline`),
  alternating update by update in one process (the order swapped every round), so that both see the same load; the ratio
  is the median over rounds of fast / materialised.

Time: the median (and the minimum) of ``--updates`` timed updates after ``--warmup`` untimed ones (mini-batch table:
``--mb-updates`` after one).
The scaling and mini-batch tables use the fast path (the library's default).
Memory: each configuration runs in a fresh subprocess; ``peak_mb`` is the rise of ``resource.getrusage(RUSAGE_SELF).ru_maxrss``
over the updates (warm-up included: Adam's state, autograd's buffers), measured from after the set-up (data, model,
policy, prefilled replay); ``rss_mb`` the subprocess's peak RSS. tracemalloc would not see torch's allocator.

Figures are printed and written (``--out`` JSON and the same name with ``.md``), never asserted. The thread count and
the load average (``os.getloadavg``) at the start and end of the run are in both: these machines are shared and noisy.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "jsp_scaling.json"
MEMORY_METHOD = "ru_maxrss rise over the updates, fresh subprocess per configuration"
_RESULT = "JSP_SCALING_RESULT "  # the child's one line of results on stdout (a library may print too)


def _maxrss_mb() -> float:
    import resource

    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024.0 if sys.platform != "darwin" else kb / 2**20  # kilobytes on Linux, bytes on macOS


def _hidden(model: str) -> int:
    """The widest per-row intermediate of a CPD model's log-likelihood (hidden units; 1 for the linear Gaussian's Gram form)."""
    return {"mlp": 5, "categorical-mlp": 16}.get(model, 0)


def estimate_gb(model: str, d: int, rows: int, batch: int, theta_samples: int) -> float:
    """A rough peak (GB) of one update's log-reward: three ``[S, B, rows, d, H]`` float64 tensors alive at once for the
    MLP models (the hidden layer, its ReLU, the second einsum's input); the linear Gaussian reads the Gram matrix (``O(d^3)``)."""
    H = _hidden(model)
    if H == 0:
        return 3 * theta_samples * batch * d**3 * 8 / 1e9
    return 3 * theta_samples * batch * rows * d * H * 8 / 1e9


# ---------------------------------------------------------------- one configuration (in a fresh subprocess)


def _categorical_csv(d: int, n: int, seed: int, folder: Path) -> Path:
    """Integer data of Sachs' kind: ``simulate_er`` rows cut at each column's tertiles into states 0, 1, 2, as a CSV."""
    import numpy as np

    from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er

    x = simulate_er(d, 2.0, n, 0, seed=seed).train.numpy()
    cuts = np.quantile(x, [1 / 3, 2 / 3], axis=0)  # [2, d]
    states = (x > cuts[0]).astype(int) + (x > cuts[1]).astype(int)
    path = folder / "categorical.csv"
    with path.open("w") as f:
        f.write(",".join(f"X{j}" for j in range(d)) + "\n")
        f.writelines(",".join(map(str, row)) + "\n" for row in states)
    return path


def measure(spec: dict) -> dict:
    """Time and memory of JSP-GFN updates for one configuration ``spec`` (d, model, n_data, batch, theta_samples,
    batch_size_data, updates, warmup, threads, seed; optional ``penalty``: the length-2 penalty of eq. C.21, default off
    as in a run; optional ``paths``: time the materialised path beside the fast one, alternating)."""
    import tempfile

    import torch

    from gflownet_measure.buffers import TransitionBuffer
    from gflownet_measure.environments import dag_params as env
    from gflownet_measure.jsp_gfn.dag_params.objective import UNDIRECTED_SUBTB, Transitions
    from gflownet_measure.jsp_gfn.dag_params.states import join, split
    from gflownet_measure.kernels import Materialised
    from gflownet_measure.objectives import GFlowNet
    from gflownet_measure.training import make_optimizer
    from gflownet_measure.walkers import Walkers

    torch.set_num_threads(spec["threads"])
    torch.manual_seed(spec["seed"])
    d, B, S, M = spec["d"], spec["batch"], spec["theta_samples"], spec["batch_size_data"]
    with tempfile.TemporaryDirectory() as tmp:
        if spec["model"] == "categorical-mlp":  # make_problem simulates continuous data only: a CSV of integer states
            data = str(_categorical_csv(d, spec["n_data"], spec["seed"], Path(tmp)))
            cfg = env.DagParamsConfig(data=data, model=spec["model"], edges_per_node=2)
        else:
            cfg = env.DagParamsConfig(d=d, model=spec["model"], edges_per_node=2, n_data=spec["n_data"], data_seed=spec["seed"])
        t0 = time.perf_counter()
        problem = env.make_problem(cfg)
    graph = env.make_graph(cfg, problem)
    pf, pb = env.make_policies(graph, cfg, problem)
    gfn = GFlowNet(pf, pb)
    model, P = problem.model, problem.model.n_params
    replay = TransitionBuffer(100000, d * d)
    walkers = Walkers(graph, 8)
    optimizer = make_optimizer(pf, 1e-4, lr_logZ=1e-4)

    def collect(epsilon: float) -> None:  # gflownet_measure/experiments/jsp_gfn.py, run.collect
        s, x, sink = walkers.step(pf, epsilon)
        adj, _, _ = split(s, d)
        adj_next, _, stopped = split(x, d)
        edge = ~sink & ~stopped
        replay.add(adj[edge].flatten(1), adj_next[edge].flatten(1))

    for _ in range(10000):
        if len(replay) >= 2 * B:
            break
        collect(1.0)
    setup_s = time.perf_counter() - t0

    def log_reward():  # gflownet_measure/experiments/jsp_gfn.py, _log_reward
        rows = torch.randperm(model.n)[:M] if 0 < M < model.n else None
        return lambda adj, theta: model.log_reward(adj, theta.double(), rows)

    def update() -> float:
        collect(0.1)
        adj, adj_next = replay.sample(B)
        s, s_next = join(adj.view(-1, d, d), P), join(adj_next.view(-1, d, d), P)
        loss = UNDIRECTED_SUBTB(gfn, Transitions(s, s_next, log_reward(), model.n), theta_samples=S, delta=1.0, penalty=spec.get("penalty", False))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        return float(loss)

    kernels = {"fast": (pf.kernel, pb.kernel), "materialised": (Materialised(pf.kernel), Materialised(pb.kernel))}
    paths = ("materialised", "fast") if spec.get("paths") else ("fast",)

    def timed(path: str) -> float:
        pf.kernel, pb.kernel = kernels[path]
        t = time.perf_counter()
        losses.append(update())
        return time.perf_counter() - t

    base = _maxrss_mb()
    load = os.getloadavg()[0]
    losses = []
    for _ in range(spec["warmup"]):
        for path in paths:
            timed(path)
    times = {path: [] for path in paths}
    for i in range(spec["updates"]):
        for path in paths[:: 1 if i % 2 == 0 else -1]:  # the order swapped every round: a drift of the load hits both
            times[path].append(timed(path))
    pf.kernel, pb.kernel = kernels["fast"]
    rss = _maxrss_mb()
    compared = {}
    if spec.get("paths"):
        full = times["materialised"]
        compared = {
            "s_per_update_materialised": statistics.median(full),
            "s_per_update_materialised_min": min(full),
            "times_materialised": full,
            "fast_over_materialised": statistics.median([f / m for f, m in zip(times["fast"], full)]),
        }
    return {
        **spec,
        "n": model.n,
        "n_params": P,
        "replay_size": len(replay),
        "s_per_update": statistics.median(times["fast"]),
        "s_per_update_min": min(times["fast"]),
        "times": times["fast"],
        **compared,
        "peak_mb": rss - base,
        "rss_mb": rss,
        "setup_s": setup_s,
        "last_loss": losses[-1],
        "loss_finite": all(map(lambda v: v == v and abs(v) != float("inf"), losses)),
        "load1": load,
        "torch_threads": torch.get_num_threads(),
    }


def _run_child(spec: dict, timeout: float) -> dict:
    """:func:`measure` in a fresh interpreter (its own peak RSS); on failure, the spec with ``error``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(spec["threads"])
    try:
        p = subprocess.run([sys.executable, __file__, "--child", json.dumps(spec)], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**spec, "error": f"timed out after {timeout:.0f} s"}
    lines = [line for line in p.stdout.splitlines() if line.startswith(_RESULT)]
    if p.returncode != 0 or not lines:
        tail = (p.stderr.strip().splitlines() or ["(no stderr)"])[-1]
        return {**spec, "error": f"exit {p.returncode}: {tail}"}
    return json.loads(lines[-1][len(_RESULT):])


# ---------------------------------------------------------------- the tables


def _ms(r: dict, key: str) -> str:
    return f"{r[key] * 1e3:.1f}" if key in r else "-"


def _mb(r: dict) -> str:
    return f"{r['peak_mb']:.0f}" if "peak_mb" in r else "-"


def _why(r: dict) -> str:
    return r.get("error") or r.get("skipped") or ""


def markdown(result: dict) -> str:
    meta = result["meta"]
    lines = [
        "# JSP-GFN cost per update (CPU)",
        "",
        f"torch {meta['torch']}, Python {meta['python']}, {meta['threads']} thread(s) per configuration, {meta['cpus']} CPUs; "
        f"load average (1, 5, 15 min) at the start {_load(meta['load_start'])}, at the end {_load(meta['load_end'])}; "
        f"scaling: median of {meta['updates']} timed updates after {meta['warmup']} warm-up; memory: {meta['memory_method']}; "
        f"{meta['wall_s']:.0f} s in all.",
        "",
        f"## Scaling in d (N = {meta['n_data']} rows, full-data reward, B = {meta['batch']})",
        "",
        "| d | model | P | S | ms/update (median) | ms/update (min) | peak MB | load1 | note |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["scaling"]:
        lines.append(f"| {r['d']} | {r['model']} | {r.get('n_params', '-')} | {r['theta_samples']} | {_ms(r, 's_per_update')} | {_ms(r, 's_per_update_min')} | {_mb(r)} | {r.get('load1', float('nan')):.2f} | {_why(r)} |")
    if result["minibatch"]:
        mb = result["minibatch"][0]
        lines += [
            "",
            f"## Mini-batch rewards (eq. 13): d = {mb['d']}, N = {mb['n_data']} rows, B = {mb['batch']}, S = {mb['theta_samples']}; median of {mb['updates']} timed updates after {mb['warmup']} warm-up",
            "",
            "| model | P | rows per reward | ms/update (median) | ms/update (min) | peak MB | full / mini-batch time | load1 | note |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---|",
        ]
        rows = result["minibatch"]
        for r in rows:
            M = r["batch_size_data"] or r["n_data"]
            ratio = ""
            if r["batch_size_data"]:
                full = next((f for f in rows if f["model"] == r["model"] and not f["batch_size_data"]), {})
                if "s_per_update" in full and "s_per_update" in r:
                    ratio = f"{full['s_per_update'] / r['s_per_update']:.1f} x"
            lines.append(f"| {r['model']} | {r.get('n_params', '-')} | {'all ' if not r['batch_size_data'] else ''}{M} | {_ms(r, 's_per_update')} | {_ms(r, 's_per_update_min')} | {_mb(r)} | {ratio} | {r.get('load1', float('nan')):.2f} | {_why(r)} |")
    if result.get("paths"):
        p = result["paths"][0]
        lines += [
            "",
            f"## Materialised vs fast kernels: d = {p['d']}, N = {p['n_data']} rows, B = {p['batch']}, S = {p['theta_samples']}; {p['updates']} timed updates of each path after {p['warmup']} warm-up, alternating in one process",
            "",
            "| d | model | P | ms/update materialised (median) | ms/update fast (median) | fast / materialised (median of rounds) | threads | load1 | note |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---|",
        ]
        for r in result["paths"]:
            lines.append(f"| {r['d']} | {r['model']} | {r.get('n_params', '-')} | {_ms(r, 's_per_update_materialised')} | {_ms(r, 's_per_update')} | {_ratio(r)} | {r.get('torch_threads', '-')} | {r.get('load1', float('nan')):.2f} | {_why(r)} |")
    return "\n".join(lines) + "\n"


def _ratio(r: dict) -> str:
    return f"{r['fast_over_materialised']:.2f}" if "fast_over_materialised" in r else "-"


def write_results(out: Path, result: dict, table: str) -> None:
    """``result`` as JSON at ``out`` and ``table`` beside it (suffix ``.md``); the table printed."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    out.with_suffix(".md").write_text(table)
    print("\n" + table)
    print(f"written: {out} and {out.with_suffix('.md')}")


def _load(v) -> str:
    return ", ".join(f"{x:.2f}" for x in v)


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _names(text: str) -> list[str]:
    return [v.strip() for v in text.split(",") if v.strip()]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dims", default="5,10,20", help="numbers of variables of the scaling table")
    p.add_argument("--models", default="lingauss-diag,mlp", help="CPD models of the scaling table")
    p.add_argument("--batch", type=int, default=64, help="B: replayed transitions per update")
    p.add_argument("--theta-samples", default="16,4", help="S: theta samples at each end (one row per value)")
    p.add_argument("--n-data", type=int, default=100, help="simulated rows N of the scaling table (a run's default)")
    p.add_argument("--mb-dim", type=int, default=11, help="d of the mini-batch table (Sachs: 11)")
    p.add_argument("--mb-rows", type=int, default=7466, help="N of the mini-batch table (Sachs: 7,466)")
    p.add_argument("--mb-batch-size-data", type=int, default=100, help="M: rows per mini-batch reward estimate")
    p.add_argument("--mb-theta-samples", type=int, default=4, help="S of the mini-batch table")
    p.add_argument("--mb-models", default="lingauss-diag,mlp,categorical-mlp", help="CPD models of the mini-batch table ('' : none)")
    p.add_argument("--mb-updates", type=int, default=3, help="timed updates per configuration of the mini-batch table (after one warm-up; full-data MLP updates take seconds)")
    p.add_argument("--paths-dim", type=int, default=20, help="d of the materialised vs fast table (0: none)")
    p.add_argument("--paths-models", default="lingauss-diag,mlp", help="CPD models of the materialised vs fast table")
    p.add_argument("--paths-theta-samples", type=int, default=16, help="S of the materialised vs fast table")
    p.add_argument("--max-gb", type=float, default=10.0, help="skip a configuration whose estimated peak exceeds this")
    p.add_argument("--updates", type=int, default=5, help="timed updates per configuration (the median is reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed updates before them")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout", type=float, default=1200.0, help="seconds per configuration")
    p.add_argument("--quick", action="store_true", help="d = 5 only (every table; no categorical model), 2 timed updates after 1 warm-up")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help="JSON file; the table goes beside it with the suffix .md")
    p.add_argument("--child", help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> dict:
    a = parser().parse_args(argv)
    if a.child:
        print(_RESULT + json.dumps(measure(json.loads(a.child))), flush=True)
        return {}
    if a.quick:
        a.dims, a.mb_dim, a.updates, a.warmup, a.mb_updates = "5", 5, 2, 1, 2
        a.paths_dim = min(a.paths_dim, 5)
        a.mb_models = ",".join(m for m in _names(a.mb_models) if m != "categorical-mlp")
    import torch

    t0 = time.perf_counter()
    meta = {
        "torch": torch.__version__, "python": platform.python_version(), "threads": a.threads, "cpus": os.cpu_count(),
        "load_start": list(os.getloadavg()), "updates": a.updates, "warmup": a.warmup, "batch": a.batch, "n_data": a.n_data,
        "memory_method": MEMORY_METHOD, "quick": a.quick, "seed": a.seed, "argv": sys.argv[1:] if argv is None else list(argv),
    }
    print(f"JSP-GFN scaling: torch {meta['torch']}, {a.threads} thread(s), load average {_load(meta['load_start'])}", flush=True)
    common = {"batch": a.batch, "updates": a.updates, "warmup": a.warmup, "threads": a.threads, "seed": a.seed}

    def run(spec: dict) -> dict:
        est = estimate_gb(spec["model"], spec["d"], spec["batch_size_data"] or spec["n_data"], spec["batch"], spec["theta_samples"])
        if est > a.max_gb:
            r = {**spec, "estimated_gb": est, "skipped": f"skipped: estimated {est:.1f} GB > --max-gb {a.max_gb:g}"}
        else:
            r = _run_child(spec, a.timeout) | {"estimated_gb": est}
        rows = f"M={r['batch_size_data']} of N={r['n_data']}" if r["batch_size_data"] else f"all N={r['n_data']}"
        figures = f"{r['s_per_update'] * 1e3:9.1f} ms/update, peak +{r['peak_mb']:.0f} MB (load {r['load1']:.2f})" if "s_per_update" in r else ""
        if "fast_over_materialised" in r:
            figures = (f"materialised {r['s_per_update_materialised'] * 1e3:.1f} ms/update, fast {r['s_per_update'] * 1e3:.1f} ms/update, "
                       f"fast / materialised {r['fast_over_materialised']:.2f} ({r['torch_threads']} thread(s), load {r['load1']:.2f})")
        print(f"  d={r['d']:>3} {r['model']:<16} S={r['theta_samples']:>3} {rows:>16} rows: " + (_why(r) or figures), flush=True)
        return r

    scaling = [run({**common, "d": d, "model": m, "n_data": a.n_data, "theta_samples": S, "batch_size_data": 0})
               for d in _ints(a.dims) for m in _names(a.models) for S in _ints(a.theta_samples)]
    minibatch = [run({**common, "updates": a.mb_updates, "warmup": 1, "d": a.mb_dim, "model": m, "n_data": a.mb_rows, "theta_samples": a.mb_theta_samples, "batch_size_data": M})
                 for m in _names(a.mb_models) for M in (0, a.mb_batch_size_data)]
    paths = [run({**common, "d": a.paths_dim, "model": m, "n_data": a.n_data, "theta_samples": a.paths_theta_samples, "batch_size_data": 0, "paths": True})
             for m in (_names(a.paths_models) if a.paths_dim else [])]
    meta["load_end"], meta["wall_s"] = list(os.getloadavg()), time.perf_counter() - t0
    result = {"meta": meta, "scaling": scaling, "minibatch": minibatch, "paths": paths}
    write_results(a.out, result, markdown(result))
    return result


if __name__ == "__main__":
    main()
