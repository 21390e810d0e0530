"""The `gflownet-measure` command line: list, run, check (DESIGN.md section 5).

User errors (unknown names, presets, keys, values out of range) print one line and exit with code 2;
a diverged training prints one line and exits with code 1, keeping the last good checkpoint.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from environments import ENVIRONMENTS, get_environment
from gflownet_measure.checks import check_graph
from gflownet_measure.config import ConfigError, parse_assignments, resolve
from gflownet_measure.training import TrainingDiverged, seed_everything, use_device

from . import EXPERIMENTS, get_experiment
from .common import WallClock

PROG = "gflownet-measure"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="GFlowNets on measurable pointed graphs: experiments and theory checks.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="experiments and environments, with presets")
    r = sub.add_parser("run", help="run an experiment, writing a run folder")
    r.add_argument("name")
    r.add_argument("--preset", default="quick")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--out", type=Path, default=None, help="run folder (default runs/NAME-<timestamp>)")
    r.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    r.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE", nargs="+")
    r.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint")
    r.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    c = sub.add_parser("check", help="check the theory's conditions on an environment")
    c.add_argument("env")
    c.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE", nargs="+")
    c.add_argument("--samples", type=int, default=256, help="Monte Carlo nodes per continuous piece")
    c.add_argument("--method", default="mc", choices=("mc", "quadrature"))
    c.add_argument("--seed", type=int, default=0)
    return p


def _flatten(groups: list[list[str]]) -> list[str]:
    return [item for group in groups for item in group]


def cmd_list() -> int:
    print("experiments:")
    for e in EXPERIMENTS.values():
        print(f"  {e.name:<14} presets: {', '.join(e.presets):<14} {e.description}")
    print("environments (for `check`):")
    for e in ENVIRONMENTS.values():
        print(f"  {e.name:<14} {e.description}")
    return 0


def cmd_run(args) -> int:
    exp = get_experiment(args.name)
    if args.resume:
        if args.out is None or not (args.out / "config.json").exists():
            raise ConfigError("--resume needs --out pointing at an existing run folder (with config.json)")
        if args.assignments:
            raise ConfigError("--resume continues a run with its saved config.json; drop --set")
        saved = json.loads((args.out / "config.json").read_text())
        if "experiment" not in saved:
            raise ConfigError(f"--resume: {args.out} is one run of a multi-run experiment; resume the folder above it with that experiment's name")
        if saved["experiment"] != exp.name:
            raise ConfigError(f"--resume: {args.out} holds a run of {saved['experiment']}, not {exp.name}; valid here: run {saved['experiment']} --resume")
        cfg, seed, device, out = saved["settings"], saved["seed"], saved["device"], args.out
        cfg = resolve(exp.settings, cfg)
    else:
        if args.preset not in exp.presets:
            raise ConfigError(f"unknown preset {args.preset!r} for {exp.name}; valid: {', '.join(exp.presets)}")
        cfg = resolve(exp.settings, exp.presets[args.preset], parse_assignments(_flatten(args.assignments)))
        seed, device = args.seed, args.device
        out = args.out or Path("runs") / f"{exp.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available; valid here: cpu")
    if args.threads is not None:
        if args.threads < 1:
            raise ConfigError(f"--threads={args.threads} is out of range; valid: >= 1")
        torch.set_num_threads(args.threads)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").unlink(missing_ok=True)  # a folder without metrics.json is an unfinished run
    if not args.resume:
        record = {"experiment": exp.name, "preset": args.preset, "seed": seed, "device": device, "torch_threads": torch.get_num_threads(), "settings": cfg}
        (out / "config.json").write_text(json.dumps(record, indent=2) + "\n")
    seed_everything(seed)
    use_device(device)
    with WallClock(out, args.resume) as clock:
        metrics = exp.run(cfg, out, args.resume)
    metrics.setdefault("seconds", clock.seconds())  # single runs report their training time; tables the wall clock of every session
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    print(json.dumps(metrics, indent=2))
    print(f"run folder: {out}")
    return 0


def cmd_check(args) -> int:
    spec = get_environment(args.env)
    cfg = resolve(spec.settings, parse_assignments(_flatten(args.assignments)))
    if args.samples < 2:
        raise ConfigError(f"--samples={args.samples} is out of range; valid: >= 2")
    seed_everything(args.seed)
    graph = spec.make_graph(cfg)
    pf, pb = spec.make_policies(graph, cfg)
    report = check_graph(graph, pf, pb, n=args.samples, method=args.method, seed=args.seed)
    print(report)
    return 0 if report.passed else 1


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "list":
            return cmd_list()
        if args.command == "run":
            return cmd_run(args)
        return cmd_check(args)
    except ConfigError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        print(f"{PROG}: training stopped: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
