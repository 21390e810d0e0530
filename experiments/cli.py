"""The `gflownet-measure` command line: list, run, check.

``check`` takes a registered environment or a space of one's own, ``MODULE:FACTORY`` (:func:`load_user_space`); a
module or factory that does not load, raises or returns something else than a graph is a user error as well.

User errors (unknown names, presets, keys, values out of range, unreadable inputs, a run folder that holds another
run, a checkpoint of another run) print one line and exit with code 2, before anything in the run folder is touched;
a diverged training prints one line and exits with code 1, keeping the last good checkpoint; Ctrl-C prints where the
last checkpoint is and exits with code 130. See the README's "Reliability" section for what a run folder guarantees.
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import sys
import time
import traceback
import typing
import warnings
from pathlib import Path
from typing import Any, Callable

import torch

from environments import ENVIRONMENTS, get_environment
from gflownet_measure.checks import METHODS, check_graph
from gflownet_measure.densities import Policy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.options import Setting, settings_of
from gflownet_measure.training import CheckpointError, TrainingDiverged, has_checkpoint, seed_everything, use_device

from . import EXPERIMENTS, get_experiment
from .common import WallClock, write_json
from .memory import require_memory
from .run_folder import RunFolder, load_run_config
from .settings import ConfigError, build, parse_assignments, resolve

PROG = "gflownet-measure"
MAX_SEED = 2**32 - 1  # numpy takes seeds modulo 2^32: larger ones would repeat its streams
DEFAULTS = {"preset": "quick", "seed": 0, "device": "cpu"}
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
    r.add_argument("name")
    r.add_argument("--preset", default=None, help=f"settings preset (default {DEFAULTS['preset']})")
    r.add_argument("--seed", type=int, default=None, help=f"seed of every generator, 0 to {MAX_SEED} (default 0)")
    r.add_argument("--out", default=None, help="run folder (default runs/NAME-<timestamp>); must be new or empty, unless --resume or --overwrite")
    r.add_argument("--device", default=None, choices=("cpu", "cuda"))
    r.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE", nargs="+")
    r.add_argument("--resume", action="store_true", help="continue the run in --out from its checkpoint, with its saved settings")
    r.add_argument("--overwrite", action="store_true", help="replace the run that --out holds (its files are deleted)")
    r.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    c = sub.add_parser("check", help="check the theory's conditions on an environment or a space of your own", epilog=CHECK_FORMS, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("space", metavar="SPACE", help="NAME, MODULE:FACTORY or PATH.py:FACTORY (below)")
    c.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE", nargs="+", help="settings of SPACE (below)")
    c.add_argument("--samples", type=int, default=256, help="Monte Carlo nodes per continuous piece")
    c.add_argument("--method", default="auto", choices=METHODS, help="integration on continuous pieces: auto (quadrature for eq. 4 where every piece has at most 3 coordinates, else Monte Carlo), mc or quadrature")
    c.add_argument("--seed", type=int, default=0, help="seed of the checks' draws and of the space's construction (default 0)")
    c.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's choice)")
    return p


def _flatten(groups: list[list[str]]) -> list[str]:
    return [item for group in groups for item in group]


def _check_seed(seed: int) -> None:
    if not 0 <= seed <= MAX_SEED:
        raise ConfigError(f"--seed={seed} is out of range; valid: 0 to {MAX_SEED}")


def _set_threads(threads: int | None) -> None:
    """``--threads``: torch's CPU threads, at least 1 (``None``: torch's choice)."""
    if threads is not None:
        if threads < 1:
            raise ConfigError(f"--threads={threads} is out of range; valid: >= 1")
        torch.set_num_threads(threads)


def cmd_list() -> int:
    print("experiments:")
    for e in EXPERIMENTS.values():
        print(f"  {e.name:<14} presets: {', '.join(e.presets):<14} {e.description}")
    print("environments (for `check`):")
    for e in ENVIRONMENTS.values():
        print(f"  {e.name:<14} {e.description}")
    return 0


def _saved_run(out: Path, name: str) -> dict:
    """The ``config.json`` of the run folder ``out`` that ``--resume`` continues, checked to be ``name``'s."""
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
    return saved


def cmd_run(args) -> int:
    exp = get_experiment(args.name)
    if args.out == "":
        raise ConfigError("--out '' names no folder; give a run folder, e.g. --out runs/my-run")
    out = None if args.out is None else Path(args.out)
    if args.resume:
        given = [flag for flag, value in (("--preset", args.preset), ("--seed", args.seed), ("--device", args.device), ("--set", args.assignments or None)) if value is not None]
        if args.overwrite:
            given.append("--overwrite")
        if given:
            raise ConfigError(f"--resume continues a run with the settings saved in its config.json; drop {', '.join(given)} (or start a new run without --resume)")
        if out is None:
            raise ConfigError("--resume needs --out, the folder of the run to continue")
        saved = _saved_run(out, exp.name)
        cfg, seed, device, preset = resolve(exp.settings, saved["settings"]), saved["seed"], saved.get("device", "cpu"), saved.get("preset")
    else:
        preset, seed, device = (getattr(args, k) if getattr(args, k) is not None else v for k, v in DEFAULTS.items())
        if preset not in exp.presets:
            raise ConfigError(f"unknown preset {preset!r} for {exp.name}; valid: {', '.join(exp.presets)}")
        cfg = resolve(exp.settings, exp.presets[preset], parse_assignments(_flatten(args.assignments)))
        out = out or Path("runs") / f"{exp.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    _check_seed(seed)
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: no CUDA device is available; valid here: cpu")
    _set_threads(args.threads)
    exp.validate(cfg)  # every setting and input, before the folder is touched
    with RunFolder(out, exp.name, resume=args.resume, overwrite=args.overwrite):
        if not args.resume:
            write_json(out / "config.json", {"experiment": exp.name, "preset": preset, "seed": seed, "device": device, "torch_threads": torch.get_num_threads(), "settings": cfg})
        resume = args.resume and (exp.multi_run or has_checkpoint(out))
        if args.resume and not resume:
            print(f"{PROG}: {out} has no checkpoint yet (the run stopped before its first): training it from the start", file=sys.stderr)
        seed_everything(seed)
        use_device(device)
        try:
            with WallClock(out, resume) as clock:
                metrics = exp.run(cfg, out, resume)
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"interrupted; the last checkpoint is kept in {out}: continue with `{PROG} run {exp.name} --out {out} --resume`") from None
        metrics.setdefault("seconds", clock.seconds())  # single runs report their training time; tables the wall clock of every session
        write_json(out / "metrics.json", metrics)  # last, and atomic: a folder with metrics.json is a finished run
    print(json.dumps(metrics, indent=2))
    print(f"run folder: {out}")
    return 0


def _first_line(e: BaseException, origin: str | None = None) -> str:
    """``Type: message (file, line n)`` of ``e``, its message cut at the first line: the line is a syntax error's own,
    else the last one of the file ``origin`` (the user's module) that the traceback passes through, else the last one
    outside this file and the import machinery."""
    if isinstance(e, SyntaxError):
        return f"{type(e).__name__}: {e.msg} ({e.filename}, line {e.lineno})"
    message = str(e).strip().splitlines()
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<") and f.filename != __file__]
    where = next((f for f in reversed(frames) if f.filename == origin), frames[-1] if frames else None)
    return f"{type(e).__name__}{': ' + message[0] if message else ''}{f' ({where.filename}, line {where.lineno})' if where else ''}"


def _import_module(target: str, module: str):
    """The module ``module`` of ``target``: a path to a ``.py`` file (its folder put first on ``sys.path``, as
    ``python PATH.py`` does), or a dotted module importable from the current directory (put first on ``sys.path``, as
    ``python -m`` does)."""
    expected = "expected MODULE:FACTORY, MODULE a dotted module importable from the current directory or a path to a .py file"
    if module.endswith(".py") or "/" in module or os.sep in module:
        path = Path(module).expanduser().resolve()
        if not path.is_file():
            raise ConfigError(f"check: {target}: no file {module}; {expected}")
        name = path.stem
        taken = sys.modules.get(name)
        if taken is not None and Path(getattr(taken, "__file__", None) or "").resolve() != path:
            raise ConfigError(f"check: {target}: the module name {name} is already taken by {getattr(taken, '__file__', None) or 'a built-in module'}; rename {path.name}")
        if str(path.parent) not in sys.path:
            sys.path.insert(0, str(path.parent))
        spec = importlib.util.spec_from_file_location(name, path)
        loaded = importlib.util.module_from_spec(spec)
        sys.modules[name] = loaded  # dataclasses and typing look a class's module up there
        try:
            spec.loader.exec_module(loaded)
        except Exception as e:
            del sys.modules[name]
            raise ConfigError(f"check: {target}: importing {module} raised {_first_line(e, str(path))}") from None
        return loaded
    if not all(part.isidentifier() for part in module.split(".")):
        raise ConfigError(f"check: {target}: {module!r} is not a dotted module name; {expected}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    importlib.invalidate_caches()  # a file written since the interpreter started
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name is not None and (module == e.name or module.startswith(e.name + ".")):
            raise ConfigError(f"check: {target}: no module named {e.name} in {os.getcwd()} or on sys.path; {expected}") from None
        raise ConfigError(f"check: {target}: importing {module} raised {_first_line(e)}") from None
    except Exception as e:
        raise ConfigError(f"check: {target}: importing {module} raised {_first_line(e)}") from None


def _factory_arguments(target: str, factory: Callable, assignments: dict[str, str]) -> tuple[tuple, dict[str, Any]]:
    """``(args, kwargs)`` of ``factory`` from the ``--set`` pairs: an instance of the dataclass of
    :func:`~gflownet_measure.options.option` fields that annotates its first parameter, or keyword arguments parsed
    as their annotations (or defaults) say."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # a built-in without a signature: nothing to set
        if assignments:
            raise ConfigError(f"check: {target}: its parameters are unknown, so --set has nothing to set; drop --set") from None
        return (), {}
    try:
        hints = typing.get_type_hints(factory)
    except Exception:  # an annotation that does not resolve: read the parameters' defaults instead
        hints = {}
    params = [p for p in signature.parameters.values() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    first = hints.get(params[0].name) if params else None
    if isinstance(first, type) and dataclasses.is_dataclass(first) and settings_of(first):
        return (build(first, resolve(settings_of(first), assignments)),), {}
    by_name = {p.name: p for p in params if p.kind is not p.POSITIONAL_ONLY}
    kwargs = {}
    for key, value in assignments.items():
        if key not in by_name:
            raise ConfigError(f"unknown setting {key!r} for {target}; valid: {', '.join(by_name) or 'none (it takes no keyword arguments)'}")
        p = by_name[key]
        kind = hints.get(key, type(p.default))
        if kind not in (int, float, bool, str):
            said = f"annotated {inspect.formatannotation(kind)}" if key in hints else "neither annotated nor defaulted to a value of those types"
            raise ConfigError(f"--set {key}: parameter {key} of {target} is {said}; --set gives int, float, bool or str")
        try:
            kwargs[key] = Setting(kind()).parse(key, value)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    missing = [p.name for p in params if p.default is p.empty and p.name not in kwargs]
    if missing:
        raise ConfigError(f"check: {target}: {factory.__name__} needs {', '.join(missing)}; give --set {' '.join(f'{m}=VALUE' for m in missing)}")
    return (), kwargs


def load_user_space(target: str, assignments: dict[str, str]) -> tuple[PointedGraph, Policy | None, Policy | None]:
    """``(graph, pf, pb)`` of ``target`` = ``MODULE:FACTORY``, the factory called with the ``--set`` pairs
    (:func:`_factory_arguments`); ``pf`` or ``pb`` is ``None`` where the factory returns none. Every mistake is a
    one-line :class:`ConfigError` naming what was given and what is expected."""
    module_name, _, name = target.rpartition(":")
    if not module_name or not name:
        raise ConfigError(f"check: {target}: expected MODULE:FACTORY (e.g. my_space:make_graph or spaces/beta.py:make_graph)")
    module = _import_module(target, module_name)
    if not hasattr(module, name):
        defined = sorted(k for k, v in vars(module).items() if inspect.isfunction(v) and v.__module__ == module.__name__ and not k.startswith("_"))
        raise ConfigError(f"check: {target}: module {module.__name__} has no attribute {name}; valid: {', '.join(defined) or 'none (it defines no function)'}")
    factory = getattr(module, name)
    if not callable(factory):
        raise ConfigError(f"check: {target}: {name} is an object of type {type(factory).__name__}, not callable; expected a function returning a PointedGraph or (graph, pf, pb)")
    args, kwargs = _factory_arguments(target, factory, assignments)
    try:
        made = factory(*args, **kwargs)
    except Exception as e:
        raise ConfigError(f"check: {target}: {name} raised {_first_line(e, getattr(module, '__file__', None))}") from None
    parts = made if isinstance(made, tuple) else (made,)
    if not (1 <= len(parts) <= 3 and isinstance(parts[0], PointedGraph) and all(p is None or isinstance(p, Policy) for p in parts[1:])):
        got = f"({', '.join(type(p).__name__ for p in parts)})" if isinstance(made, tuple) else type(made).__name__
        raise ConfigError(f"check: {target}: {name} returned {got}; expected a PointedGraph or a tuple (graph, pf, pb) of a PointedGraph and Policy or None")
    graph, pf, pb = parts + (None,) * (3 - len(parts))
    return graph, pf, pb


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
        config = build(spec.config, resolve(spec.settings, assignments))
        require_memory(spec.check_bytes * args.samples**2, f"--samples={args.samples}")
        seed_everything(args.seed)
        graph = spec.make_graph(config)
        pf, pb = spec.make_policies(graph, config)
    report = check_graph(graph, pf, pb, n=args.samples, method=args.method, seed=args.seed)
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
    except (ConfigError, CheckpointError) as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except TrainingDiverged as e:
        print(f"{PROG}: training stopped: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:
        print(f"\n{PROG}: {e or 'interrupted'}", file=sys.stderr)  # a new line: a progress bar may hold the current one
        return 130
    except (MemoryError, RuntimeError) as e:
        if not isinstance(e, MemoryError) and "allocate" not in str(e):
            raise
        print(f"{PROG}: error: out of memory ({str(e).splitlines()[0][:120] or 'MemoryError'}); lower the batch size or the number of samples (batch_size, eval_samples, theta_samples, --samples)", file=sys.stderr)
        return 2
    except OSError as e:  # a disk that filled up, a folder that became read-only: name the file, no traceback
        print(f"{PROG}: error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
