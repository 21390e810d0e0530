"""The MCMC baselines at matched wall clock beside finished JSP-GFN runs (the JSP-GFN issue: "held-out NLL at or
below the collapsed MC3's at matched wall clock"), without training again.

usage: PYTHONPATH=. python benchmarks/jsp_matched_clock.py RUN [RUN ...] [--baselines mc3-collapsed] [--fraction 1.0]
           [--threads 1] [--out benchmarks/results/jsp_matched_clock.json]

For each ``jsp-gfn`` run folder: its resolved settings (``config.json``) rebuild the same data and model
(``make_problem``), and each baseline of ``--baselines`` runs with ``mcmc_budget=matched`` for ``--fraction`` times the
run's training wall clock (``metrics.json``'s ``seconds``), exactly as ``jsp-gfn --set baseline=... mcmc_budget=matched``
runs it after training (:func:`gflownet_measure.experiments.jsp_gfn.budget`). Printed and written per run: the
baseline's held-out NLL, E-SHD, AUROC and expected edges beside the run's own and its untrained start's (``start_*``).
A ``--fraction`` below 1 gives the baseline less time than the sampler had. Figures are printed, never asserted;
the thread count and the load average at start and end are in the output (the machines are shared).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import torch

from gflownet_measure.environments import dag_params as env
from gflownet_measure.experiments.jsp_gfn import SETTINGS, JspGfnRun, budget
from gflownet_measure.experiments.settings import build
from gflownet_measure.jsp_gfn.baselines import structure
from gflownet_measure.jsp_gfn.dag_params.evaluation import sample_metrics

ROOT = Path(__file__).resolve().parents[1]
KEYS = ("heldout_nll", "expected_shd", "auroc")


def matched(run: Path, names: list[str], fraction: float) -> dict:
    """One run folder's row: its figures, its start's, and each baseline's at ``fraction`` x its training seconds."""
    config = json.loads((run / "config.json").read_text())
    cfg = {k: s.default for k, s in SETTINGS.items()} | config["settings"] | {"mcmc_budget": "matched"}
    metrics = json.loads((run / "metrics.json").read_text())
    problem = env.make_problem(build(env.DagParamsConfig, cfg))
    seconds = fraction * metrics["seconds"]
    row = {"run": str(run), "data_seed": cfg["data_seed"], "seconds": metrics["seconds"], "baseline_seconds": seconds}
    row |= {k: metrics.get(k) for k in (*KEYS, "expected_edges")} | {f"start_{k}": metrics.get(f"start_{k}") for k in KEYS}
    for name in names:
        result = structure.sample(name, problem.model, budget(build(JspGfnRun, cfg), config["seed"], seconds))
        if isinstance(result, str):
            row[name] = f"skipped: {result}"
            continue
        samples, extra = result
        m = sample_metrics(problem, samples.graphs, samples.thetas)
        row[name] = (
            {k: m.get(k) for k in KEYS}
            | {
                "expected_edges": float(samples.graphs.double().sum((1, 2)).mean()),
                "seconds": samples.seconds,
                "samples": len(samples.graphs),
            }
            | {k: v for k, v in extra.items() if isinstance(v, float)}
        )
        print(
            f"{run.name}: {name} held-out NLL {row[name]['heldout_nll']:,.1f} in {samples.seconds:.0f} s; JSP-GFN {row['heldout_nll']:,.1f} (start {row['start_heldout_nll']:,.1f})",
            flush=True,
        )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", type=Path, help="jsp-gfn run folders (config.json and metrics.json)")
    parser.add_argument("--baselines", default="mc3-collapsed", help=f"comma-separated, of {', '.join(structure.STRUCTURE_BASELINES)}")
    parser.add_argument("--fraction", type=float, default=1.0, help="the baselines' wall clock as a multiple of each run's training seconds (> 0)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "jsp_matched_clock.json")
    args = parser.parse_args()
    names = [n.strip() for n in args.baselines.split(",") if n.strip()]
    unknown = [n for n in names if n not in structure.STRUCTURE_BASELINES]
    if unknown or not args.fraction > 0:
        parser.error(f"--baselines {unknown} unknown; valid: {', '.join(structure.STRUCTURE_BASELINES)}" if unknown else "--fraction must be > 0")
    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    rows = [matched(run, names, args.fraction) for run in args.runs]
    result = {"started": started, "threads": args.threads, "fraction": args.fraction, "load_average": [load, os.getloadavg()], "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"written {args.out}")


if __name__ == "__main__":
    main()
