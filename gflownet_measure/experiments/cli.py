"""The `gflownet-measure` command line: list, run, check.

``check`` takes a registered environment or a space of one's own, ``MODULE:FACTORY``
(:func:`~gflownet_measure.experiments.user_space.load_user_space`), and ``run`` trains one (:func:`~gflownet_measure.experiments.user_run.user_experiment`);
a module or factory that does not load, raises or returns something else than a graph is a user error as well.

User errors (unknown names, presets, keys, values out of range, unreadable inputs, a run folder that holds another
run, a checkpoint of another run, a space whose objects return tensors of the wrong shape: :mod:`gflownet_measure.contracts`)
print one line and exit with code 2, before anything in the run folder is touched; so does a run file that cannot be
written safely (a symbolic link, a path outside the run folder: :mod:`gflownet_measure.run_files`), and nothing is written to it;
a diverged training prints one line and exits with code 1, keeping the last good checkpoint; Ctrl-C prints where the
last checkpoint is and exits with code 130. See the README's "Reliability" section for what a run folder guarantees.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from gflownet_measure.checks import CONDITIONS, METHODS, check_graph
from gflownet_measure.distributed import ReplicaFinished, broadcast_object, init_from_env, is_main
from gflownet_measure.environments import ENVIRONMENTS, get_environment
from gflownet_measure.run_files import RunFileError
from gflownet_measure.training import CheckpointError, TrainingDiverged, has_checkpoint, seed_everything, use_device

from . import EXPERIMENTS, get_experiment
from .common import WallClock, run_id, write_json
from .launch import launch_replicas
from .memory import require_memory
from .registry import Experiment, RunContext
from .run_folder import RunFolder, load_run_config, refuse_table_run
from .settings import ConfigError, build, parse_assignments, resolve
from .user_run import user_experiment
from .user_space import load_user_space

PROG = "gflownet-measure"
MAX_SEED = 2**32 - 1  # numpy takes seeds modulo 2^32: larger ones would repeat its streams
DEFAULTS = {"preset": "quick", "seed": 0, "device": "cpu"}
DEVICES = ("cpu", "cuda")
# One torch thread by default: every network here is small (hidden widths of 64-256, batches of 16-128), so torch's
# default of one thread per core buys little on an idle machine and costs 10x or more where the cores are shared
# (measured: docs/results.md, "Wall clock"). Multi-run experiments scale out with processes (--set jobs=N) instead.
DEFAULT_THREADS = 1
CHECK_FORMS = """SPACE is one of:
  NAME                  a registered environment (see `gflownet-measure list`); --set gives its settings
  MODULE:FACTORY        a function in a dotted module importable from the current directory, e.g. my_space:make_graph
  PATH.py:FACTORY       a function in a Python file, e.g. spaces/beta.py:make_graph

FACTORY returns a PointedGraph or a tuple (graph, pf, pb). Without a policy (the graph alone, (graph,), or None in
its place) the walks of eq. 1 and 7 use uniform ones and eq. 15-16 are not checked for it. --set KEY=VALUE goes to
FACTORY: if its first parameter is annotated with a dataclass of gflownet_measure.options.option fields (as the
registered environments' settings), the values are checked against those options and FACTORY gets an instance;
otherwise they are its keyword arguments, parsed as their annotations (or defaults) say: int, float, bool or str.
Examples: check spaces/beta.py:make_graph --samples 64; check my_space:make_graph --set n=5 --threads 1"""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="GFlowNets on measurable pointed graphs: experiments and theory checks.")
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="experiments and environments, with presets")
    r = sub.add_parser("run", help="run an experiment, writing a run folder")
    r.add_argument(
        "name", help="a registered experiment (see `list`), or MODULE:FACTORY / PATH.py:FACTORY: a space of your own, trained (docs/tutorial.md, section 8)"
    )
    r.add_argument("--preset", default=None, help=f"settings preset (default {DEFAULTS['preset']})")
    r.add_argument("--seed", type=int, default=None, help=f"seed of every generator, 0 to {MAX_SEED} (default 0)")
    r.add_argument("--out", default=None, help="run folder (default runs/NAME-<timestamp>); must be new or empty, unless --resume or --overwrite")
    r.add_argument("--device", default=None, choices=DEVICES)
    r.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE", nargs="+")
    r.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint, with its saved settings")
    r.add_argument("--overwrite", action="store_true", help="replace the run that --out holds (its files are deleted)")
    r.add_argument(
        "--world-size",
        type=int,
        default=1,
        metavar="N",
        help="train one run on N processes (data parallel, torch.distributed; gloo on CPU, NCCL on CUDA); or launch with torchrun (docs/scale_out.md)",
    )
    r.add_argument("--threads", type=int, default=DEFAULT_THREADS, help=f"torch CPU threads (default {DEFAULT_THREADS}; see docs/results.md, Wall clock)")
    c = sub.add_parser(
        "check",
        help="check the theory's conditions on an environment or a space of your own",
        epilog=CHECK_FORMS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("space", metavar="SPACE", help="NAME, MODULE:FACTORY or PATH.py:FACTORY (below)")
    c.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE", nargs="+", help="settings of SPACE (below)")
    c.add_argument("--samples", type=int, default=256, help="Monte Carlo nodes per continuous piece")
    c.add_argument(
        "--method",
        default="auto",
        choices=METHODS,
        help="integration on continuous pieces: auto (quadrature for eq. 4 and eq. 15-16 where every piece has at most 3 coordinates, else Monte Carlo), mc or quadrature",
    )
    c.add_argument("--seed", type=int, default=0, help="seed of the checks' draws and of the space's construction (default 0)")
    c.add_argument("--threads", type=int, default=DEFAULT_THREADS, help=f"torch CPU threads (default {DEFAULT_THREADS}; see docs/results.md, Wall clock)")
    return p


def _flatten(groups: list[list[str]]) -> list[str]:
    return [item for group in groups for item in group]


def _check_seed(seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"--seed={seed} is out of range; valid: 0 to {MAX_SEED}")


def _set_threads(threads: int) -> None:
    """``--threads``: torch's CPU threads, at least 1."""
    if threads < 1:
        raise ConfigError(f"--threads={threads} is out of range; valid: >= 1")
    torch.set_num_threads(threads)


def cmd_list() -> int:
    print("experiments:")
    for e in EXPERIMENTS.values():
        print(f"  {e.name:<14} presets: {', '.join(e.presets):<14} {e.description}")
    print("environments (for `check`):")
    for spec in ENVIRONMENTS.values():
        print(f"  {spec.name:<14} {spec.description}")
    return 0


def _saved_run(out: Path, name: str) -> dict:
    """The ``config.json`` of the run folder ``out`` that ``--resume`` continues, checked to be ``name``'s."""
    refuse_table_run(out)
    path = out / "config.json"
    if not path.is_file():
        raise ConfigError(f"--resume: {out} holds no run (no config.json); give the folder of a run started with `run {name} --out FOLDER`")
    try:
        saved = load_run_config(path)
    except ValueError as e:
        raise ConfigError(f"--resume: {e}; restore it, or start afresh with --overwrite") from None
    if "experiment" not in saved:
        raise ConfigError(f"--resume: {out} is one run of a multi-run experiment; resume the folder above it with that experiment's name")
    if saved["experiment"] != name:
        raise ConfigError(f"--resume: {out} holds a run of {saved['experiment']}, not {name}; valid here: run {saved['experiment']} --resume")
    seed, device = saved["seed"], saved.get("device", DEFAULTS["device"])
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= MAX_SEED:
        raise ConfigError(
            f"--resume: {path}: seed is {json.dumps(seed)}; valid: a whole number from 0 to {MAX_SEED} (restore the seed the run was started with)"
        )
    if device not in DEVICES:
        raise ConfigError(f"--resume: {path}: device is {json.dumps(device)}; valid: {', '.join(DEVICES)}")
    return saved


def _revised_settings(exp: Experiment, saved: dict, changes: dict, trained_before: bool) -> tuple[dict, dict]:
    """The settings a resume runs with (the saved ones, ``changes`` applied) and, where they differ, those its training
    ran with (``trained_with`` of ``config.json``, kept across resumes; none where ``trained_before`` is false: no
    checkpoint yet, so the training starts with the new values). Only ``exp.evaluation_settings`` may change: any other
    setting changes the model, which a checkpoint of this run does not hold."""
    before = resolve(exp.settings, saved["settings"])
    cfg = resolve(exp.settings, saved["settings"], changes)
    fixed = [k for k in cfg if cfg[k] != before[k] and k not in exp.evaluation_settings]
    if fixed:
        valid = ", ".join(exp.evaluation_settings) or f"none ({exp.name} has no setting that evaluation alone reads)"
        raise ConfigError(
            f"--resume --set {fixed[0]}: a resume changes only settings that evaluation alone reads, not {', '.join(fixed)}; valid: {valid}"
            " (start a new run for other settings)"
        )
    trained = saved.get("trained_with", {})
    if not isinstance(trained, dict) or set(trained) - set(exp.evaluation_settings):
        raise ConfigError(
            f"--resume: config.json's trained_with is {json.dumps(trained)}; valid: an object of {', '.join(exp.evaluation_settings) or 'no'} settings"
        )
    first = resolve(exp.settings, saved["settings"], trained)
    return cfg, {k: first[k] for k in exp.evaluation_settings if first[k] != cfg[k]} if trained_before else {}


def cmd_run(args) -> int:
    """One run; under ``torchrun`` (or ``--world-size N``, which launches it) one replica of a data-parallel run."""
    exp = user_experiment(args.name) if ":" in args.name else get_experiment(args.name)
    if args.out == "":
        raise ConfigError("--out '' names no folder; give a run folder, e.g. --out runs/my-run")
    out = None if args.out is None else Path(args.out)
    revisions: dict = {}
    if args.resume:
        given = [flag for flag, value in (("--preset", args.preset), ("--seed", args.seed), ("--device", args.device)) if value is not None]
        if args.overwrite:
            given.append("--overwrite")
        if given:
            raise ConfigError(
                f"--resume continues a run with the settings saved in its config.json; drop {', '.join(given)} (or start a new run without --resume)"
            )
        if out is None:
            raise ConfigError("--resume needs --out, the folder of the run to continue")
        saved = _saved_run(out, exp.name)
        seed, device, preset = saved["seed"], saved.get("device", "cpu"), saved.get("preset")
        cfg, trained = _revised_settings(exp, saved, parse_assignments(_flatten(args.assignments)), has_checkpoint(out))
        revisions = {"settings": cfg, "trained_with": trained} if args.assignments else {}
    else:
        trained = {}  # a new run trains with its settings
        preset, seed, device = (getattr(args, k) if getattr(args, k) is not None else v for k, v in DEFAULTS.items())
        if preset not in exp.presets:
            raise ConfigError(f"unknown preset {preset!r} for {exp.name}; valid: {', '.join(exp.presets)}")
        cfg = resolve(exp.settings, exp.presets[preset], parse_assignments(_flatten(args.assignments)))
        out = out or Path("runs") / f"{exp.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    _check_seed(seed)
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available; valid here: cpu")
    _set_threads(args.threads)
    seed_everything(seed)  # a validation that draws (a trial rollout) is a function of --seed too
    exp.validate(exp.typed(cfg))  # every setting and input, before the folder is touched
    if args.world_size < 1:
        raise ConfigError(f"--world-size={args.world_size} is out of range; valid: >= 1")
    if (args.world_size > 1 or int(os.environ.get("WORLD_SIZE", "1")) > 1) and exp.multi_run:
        raise ConfigError(f"{exp.name} trains many runs: spread them over processes with --set jobs=N, not --world-size")
    if args.world_size > 1:
        return launch_replicas(args, out, main)
    rank, size = init_from_env(device)
    out = broadcast_object(out)  # under torchrun without --out, rank 0's timestamp names the folder
    with contextlib.ExitStack() as stack:
        error = None
        if rank == 0:  # the folder is rank 0's: lock, checks, config.json; the other replicas wait for its verdict
            try:
                stack.enter_context(RunFolder(out, exp.name, resume=args.resume, overwrite=args.overwrite))
                if revisions:  # the folder says which settings made its metrics, and which its training
                    write_json(out / "config.json", load_run_config(out / "config.json") | revisions)
                elif not args.resume:
                    write_json(
                        out / "config.json",
                        {
                            "experiment": exp.name,
                            "preset": preset,
                            "seed": seed,
                            "device": device,
                            "torch_threads": torch.get_num_threads(),
                            "world_size": size,
                            "settings": cfg,
                        },
                    )
            except ConfigError as e:
                error = str(e)
        error = broadcast_object(error)
        if error is not None:
            raise ConfigError(error)
        resume = args.resume and (exp.multi_run or has_checkpoint(out))
        identity, revised = run_id({**cfg, **trained}, seed), tuple(trained)  # trained: empty unless a checkpoint holds the old values
        if args.resume and not resume and rank == 0:
            print(f"{PROG}: {out} has no checkpoint yet (the run stopped before its first): training it from the start", file=sys.stderr)
        seed_everything(seed)
        use_device(device)
        try:
            with WallClock(out, resume) if rank == 0 else contextlib.nullcontext() as clock:
                metrics = exp.run(exp.typed(cfg), RunContext(out, resume, seed, identity, revised))
        except ReplicaFinished:
            return 0
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"interrupted; the last checkpoint is kept in {out}: continue with `{PROG} run {exp.name} --out {out} --resume`") from None
        assert clock is not None  # rank 0: the other replicas of a data-parallel run returned above
        metrics.setdefault("seconds", clock.seconds())  # single runs report their training time; tables the wall clock of every session
        write_json(out / "metrics.json", metrics)  # last, and atomic: a folder with metrics.json is a finished run
    print(json.dumps(metrics, indent=2))
    print(f"run folder: {out}")
    return 0


def cmd_check(args) -> int:
    if args.samples < 2:
        raise ConfigError(f"--samples={args.samples} is out of range; valid: >= 2")
    _check_seed(args.seed)
    _set_threads(args.threads)
    assignments = parse_assignments(_flatten(args.assignments))
    if ":" in args.space:
        seed_everything(args.seed)  # the factory may draw (a network's initial weights)
        graph, pf, pb = load_user_space(args.space, assignments)
    else:
        try:
            spec = get_environment(args.space)
        except ValueError as e:
            raise ConfigError(f"{e}, or MODULE:FACTORY for a space of your own (see check --help)") from None
        config: Any = build(spec.config, resolve(spec.settings, assignments))
        require_memory(spec.check_bytes * args.samples**2, f"--samples={args.samples}")
        seed_everything(args.seed)
        graph = spec.make_graph(config)
        pf, pb = spec.make_policies(graph, config)
    report = check_graph(graph, pf, pb, n=args.samples, method=args.method, seed=args.seed)
    contracts = next(r for r in report.results if r.condition == CONDITIONS["contracts"])
    if not contracts.passed:  # a tensor of the wrong shape: a user error, and no other row was run
        raise ConfigError(f"check: {args.space}: {contracts.detail}")
    print(report)
    return 0 if report.passed else 1


def _one_line_warning(message, category, filename, lineno, line=None) -> str:
    return f"{PROG}: warning: {message}\n"


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    warnings.formatwarning = _one_line_warning
    try:
        if args.command == "list":
            return cmd_list()
        if args.command == "run":
            return cmd_run(args)
        return cmd_check(args)
    except (ConfigError, CheckpointError, RunFileError) as e:
        if is_main():  # every replica of a data-parallel run meets the same error: one line, from rank 0
            print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        if is_main():
            print(f"{PROG}: training stopped: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\n{PROG}: {e or 'interrupted'}", file=sys.stderr)  # a new line: a progress bar may hold the current one
        return 130
    except (MemoryError, RuntimeError) as e:
        if not isinstance(e, MemoryError) and "allocate" not in str(e):
            raise
        print(
            f"{PROG}: error: out of memory ({(str(e).strip().splitlines() or ['MemoryError'])[0][:120]}); lower the batch size or the number of samples (batch_size, eval_samples, theta_samples, --samples)",
            file=sys.stderr,
        )
        return 2
    except OSError as e:  # a disk that filled up, a folder that became read-only: name the file, no traceback
        print(f"{PROG}: error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
