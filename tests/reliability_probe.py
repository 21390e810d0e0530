#!/usr/bin/env python
"""Reliability probe: the README's "Reliability" promises, tried the way a user (or a folder from elsewhere) would.

Not a pytest module (no ``test_`` prefix): a standalone script that runs ``gflownet-measure`` as a subprocess for each
case, on small runs, and checks what a user sees and what is left on disk::

    python tests/reliability_probe.py                      # every case (13 min on 2 cores at a load of 1.5; longer on busier ones)
    python tests/reliability_probe.py --only symlink,kill  # some groups; --list prints the cases
    python tests/reliability_probe.py --out /tmp/probe --keep --jobs 2

Each case checks:

- the exit code (0 finished, 1 training stopped, 2 refused, 130 interrupted);
- stderr: no ``Traceback``, and (a refusal or a stop) its last line is ONE line of the expected kind
  (``gflownet-measure: error: ...``, ``gflownet-measure: training stopped: ...``); every other line is a progress bar or
  a one-line ``gflownet-measure: ...`` note or warning;
- nothing outside the run folder changed: each case has a ``home/`` of user files (the targets of the links it
  plants, its CSV data), hashed before and after (content, mode, inode, mtime), and its working folder may hold only the
  run folders it names; the shared fixtures (finished runs that cases ``cp -a``) are hashed too;
- where a case promises it, the run folder itself unchanged (a refusal: "nothing was written") or its
  ``metrics.json`` equal to an uninterrupted run's (numbers, timing keys aside: a resume at one thread is bit-exact).

It prints one line per case (``held`` or ``BROKEN: why``; ``skipped`` where a race it needs did not happen) and a
summary ``N cases, K held, B broken``; the exit code is 1 if any case broke. ``--out`` keeps a ``report.json`` with
each case's commands, exit codes and stderr tails; case folders are deleted once held, kept when broken (``--keep``:
always). The families and what each expects: docs/reliability.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

PROG = "gflownet-measure"
ROOT = Path(__file__).resolve().parent.parent


def _command() -> list[str]:
    """The console script of ``pyproject.toml`` ([project.scripts]) beside this interpreter, else ``python -m`` its module."""
    script = shutil.which(PROG, path=str(Path(sys.executable).parent)) or shutil.which(PROG)
    return [script] if script else [sys.executable, "-m", "gflownet_measure.experiments.cli"]


GM = _command()
THREADS = ["--threads", "1"]
HG = ["hypergrid", "--preset", "quick", "--set", "steps=20", "eval_every=10"]  # the finished run every case copies
HG_LONG = ["hypergrid", "--preset", "quick", "--set", "steps=400", "eval_every=50"]  # long enough to be killed mid-way
QD_SHORT = ["quarter-disc", "--preset", "quick", "--set", "steps=10", "eval_every=10", "eval_samples=200"]  # an attack that, let through, ends soon
TABLE = ["quarter-disc-figure1", "--preset", "quick", "--set", "steps=40", "eval_every=20", "eval_samples=200"]
TIMING = re.compile(r"seconds|wall|clock|time", re.I)  # metrics that are timings, not results
REFUSAL_TIMEOUT = 30  # a refusal comes before any training: after the imports and the checks (5-10 s on a busy machine)
RUN_TIMEOUT = 180


class Broken(Exception):
    """The case's promise does not hold: why, in one line."""


class Skipped(Exception):
    """The case could not be exercised (a race it needs did not happen): why."""


# --- what the user sees ---------------------------------------------------------------------------------------------

_BAR = re.compile(r"^[\w .-]{0,40}:\s*\d+%\|")  # a tqdm progress bar
KINDS = {
    "error": f"{PROG}: error: ",
    "stopped": f"{PROG}: training stopped: ",
    "interrupted": f"{PROG}: interrupted",
}


@dataclass
class Result:
    argv: list[str]
    code: int | None
    out: str
    err: str
    seconds: float

    def messages(self) -> list[str]:
        """stderr's lines without progress bars (each line as a terminal shows it: the text after its last \\r)."""
        lines = []
        for raw in self.err.split("\n"):
            parts = [p for p in raw.split("\r") if p.strip()]
            if not parts:
                continue
            last = parts[-1].rstrip()
            if _BAR.match(last):
                continue
            lines.append(last)
        return lines

    def tail(self, n: int = 3) -> str:
        return " | ".join(self.messages()[-n:]) or "(stderr empty)"

    def describe(self) -> str:
        return f"`{' '.join(shown(a) for a in self.argv)}` exit {self.code}: {self.tail()}"


def shown(arg: str) -> str:
    return arg if re.fullmatch(r"[\w./=:,+-]+", arg) else repr(arg)


def check_output(r: Result, code: int | tuple[int, ...], kind: str | None = None, contains: tuple[str, ...] = ()) -> str:
    """The one line of kind ``kind`` (the last line of stderr) where the exit code is in ``code``; raises :class:`Broken` otherwise.
    ``kind`` None: a finished command, whose stderr holds nothing but progress bars and one-line notes."""
    codes = (code,) if isinstance(code, int) else code
    if "Traceback" in r.err:
        i = r.err.index("Traceback")
        raise Broken(f"a traceback (exit {r.code}): {' | '.join(r.err[i:].strip().splitlines()[-2:])}; from {r.describe()}")
    if r.code not in codes:
        raise Broken(f"exit {r.code}, expected {' or '.join(map(str, codes))}: {r.describe()}")
    msgs = r.messages()
    stray = [m for m in msgs if not m.startswith(f"{PROG}: ")]
    if stray:
        raise Broken(f"stderr holds a line that is not one of {PROG}'s: {stray[0][:160]!r} ({r.describe()})")
    errors = [m for m in msgs if any(m.startswith(p) for p in KINDS.values())]
    if kind is None:
        if errors:
            raise Broken(f"exit {r.code} but stderr says {errors[-1][:200]!r}")
        return ""
    if not msgs or not msgs[-1].startswith(KINDS[kind]):
        raise Broken(f"stderr's last line is not `{KINDS[kind]}...`: {r.describe()}")
    if len(errors) > 1:
        raise Broken(f"{len(errors)} error lines, not one: {' | '.join(errors)[:300]}")
    line = msgs[-1]
    for text in contains:
        if text.lower() not in line.lower():
            raise Broken(f"the line does not say {text!r}: {line[:300]}")
    return line


# --- what is left on disk ---------------------------------------------------------------------------------------------


def snapshot(root: Path, exclude: tuple[str, ...] = ()) -> dict[str, tuple]:
    """Every entry under ``root`` (never following a link): its kind and, for a file, content digest, mode, inode and mtime."""
    found: dict[str, tuple] = {}
    if not os.path.lexists(root):
        return found
    for folder, dirs, files in os.walk(root):
        for name in sorted(dirs + files):
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, root)
            if any(rel == e or rel.startswith(e + os.sep) for e in exclude):
                continue
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("folder", stat.S_IMODE(st.st_mode))
            elif stat.S_ISREG(st.st_mode):
                with open(path, "rb") as f:
                    digest = hashlib.sha256(f.read()).hexdigest()[:16]
                found[rel] = ("file", digest, stat.S_IMODE(st.st_mode), st.st_ino, st.st_mtime_ns)
            else:
                found[rel] = ("other", st.st_mode)
    return found


def changes(before: dict, after: dict) -> list[str]:
    out = []
    for rel in sorted(set(before) | set(after)):
        a, b = before.get(rel), after.get(rel)
        if a == b:
            continue
        if a is None:
            out.append(f"{rel} appeared")
        elif b is None:
            out.append(f"{rel} disappeared")
        elif a[0] == b[0] == "file" and a[1] != b[1]:
            out.append(f"{rel} content changed")
        else:
            out.append(f"{rel} changed ({a[0]}: {'inode/mtime' if a[0] == 'file' else 'target/mode'})")
    return out


def load_json(path: Path) -> object:
    return json.loads(Path(path).read_text())


def metric_differences(a: object, b: object, where: str = "") -> list[str]:
    """Where two metrics differ, timing keys aside (NaN equals NaN; numbers compared exactly)."""
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if TIMING.search(k):
                continue
            if k not in a or k not in b:
                out.append(f"{where}{k} only in {'the reference' if k in b else 'this run'}")
            else:
                out += metric_differences(a[k], b[k], f"{where}{k}.")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{where.rstrip('.')}: length {len(a)} vs {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in metric_differences(x, y, f"{where}{i}.")]
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return []
    return [] if a == b else [f"{where.rstrip('.')}: {a!r} vs {b!r}"]


def same_metrics(run: Path, reference: Path) -> None:
    if not (run / "metrics.json").is_file():
        raise Broken(f"no metrics.json in {run.name} after exit 0")
    diff = metric_differences(load_json(run / "metrics.json"), load_json(reference / "metrics.json"))
    if diff:
        raise Broken(f"metrics.json differs from the uninterrupted run's: {'; '.join(diff[:3])}{' ...' if len(diff) > 3 else ''}")


# --- running a command --------------------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("GFLOWNET_MEASURE_TRUST_CHECKPOINTS", None)
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def execute(argv: list[str], cwd: Path, timeout: float, log: list) -> Result:
    t0 = time.perf_counter()
    try:
        p = subprocess.run(argv, cwd=cwd, env=_env(), capture_output=True, text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
        r = Result(argv, p.returncode, p.stdout, p.stderr, time.perf_counter() - t0)
    except subprocess.TimeoutExpired as e:
        err = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or "")
        r = Result(argv, None, "", err, time.perf_counter() - t0)
        log.append(_logged(r))
        raise Broken(f"still running after {timeout:.0f} s (killed): `{' '.join(shown(a) for a in argv)}`; last: {r.tail(1)[:200]}") from None
    log.append(_logged(r))
    return r


def _logged(r: Result) -> dict:
    return {"argv": r.argv, "code": r.code, "seconds": round(r.seconds, 2), "stderr_tail": r.messages()[-4:]}


class Background:
    """A command started in the background (stdout and stderr to files), to be signalled and waited for."""

    def __init__(self, argv: list[str], cwd: Path, log: list):
        self.argv, self.log, self.t0 = argv, log, time.perf_counter()
        self._out, self._err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
        self.proc = subprocess.Popen(argv, cwd=cwd, env=_env(), stdout=self._out, stderr=self._err, stdin=subprocess.DEVNULL)

    def running(self) -> bool:
        return self.proc.poll() is None

    def signal(self, sig: int) -> bool:
        """Send ``sig`` to the process (this one only); whether it was still running."""
        if not self.running():
            return False
        self.proc.send_signal(sig)
        return True

    def wait(self, timeout: float) -> Result:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            r = self._result()
            raise Broken(f"still running after {timeout:.0f} s (killed): `{' '.join(shown(a) for a in self.argv)}`; last: {r.tail(1)[:200]}") from None
        return self._result()

    def _result(self) -> Result:
        self._out.seek(0)
        self._err.seek(0)
        r = Result(
            self.argv, self.proc.returncode, self._out.read().decode(errors="replace"), self._err.read().decode(errors="replace"), time.perf_counter() - self.t0
        )
        self.log.append(_logged(r))
        return r

    def when(self, condition: Callable[[], bool], timeout: float, poll: float = 0.002) -> bool:
        """Wait until ``condition()`` holds (True) or the process ends or ``timeout`` passes (False)."""
        end = time.perf_counter() + timeout
        while time.perf_counter() < end:
            try:
                if condition():
                    return True
            except OSError:
                pass
            if not self.running():
                return condition()
            time.sleep(poll)
        return False


# --- fixtures: runs built once, copied by the cases ---------------------------------------------------------------------


class Fixtures:
    """Runs built once (on first use) under ``root``; cases ``cp -a`` them and never write in them."""

    def __init__(self, root: Path):
        self.root = root
        self._locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self.seconds: dict[str, float] = {}
        self.log: list = []

    def get(self, name: str) -> Path:
        with self._lock:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            path = self.root / name
            if not (path / ".built").exists():
                t0 = time.perf_counter()
                shutil.rmtree(path, ignore_errors=True)
                path.mkdir(parents=True)
                try:
                    getattr(self, f"_build_{name}")(path)
                except Broken as e:
                    raise Broken(f"fixture {name} could not be built: {e}") from None
                (path / ".built").write_text("")
                self.seconds[name] = time.perf_counter() - t0
            return path / "run"

    def snapshot(self) -> dict:
        return snapshot(self.root)

    def _run(self, path: Path, argv: list[str]) -> None:
        check_output(execute([*GM, "run", *argv, "--out", "run", *THREADS], path, RUN_TIMEOUT, self.log), 0)

    def _build_finished(self, path: Path) -> None:  # hypergrid, 20 updates, seed 0: every case's "RUN"
        self._run(path, HG)

    def _build_finished_seed1(self, path: Path) -> None:  # the same settings, seed 1: a checkpoint of another run
        self._run(path, [*HG, "--seed", "1"])

    def _build_finished_tb(self, path: Path) -> None:  # with a tensorboard/ folder among its outputs
        self._run(path, [*HG, "logger=tensorboard"])

    def _build_long(self, path: Path) -> None:  # 400 updates, uninterrupted: what every kill's resume must match
        self._run(path, HG_LONG)

    def _build_unfinished(self, path: Path) -> None:  # the 400-update run, kill -9 mid-training (2 evaluations done)
        bg = Background([*GM, "run", *HG_LONG, "--out", "run", *THREADS], path, self.log)
        hit = bg.when(lambda: history_rows(path / "run") >= 2, RUN_TIMEOUT)
        bg.signal(signal.SIGKILL)
        bg.wait(30)
        if not hit or (path / "run" / "metrics.json").exists():
            raise Broken("the run ended before it could be killed mid-training")


def history_rows(run: Path) -> int:
    try:
        return sum(1 for line in (run / "history.jsonl").read_text(errors="replace").splitlines() if line.strip().endswith("}"))
    except FileNotFoundError:
        return 0


# --- a case ---------------------------------------------------------------------------------------------------------------

HOME_FILES = {
    "notes.txt": "my notes: do not lose\n",
    "thesis/chapter1.tex": "\\chapter{One}\n",
    "thesis/figures/plot.png": "not really a png\n",
    "results/old_metrics.json": '{"mine": 1}\n',
}


class Case:
    def __init__(self, group: str, name: str, fn: Callable[["Ctx"], None], subcases: tuple[str, ...] = ()):
        self.group, self.name, self.fn, self.subcases = group, name, fn, subcases

    @property
    def id(self) -> str:
        return f"{self.group}/{self.name}"

    def count(self) -> int:
        return len(self.subcases) or 1


@dataclass
class Ctx:
    """One case's folders: ``home`` (the user's files, which must not change), ``work`` (the working directory, where
    the run folders lie; it may hold only the names in ``allowed``) and the shared fixtures."""

    dir: Path
    fixtures: Fixtures
    log: list = field(default_factory=list)
    allowed: set = field(default_factory=lambda: {"__pycache__"})
    results: dict = field(default_factory=dict)  # a multi-case's verdicts: subcase -> None (held) or why
    skipped: dict = field(default_factory=dict)
    home_before: dict = field(default_factory=dict)

    def __post_init__(self):
        self.home, self.work = self.dir / "home", self.dir / "work"
        for rel, text in HOME_FILES.items():
            (self.home / rel).parent.mkdir(parents=True, exist_ok=True)
            (self.home / rel).write_text(text)
        self.work.mkdir(parents=True)

    def user_file(self, rel: str, content: bytes) -> Path:
        """A file of the user's in ``home`` (before any command runs: it is then part of what must not change)."""
        path = self.home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
        self.home_before = snapshot(self.home)
        return path

    def copy(self, fixture: str, name: str) -> Path:
        """``cp -a`` a fixture run into ``work/name``."""
        dest = self.work / name
        subprocess.run(["cp", "-a", str(self.fixtures.get(fixture)), str(dest)], check=True)
        self.allowed.add(name)
        return dest

    def gm(self, *args: str, timeout: float = RUN_TIMEOUT) -> Result:
        """``gflownet-measure ARGS --threads 1`` (for `run`), in ``work``; every ``--out`` it names is allowed there."""
        argv = list(args)
        if "--out" in argv:
            self.allowed.add(Path(argv[argv.index("--out") + 1]).parts[0])
        if argv and argv[0] == "run" and "--threads" not in argv:
            argv += THREADS
        return execute([*GM, *argv], self.work, timeout, self.log)

    def background(self, *args: str) -> Background:
        argv = list(args)
        if "--out" in argv:
            self.allowed.add(Path(argv[argv.index("--out") + 1]).parts[0])
        return Background([*GM, *argv, *THREADS], self.work, self.log)

    def refused(self, *args: str, contains: tuple[str, ...] = (), unchanged: Path | None = None, absent: str | None = None) -> str:
        """``args`` must be refused: exit 2, one error line; ``unchanged``: a folder that must be left as it was;
        ``absent``: a path (in work) that must not exist afterwards (a refusal before the folder is made)."""
        before = snapshot(unchanged) if unchanged is not None else None
        line = check_output(self.gm(*args, timeout=REFUSAL_TIMEOUT), 2, "error", contains)
        if before is not None:
            diff = changes(before, snapshot(unchanged))
            if diff:
                raise Broken(f"refused ({line[:120]}...) but {unchanged.name} changed: {', '.join(diff[:4])}")
        if absent is not None and os.path.lexists(self.work / absent):
            raise Broken(f"refused, but the folder {absent} was written: {sorted(os.listdir(self.work / absent))[:6]}")
        return line

    def verdict(self, sub: str, fn: Callable[[], None]) -> None:
        """Record one subcase of a multi-case."""
        try:
            fn()
            self.results[sub] = None
        except Skipped as e:
            self.skipped[sub] = str(e)
        except Broken as e:
            self.results[sub] = str(e)


CASES: list[Case] = []


def case(group: str, name: str, subcases: tuple[str, ...] = ()):
    def register(fn):
        CASES.append(Case(group, name, fn, subcases))
        return fn

    return register


def family(group: str, name: str, params, fn):
    for p in params:
        label = p[0] if isinstance(p, tuple) else p
        CASES.append(Case(group, f"{name}[{label}]", (lambda ctx, p=p: fn(ctx, *(p if isinstance(p, tuple) else (p,))))))


def link(target: Path, at: Path) -> None:
    """``ln -s target at``, replacing whatever is at ``at`` (a file or a folder)."""
    if at.is_symlink() or at.is_file():
        at.unlink()
    elif at.is_dir():
        shutil.rmtree(at)
    at.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, at)


# === 1. --resume never writes through a link placed in the run folder ====================================================

FINISHED_NAMES = [
    "config.json",
    "manifest.json",
    "metrics.json",
    "history.jsonl",
    "samples.npz",
    "checkpoint.pt",
    "checkpoint.prev.pt",
    "wall_clock.json",
    "distribution.png",
    "checkpoint.tmp",
    "metrics.json.tmp",
    "tensorboard",  # the folder, as a link to a folder of the user's
    "tensorboard/EVENTS",  # the event file in it
]
UNFINISHED_NAMES = ["history.jsonl", "checkpoint.pt", "checkpoint.tmp", "samples.npz"]


def _resume_through_link(ctx: Ctx, fixture: str, name: str, experiment: str = "hypergrid") -> None:
    x = ctx.copy(fixture, "X")
    if name == "tensorboard/EVENTS":
        events = [p for p in (x / "tensorboard").iterdir() if p.name.startswith("events.")]
        if not events:
            raise Broken("the fixture's tensorboard/ folder holds no event file")
        at = events[0]
    else:
        at = x / name
    target = ctx.home / ("thesis" if name == "tensorboard" else "notes.txt")
    if name == "config.json":  # a link to a valid run config (the user's copy), so that the config check passes and the link check is met
        target = ctx.user_file("results/config.json", at.read_bytes())
    link(target, at)
    ctx.refused("run", experiment, "--out", "X", "--resume", contains=("link",), unchanged=x)


family("symlink", "resume-finished", FINISHED_NAMES, lambda ctx, name: _resume_through_link(ctx, "finished_tb", name))
family("symlink", "resume-unfinished", UNFINISHED_NAMES, lambda ctx, name: _resume_through_link(ctx, "unfinished", name))


def _dangling(ctx: Ctx, name: str) -> None:
    """A link to a file that does not exist yet: a write through it would create the user's file."""
    x = ctx.copy("finished", "X")
    link(ctx.home / "created_by_the_run.txt", x / name)
    ctx.refused("run", "hypergrid", "--out", "X", "--resume", contains=("link",), unchanged=x)


family("symlink", "dangling", ["samples.npz"], _dangling)


def _hard_link(ctx: Ctx, name: str, fixture: str) -> None:
    """A hard link to a user's file (indistinguishable from a run file): the user's file must keep its content; the
    resume may finish or refuse, in one line."""
    x = ctx.copy(fixture, "X")
    (x / name).unlink()
    os.link(ctx.home / "notes.txt", x / name)
    r = ctx.gm("run", "hypergrid", "--out", "X", "--resume")
    check_output(r, (0, 2), "error" if r.code == 2 else None)


family("symlink", "hard-link", [("history.jsonl", "finished"), ("wall_clock.json", "finished")], _hard_link)


@case("symlink", "out-is-a-link-to-a-users-folder")
def _out_link(ctx: Ctx) -> None:
    os.symlink(ctx.home / "thesis", ctx.work / "X")
    ctx.refused("run", *HG, "--out", "X", unchanged=ctx.home / "thesis")
    ctx.refused("run", *HG, "--out", "X", "--overwrite", unchanged=ctx.home / "thesis")


# === 2. --overwrite deletes only what the run wrote =====================================================================

USER_FILES = [
    "thesis_plot.png",
    "draft.tmp",
    "checkpoint.pt.orig",
    "my/draft.tmp",
    "my/samples.npz",
    "my/deep/er/config.json",
    "tensorboard/my_notes.tmp",  # in a folder the run made
    "tensorboard/sub/plot.png",
]


def _overwrite_user_file(ctx: Ctx, rel: str) -> None:
    p = ctx.copy("finished_tb", "P")
    (p / rel).parent.mkdir(parents=True, exist_ok=True)
    (p / rel).write_text("x\n")
    ctx.refused("run", "hypergrid", "--preset", "quick", "--set", "steps=50", "--out", "P", "--overwrite", contains=("nothing was deleted",), unchanged=p)


family("overwrite", "user-file", USER_FILES, _overwrite_user_file)


@case("overwrite", "empty-user-folder")
def _empty_folder(ctx: Ctx) -> None:
    p = ctx.copy("finished", "P")
    (p / "my_empty").mkdir()
    ctx.refused("run", *HG, "--out", "P", "--overwrite", unchanged=p)


def _overwrite_link(ctx: Ctx, name: str) -> None:
    p = ctx.copy("finished_tb", "P")
    link(ctx.home / ("thesis" if name == "tensorboard" else "notes.txt"), p / name)
    ctx.refused("run", *HG, "--out", "P", "--overwrite", unchanged=p)


family("overwrite", "link", ["checkpoint.tmp", "samples.npz", "tensorboard"], _overwrite_link)


@case("overwrite", "control-replaces-exactly-the-run")
def _overwrite_control(ctx: Ctx) -> None:
    p = ctx.copy("finished", "P")
    check_output(ctx.gm("run", "hypergrid", "--preset", "quick", "--set", "steps=30", "eval_every=10", "--out", "P", "--overwrite"), 0)
    if load_json(p / "metrics.json")["steps"] != 30:
        raise Broken("--overwrite exited 0 but metrics.json is not the new run's")


# === 3. divergence: exit 1, one line, the last good checkpoint finite, --resume the same line ==========================


def _finite_checkpoints(run: Path) -> None:
    import torch

    found = [p for p in (run / "checkpoint.pt", run / "checkpoint.prev.pt") if p.exists()]
    for p in found:
        state = torch.load(p, weights_only=True)
        bad = [k for k, v in state["model"].items() if isinstance(v, torch.Tensor) and v.is_floating_point() and not torch.isfinite(v).all()]
        if bad:
            raise Broken(f"{p.name} holds non-finite weights ({bad[0]})")


def _diverge(ctx: Ctx, label: str, argv: list[str], resume: bool) -> None:
    line = check_output(ctx.gm("run", *argv, "--out", "D"), 1, "stopped")
    d = ctx.work / "D"
    if (d / "metrics.json").exists():
        raise Broken("a diverged run wrote metrics.json")
    _finite_checkpoints(d)
    if resume:
        again = check_output(ctx.gm("run", argv[0], "--out", "D", "--resume"), 1, "stopped")
        _finite_checkpoints(d)
        if again.split(":")[:2] != line.split(":")[:2]:
            raise Broken(f"--resume stopped with another line: {again[:160]} (first: {line[:160]})")


DIVERGE = [
    ("hypergrid-tb-lr1e300", ["hypergrid", "--preset", "quick", "--set", "steps=100", "eval_every=1", "lr=1e300"], True),
    ("hypergrid-db-lr1e300", ["hypergrid", "--preset", "quick", "--set", "steps=100", "eval_every=1", "lr=1e300", "objective=db"], True),
    ("hypergrid-fm-lr1e300", ["hypergrid", "--preset", "quick", "--set", "steps=100", "eval_every=1", "lr=1e300", "objective=fm"], False),
    ("hypergrid-tb-lr1e30", ["hypergrid", "--preset", "quick", "--set", "steps=300", "eval_every=5", "lr=1e30"], True),
    ("quarter-disc-lr1e300", ["quarter-disc", "--preset", "quick", "--set", "steps=50", "eval_every=10", "lr=1e300"], True),
    ("torus-lr1e300", ["torus", "--preset", "quick", "--set", "steps=50", "eval_every=10", "lr=1e300"], False),
    ("sde-lr1000", ["sde", "--preset", "quick", "--set", "lr=1000"], True),
]
family("diverge", "run", DIVERGE, _diverge)


# === 4. a table's sub-run folders are the table's ========================================================================

TABLE_SUBCASES = (
    "table-folder-overwrite-while-running",
    "table-folder-resume-while-running",
    "first-sub-run-overwrite-while-running",
    "later-sub-run-resume-while-running",
    "last-sub-run-overwrite-while-running",
    "table-finishes-untouched",
    "finished-sub-run-overwrite",
    "finished-sub-run-resume",
    "finished-sub-run-overwrite-through-a-link",
    "finished-table-overwrite-with-a-users-file-in-a-sub-run",
    "killed-table-resumes-to-the-same-metrics",
)
FIRST, SECOND, LAST = "tb-uniform-rho0.25/seed0", "tb-learned-rho0.25/seed0", "db-learned-rho0.1/seed0"


@case("table", "quarter-disc-figure1", TABLE_SUBCASES)
def _table(ctx: Ctx) -> None:
    t = ctx.work / "T"
    bg = ctx.background("run", *TABLE, "--out", "T")
    if not bg.when(lambda: (t / FIRST / "config.json").exists(), RUN_TIMEOUT, poll=0.05):
        raise Broken(f"the table never made its first run folder: {bg.wait(RUN_TIMEOUT).describe()}")

    def attack(args: tuple[str, ...], text: tuple[str, ...] = ()) -> Callable[[], None]:
        def go() -> None:
            if not bg.running():
                raise Skipped("the table finished before the attack started")
            r = ctx.gm(*args, timeout=REFUSAL_TIMEOUT)
            check_output(r, 2, "error", text)

        return go

    ctx.verdict("table-folder-overwrite-while-running", attack(("run", *TABLE, "--out", "T", "--overwrite"), ("in use",)))
    ctx.verdict("table-folder-resume-while-running", attack(("run", TABLE[0], "--out", "T", "--resume"), ("in use",)))
    ctx.verdict("first-sub-run-overwrite-while-running", attack(("run", *QD_SHORT, "--out", f"T/{FIRST}", "--overwrite")))
    ctx.verdict("later-sub-run-resume-while-running", attack(("run", "quarter-disc", "--out", f"T/{SECOND}", "--resume")))
    ctx.verdict("last-sub-run-overwrite-while-running", attack(("run", *QD_SHORT, "--out", f"T/{LAST}", "--overwrite")))

    def finishes() -> None:
        check_output(bg.wait(RUN_TIMEOUT * 2), 0)
        for sub in t.glob("*/seed*"):
            cfg = load_json(sub / "config.json")
            if not (sub / "metrics.json").is_file() or (isinstance(cfg, dict) and cfg.get("experiment") == "quarter-disc"):
                raise Broken(f"the table's run {sub.relative_to(t)} is not the table's (a run of its own was written there)")
        if len(list(t.glob("*/seed*/metrics.json"))) != 8:
            raise Broken(f"the table holds {len(list(t.glob('*/seed*/metrics.json')))} finished runs, not 8")

    ctx.verdict("table-finishes-untouched", finishes)
    if not (t / "metrics.json").is_file():
        for sub in TABLE_SUBCASES[TABLE_SUBCASES.index("table-finishes-untouched") + 1 :]:
            ctx.results[sub] = "not run: the table did not finish"
        return
    ctx.allowed.add("U")

    def finished_attack(args: tuple[str, ...], plant: str | None = None) -> Callable[[], None]:
        def go() -> None:
            shutil.rmtree(ctx.work / "U", ignore_errors=True)
            shutil.copytree(t, ctx.work / "U", symlinks=True)
            if plant:
                (ctx.work / "U" / plant).write_text("x\n")
            ctx.refused(*args, unchanged=ctx.work / "U")

        return go

    ctx.verdict("finished-sub-run-overwrite", finished_attack(("run", *QD_SHORT, "--out", f"U/{FIRST}", "--overwrite")))
    ctx.verdict("finished-sub-run-resume", finished_attack(("run", "quarter-disc", "--out", f"U/{FIRST}", "--resume")))

    def through_link() -> None:
        shutil.rmtree(ctx.work / "U", ignore_errors=True)
        shutil.copytree(t, ctx.work / "U", symlinks=True)
        os.symlink(f"U/{FIRST}", ctx.work / "Y")  # a shortcut of the user's to one of the table's runs
        ctx.allowed.add("Y")
        try:
            ctx.refused("run", *QD_SHORT, "--out", "Y", "--overwrite", unchanged=ctx.work / "U")
        finally:
            os.unlink(ctx.work / "Y")

    ctx.verdict("finished-sub-run-overwrite-through-a-link", through_link)
    ctx.verdict(
        "finished-table-overwrite-with-a-users-file-in-a-sub-run",
        finished_attack(("run", *TABLE, "--out", "U", "--overwrite"), plant=f"{FIRST}/thesis_plot.png"),
    )

    def killed() -> None:
        k = ctx.work / "K"
        run = ctx.background("run", *TABLE, "--out", "K")
        if not run.when(lambda: (k / "tb-learned-rho0.1" / "seed0" / "config.json").exists(), RUN_TIMEOUT * 2, poll=0.02):
            raise Skipped(f"the table ended before the kill ({run.wait(RUN_TIMEOUT).describe()})")
        run.signal(signal.SIGKILL)
        run.wait(30)
        check_output(ctx.gm("run", TABLE[0], "--out", "K", "--resume"), 0)
        same_metrics(k, t)

    ctx.verdict("killed-table-resumes-to-the-same-metrics", killed)


# === 5. a damaged checkpoint: the one before it, with a warning, or one line ==========================================


def corrupt(path: Path, how: str, rng: random.Random) -> None:
    data = bytearray(path.read_bytes())
    n = len(data)
    if how == "flip1-start":
        data[rng.randrange(0, 64)] ^= 0xFF
    elif how == "flip1-middle":
        data[rng.randrange(n // 3, 2 * n // 3)] ^= 0x01
    elif how == "flip1-end":
        data[rng.randrange(n - 64, n)] ^= 0xFF
    elif how == "flip64":
        for i in rng.sample(range(n), 64):
            data[i] ^= 0xFF
    elif how == "random-bytes":
        data = bytearray(rng.randbytes(n))
    elif how == "truncated":
        data = data[: n // 2]
    elif how == "empty":
        data = bytearray()
    elif how == "junk-appended":
        data += rng.randbytes(1000)
    else:
        raise ValueError(how)
    path.write_bytes(bytes(data))


def resume_damaged(ctx: Ctx, x: Path, reference: Path, damaged: tuple[str, ...]) -> None:
    """``--resume`` of ``x`` whose ``damaged`` checkpoints were altered: exit 0 with ``reference``'s metrics (and a warning
    naming checkpoint.pt where it was skipped), or exit 2 in one line; never other metrics, never exit 0 from a bad file."""
    had_metrics = (x / "metrics.json").read_bytes() if (x / "metrics.json").exists() else None
    r = ctx.gm("run", "hypergrid", "--out", "X", "--resume")
    check_output(r, (0, 2), "error" if r.code == 2 else None)
    if r.code == 0:
        same_metrics(x, reference)
        if "checkpoint.pt" in damaged and "checkpoint.prev.pt" in damaged:
            raise Broken(f"both checkpoints were altered, yet the resume finished (exit 0): {r.tail()}")
    elif had_metrics is not None and (x / "metrics.json").read_bytes() != had_metrics:
        raise Broken("refused, but metrics.json was rewritten")


CORRUPTIONS = ["flip1-start", "flip1-middle", "flip1-end", "flip64", "random-bytes", "truncated", "empty", "junk-appended"]


def _checksum(ctx: Ctx, how: str, which: str) -> None:
    x = ctx.copy("finished", "X")
    rng = random.Random(f"{how}/{which}")
    names = {"last": ("checkpoint.pt",), "prev": ("checkpoint.prev.pt",), "both": ("checkpoint.pt", "checkpoint.prev.pt")}[which]
    for name in names:
        corrupt(x / name, how, rng)
    usable = intact(x / "checkpoint.pt")
    resume_damaged(ctx, x, ctx.fixtures.get("finished"), names)
    r = ctx.log[-1]
    if which != "prev" and r["code"] == 0 and not usable and not any("warning" in line and "checkpoint.prev.pt" in line for line in r["stderr_tail"]):
        raise Broken(f"checkpoint.pt was damaged ({how}) and skipped without a warning: {r['stderr_tail']}")


def intact(path: Path) -> bool:
    """Whether ``path`` still loads (weights only) and matches its digest: a damage that changed nothing the run reads."""
    import torch

    try:
        from gflownet_measure.training import _digest

        state = torch.load(path, weights_only=True)
        return isinstance(state, dict) and state.get("sha256") == _digest(state)
    except Exception:
        return False


family(
    "checksum",
    "finished",
    [(f"{how}-{which}", how, which) for which in ("last",) for how in CORRUPTIONS if how not in ("flip1-end", "junk-appended")]
    + [(f"{how}-{which}", how, which) for which in ("both",) for how in ("flip1-middle", "truncated")]
    + [("random-bytes-prev", "random-bytes", "prev")],
    lambda ctx, label, how, which: _checksum(ctx, how, which),
)


def _checksum_unfinished(ctx: Ctx, how: str) -> None:
    x = ctx.copy("unfinished", "X")
    corrupt(x / "checkpoint.pt", how, random.Random(how))
    resume_damaged(ctx, x, ctx.fixtures.get("long"), ("checkpoint.pt",))


family("checksum", "unfinished", ["truncated"], _checksum_unfinished)


# === 6. settings whose cost would fail after the folder is written: refused before it ==================================

COSTLY = [
    ("hypergrid-eval_samples", ["hypergrid", "--set", "steps=1", "eval_samples=1e9"]),
    ("quarter-disc-eval_samples", ["quarter-disc", "--set", "eval_samples=1e9"]),
    ("torus-eval_samples", ["torus", "--set", "eval_samples=1e9"]),
    ("sde-eval_samples", ["sde", "--set", "eval_samples=1e9"]),
    ("mle-diffusion-batch_size", ["mle-diffusion", "--set", "batch_size=1e15"]),
    ("mle-diffusion-hidden", ["mle-diffusion", "--set", "hidden=300000"]),
    ("sde-table-smc_particles", ["sde-table", "--set", "smc_particles=1e12"]),
    ("mle-diffusion-table-seeds", ["mle-diffusion-table", "--preset", "quick", "--set", "seeds=1e12", "steps=1"]),
]
family("cost", "refused-before-the-folder", COSTLY, lambda ctx, label, argv: ctx.refused("run", *argv, "--out", "C", absent="C"))


@case("cost", "resume-revises-eval_samples")
def _revise(ctx: Ctx) -> None:
    x = ctx.copy("finished", "X")
    weights = (x / "checkpoint.pt").read_bytes()
    check_output(ctx.gm("run", "hypergrid", "--out", "X", "--resume", "--set", "eval_samples=300"), 0)
    cfg = load_json(x / "config.json")
    if cfg.get("trained_with") != {"eval_samples": 10000} or cfg["settings"].get("eval_samples") != 300:
        raise Broken(
            f"config.json after --resume --set eval_samples=300: trained_with={cfg.get('trained_with')!r}, eval_samples={cfg['settings'].get('eval_samples')!r}"
        )
    if (x / "checkpoint.pt").read_bytes() != weights:
        import torch

        a, b = torch.load(x / "checkpoint.pt", weights_only=True), torch.load(ctx.fixtures.get("finished") / "checkpoint.pt", weights_only=True)
        if a["step"] != b["step"] or any(not torch.equal(a["model"][k], b["model"][k]) for k in b["model"]):
            raise Broken("--resume --set eval_samples changed the trained weights")


family(
    "cost",
    "resume-refuses",
    [("steps=5", "steps=5"), ("lr=1", "lr=1"), ("eval_samples=1e9", "eval_samples=1e9")],
    lambda ctx, label, setting: ctx.refused("run", "hypergrid", "--out", "X", "--resume", "--set", setting, unchanged=ctx.copy("finished", "X")),
)


# === 7. crafted checkpoints: never a finished run from a crafted file, never a traceback ===============================


class Evil:
    """Unpickling it runs a command (what ``weights_only=False`` would do with a file from elsewhere)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def craft(path: Path, how: str, ctx: Ctx) -> None:
    import torch

    state = torch.load(path, weights_only=True)
    fix_digest = True
    if how == "run_id-none":
        state["run_id"] = None
    elif how == "step-1e9":
        state["step"] = 1e9
    elif how == "step-int-1e9":
        state["step"] = 10**9
    elif how == "step-minus-50":
        state["step"] = -50
    elif how == "step-10.5":
        state["step"] = 10.5
    elif how == "seconds-nan":
        state["seconds"] = float("nan")
    elif how == "rng-garbage":
        state["rng"] = {"torch": torch.zeros(3, dtype=torch.uint8), "numpy": [1, 2], "python": "abc"}
    elif how == "nan-weights":
        next(v for v in state["model"].values() if v.is_floating_point()).fill_(float("nan"))
    elif how == "nan-weights-stale-digest":
        next(v for v in state["model"].values() if v.is_floating_point()).fill_(float("nan"))
        fix_digest = False
    elif how == "wrong-shape":
        k = next(k for k, v in state["model"].items() if v.is_floating_point() and v.dim() == 2)
        state["model"][k] = torch.zeros(3, 3)
    elif how == "model-a-list":
        state["model"] = [1, 2, 3]
    elif how == "evil-pickle":
        torch.save({**state, "payload": Evil(ctx.home / "pwned")}, path)
        return
    else:
        raise ValueError(how)
    if fix_digest:  # an attacker who knows the format: the digest matches the crafted content
        from gflownet_measure.training import _digest

        state.pop("sha256", None)
        state["sha256"] = _digest(state)
    torch.save(state, path)


CRAFTED = [
    "run_id-none",
    "step-1e9",
    "step-minus-50",
    "seconds-nan",
    "rng-garbage",
    "nan-weights",
    "wrong-shape",
    "model-a-list",
    "evil-pickle",
]


def _crafted(ctx: Ctx, how: str, both: bool) -> None:
    x = ctx.copy("finished", "X")
    names = ("checkpoint.pt", "checkpoint.prev.pt") if both else ("checkpoint.pt",)
    for name in names:
        craft(x / name, how, ctx)
    resume_damaged(ctx, x, ctx.fixtures.get("finished"), names)


family("crafted", "last", [(how, how, False) for how in CRAFTED], lambda ctx, label, how, both: _crafted(ctx, how, both))
family(
    "crafted",
    "both",
    [(how, how, True) for how in ("step-1e9", "evil-pickle")],
    lambda ctx, label, how, both: _crafted(ctx, how, both),
)


@case("crafted", "another-runs-checkpoint")
def _other_run(ctx: Ctx) -> None:
    x = ctx.copy("finished", "X")
    shutil.copy(ctx.fixtures.get("finished_seed1") / "checkpoint.pt", x / "checkpoint.pt")
    resume_damaged(ctx, x, ctx.fixtures.get("finished"), ("checkpoint.pt",))


@case("crafted", "unfinished-step-1e9-both")
def _unfinished_crafted(ctx: Ctx) -> None:
    x = ctx.copy("unfinished", "X")
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        craft(x / name, "step-int-1e9", ctx)
    r = ctx.gm("run", "hypergrid", "--out", "X", "--resume")
    check_output(r, 2, "error")
    if (x / "metrics.json").exists():
        raise Broken("a crafted step made a finished run")


# === 8. one-line errors on what a folder or a data file holds =========================================================


def _edit_config(ctx: Ctx, label: str, edit: Callable[[dict], object]) -> None:
    x = ctx.copy("finished", "X")
    cfg = load_json(x / "config.json")
    new = edit(cfg)
    (x / "config.json").write_text(new if isinstance(new, str) else json.dumps(new if new is not None else cfg))
    ctx.refused("run", "hypergrid", "--out", "X", "--resume", unchanged=x)


def _set(key: str, value: object, settings: bool = False) -> Callable[[dict], None]:
    def edit(cfg: dict) -> None:
        (cfg["settings"] if settings else cfg)[key] = value

    return edit


CONFIG_EDITS = [
    ("seed-abc", _set("seed", "abc")),
    ("seed-0.5", _set("seed", 0.5)),
    ("device-tpu", _set("device", "tpu")),
    ("experiment-sde", _set("experiment", "sde")),
    ("not-json", lambda cfg: "{not json"),
    ("steps-abc", _set("steps", "abc", settings=True)),
]
family("oneline", "config", CONFIG_EDITS, _edit_config)


def _history(ctx: Ctx, label: str, content: bytes) -> None:
    x = ctx.copy("unfinished", "X")
    (x / "history.jsonl").write_bytes(content)
    before = {n: (x / n).read_bytes() for n in ("checkpoint.pt", "checkpoint.prev.pt")}
    line = check_output(ctx.gm("run", "hypergrid", "--out", "X", "--resume"), 2, "error", ("history.jsonl",))
    if (x / "metrics.json").exists() or any((x / n).read_bytes() != b for n, b in before.items()):
        raise Broken(f"refused ({line[:100]}), but the run's checkpoints or metrics changed")


HISTORIES = [
    ("not-utf8", b'{"step": 50, "loss": 1.0}\n\xff\xfe\xfa garbage\n'),
    ("null-step", b'{"step": null, "loss": 1.0}\n'),
]
family("oneline", "history", HISTORIES, _history)


@case("oneline", "history-emptied-in-a-finished-run")
def _history_empty(ctx: Ctx) -> None:
    """A finished run whose history.jsonl holds no row: its resume (which evaluates again) finishes or refuses, in one line."""
    x = ctx.copy("finished", "X")
    (x / "history.jsonl").write_bytes(b"")
    r = ctx.gm("run", "hypergrid", "--out", "X", "--resume")
    check_output(r, (0, 2), "error" if r.code == 2 else None)


@case("oneline", "manifest-garbage")
def _manifest(ctx: Ctx) -> None:
    x = ctx.copy("unfinished", "X")
    (x / "manifest.json").write_text("[garbage")
    r = ctx.gm("run", "hypergrid", "--out", "X", "--resume")
    check_output(r, (0, 2), "error" if r.code == 2 else None)
    if r.code == 0:
        same_metrics(x, ctx.fixtures.get("long"))


def _csv(ctx: Ctx, label: str, content: bytes | None) -> None:
    if label == "a-folder":
        path = ctx.home / "thesis"
    elif content is None:
        path = ctx.home / "data" / f"{label}.csv"
    else:
        path = ctx.user_file(f"data/{label}.csv", content)
    ctx.refused("run", "jsp-gfn", "--preset", "quick", "--set", f"data={path}", "steps=10", "--out", "J", absent="J")


def _table_csv(rows: list[list[str]]) -> bytes:
    return ("\n".join(",".join(r) for r in rows) + "\n").encode()


_R = random.Random(0)
_GOOD = [[f"{_R.gauss(0, 1):.6g}" for _ in range(3)] for _ in range(40)]
CSVS = [
    ("cell-1e308", _table_csv([["a", "b", "c"], *[(["1e308", *r[1:]] if i == 5 else r) for i, r in enumerate(_GOOD)]])),
    ("all-times-1e300", _table_csv([["a", "b", "c"], *[[f"{float(v) * 1e300:.6g}" for v in r] for r in _GOOD]])),
    ("missing-file", None),
    ("a-folder", None),
    ("non-numeric", _table_csv([["a", "b", "c"], *[(["x7", *r[1:]] if i == 3 else r) for i, r in enumerate(_GOOD)]])),
    ("nan-cell", _table_csv([["a", "b", "c"], *[(["nan", *r[1:]] if i == 3 else r) for i, r in enumerate(_GOOD)]])),
    ("ragged", _table_csv([["a", "b", "c"], *[(r[:2] if i == 7 else r) for i, r in enumerate(_GOOD)]])),
    ("not-utf8", b"a,b,c\n" + b"\xff\xfe,1,2\n" * 5),
]
family("oneline", "csv", CSVS, _csv)

COMMAND_LINES = [
    ("seed-minus-1", ["run", *HG, "--seed", "-1"]),
    ("threads-0", ["run", *HG, "--threads", "0"]),
    ("unknown-setting", ["run", *HG, "no_such_setting=1"]),
    ("steps-0", ["run", "hypergrid", "--set", "steps=0"]),
    ("lr-nan", ["run", "hypergrid", "--set", "lr=nan"]),
]
family("oneline", "command-line", COMMAND_LINES, lambda ctx, label, argv: ctx.refused(*argv, "--out", "N", absent="N"))


@case("oneline", "out-under-a-file")
def _out_under_file(ctx: Ctx) -> None:
    (ctx.work / "afile").write_text("mine\n")
    ctx.allowed.add("afile")
    ctx.refused("run", *HG, "--out", "afile/run", unchanged=ctx.work / "afile")


# === 9. kill -9 / Ctrl-C at several points: --resume finishes with the uninterrupted run's metrics ===================


def _kill_and_resume(
    ctx: Ctx, sig: int, condition: Callable[[Path], bool], expect_code: int | None = None, what: str = "", landed: Callable[[Path], bool] | None = None
) -> None:
    """Start the 400-update run, send ``sig`` once ``condition(folder)`` holds, then finish it as the user would (``--resume``;
    a fresh start where no folder was made): the metrics must be those of the uninterrupted run. ``landed(folder)``, checked
    right after the signal: whether it came at the point the case is about (a skipped case otherwise)."""
    k = ctx.work / "K"
    bg = ctx.background("run", *HG_LONG, "--out", "K")
    hit = bg.when(lambda: condition(k), RUN_TIMEOUT)
    sent = bg.signal(sig) if hit else False
    r = bg.wait(60)
    if not sent:
        raise Skipped(f"the run ended before the kill point ({what}): {r.describe()}")
    if landed is not None and not landed(k):
        raise Skipped(f"the kill came after the point it is for ({what})")
    if expect_code is not None:
        line = check_output(r, expect_code, "interrupted", ("--resume",))
        if "--out K --resume" not in line:
            raise Broken(f"the Ctrl-C line does not give the command that resumes: {line}")
    if not k.exists():
        check_output(ctx.gm("run", HG_LONG[0], "--out", "K", "--resume"), 2, "error")
        check_output(ctx.gm("run", *HG_LONG, "--out", "K"), 0)
    else:
        check_output(ctx.gm("run", HG_LONG[0], "--out", "K", "--resume"), 0)
    same_metrics(k, ctx.fixtures.get("long"))


def _rows_then(n: int) -> Callable[[Path], bool]:
    return lambda k: history_rows(k) >= n


KILLS = [
    ("before-the-folder", signal.SIGKILL, lambda k: time.sleep(0.8) or True, "during the imports", lambda k: not k.exists()),
    ("folder-without-checkpoint", signal.SIGKILL, lambda k: (k / "config.json").exists(), "config.json written", lambda k: not (k / "checkpoint.pt").exists()),
    ("after-an-evaluation-row", signal.SIGKILL, _rows_then(1), "the first history row", None),
    (
        "final-evaluation",
        signal.SIGKILL,
        lambda k: any('"step": 400' in line for line in (k / "history.jsonl").read_text().splitlines()),
        "the last history row",
        lambda k: not (k / "metrics.json").exists(),
    ),
    ("sigterm-mid-training", signal.SIGTERM, _rows_then(3), "3 history rows", None),
]
family(
    "kill",
    "run",
    KILLS,
    lambda ctx, label, sig, cond, what, landed: _kill_and_resume(ctx, sig, cond, what=what, landed=landed),
)
CASES.append(Case("kill", "run[sigint-mid-training]", lambda ctx: _kill_and_resume(ctx, signal.SIGINT, _rows_then(2), 130, "2 history rows")))


@case("kill", "during-resume-of-a-finished-run")
def _kill_resume_finished(ctx: Ctx) -> None:
    x = ctx.copy("long", "X")
    inode = (x / "history.jsonl").stat().st_ino
    bg = ctx.background("run", "hypergrid", "--out", "X", "--resume")
    hit = bg.when(lambda: (x / "history.jsonl").stat().st_ino != inode, RUN_TIMEOUT)  # the resume rewrote its history
    sent = bg.signal(signal.SIGKILL) if hit else False
    r = bg.wait(60)
    if not sent:
        raise Skipped(f"the resume ended before the kill: {r.describe()}")
    check_output(ctx.gm("run", "hypergrid", "--out", "X", "--resume"), 0)
    same_metrics(x, ctx.fixtures.get("long"))


@case("kill", "killed-twice")
def _killed_twice(ctx: Ctx) -> None:
    x = ctx.copy("unfinished", "X")
    start = history_rows(x)
    bg = ctx.background("run", "hypergrid", "--out", "X", "--resume")
    hit = bg.when(lambda: history_rows(x) >= start + 2, RUN_TIMEOUT)
    sent = bg.signal(signal.SIGKILL) if hit else False
    bg.wait(60)
    if not sent:
        raise Skipped("the resume ended before the second kill")
    check_output(ctx.gm("run", "hypergrid", "--out", "X", "--resume"), 0)
    same_metrics(x, ctx.fixtures.get("long"))


# === 10. a space of one's own: a reward that misbehaves in training ===================================================

SPACE = '''
"""One step: s0 = [0, 0] -> [1, y], y in [0, 1] (Lebesgue) -> the sink; R(y) = (y (1 - y))^power."""
import torch
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.heads import BetaHead
from gflownet_measure.kernels import Kernel, atoms_measure
from gflownet_measure.measures import Box, Piece, charted, counting, sum_measures
from gflownet_measure.networks import MLPPolicy
from gflownet_measure.charts import AffineChart

chart = AffineChart(Box((0.0,), (1.0,)), slots=(1,), fixed={0: 1.0})


class Forward(Kernel):
    def __call__(self, s):
        done = s[:, :1] == 1
        return atoms_measure(s.new_zeros(len(s), 1, 2), done, torch.ones_like(done), (Piece(chart, s, ~done[:, 0]),))


class Backward(Kernel):
    def __call__(self, s):
        return atoms_measure(s.new_zeros(len(s), 1, 2), s[:, :1] == 1)


def log_reward(x, power):
    return REWARD


def make_graph(power: float = 1.0, hidden: int = 32):
    segment = charted(chart, state_dim=2)
    graph = PointedGraph(name="one-beta", source=torch.zeros(2), kappa=Forward(), kappa_b=Backward(),
                         nu=sum_measures(counting(torch.zeros(1, 2)), segment), terminal=segment,
                         log_reward=lambda x: log_reward(x, power), max_length=2, encode=lambda s: s)
    pf = MLPPolicy(graph.kappa, graph.encode, n_in=2, n_atoms=1, heads=[BetaHead(1)], hidden=hidden)
    return graph, pf, UniformPolicy(graph.kappa_b)
'''
GOOD_REWARD = "power * (x[:, 1].log() + (-x[:, 1]).log1p())"
REWARDS = {
    "nan": f"torch.where(x[:, 1] > 0.97, torch.nan, {GOOD_REWARD})",  # NaN on y > 0.97: met in training, rarely by the trial
    "zero": f"torch.where(x[:, 1] < 0.5, -torch.inf, {GOOD_REWARD})",  # R = 0 on y < 1/2
    "raises": f"(_ for _ in ()).throw(ValueError('my reward broke')) if True else {GOOD_REWARD}",
    "wrong-shape": f"({GOOD_REWARD})[:, None]",
}
USER_BUDGET = ["--set", "steps=100", "batch_size=64", "eval_every=50", "eval_samples=500"]


def write_space(ctx: Ctx, name: str, reward: str, kernel_raises: bool = False) -> str:
    source = textwrap.dedent(SPACE).replace("REWARD", reward)
    if kernel_raises:  # the tutorial's "a kernel that raises is one line and exit code 2"
        source = source.replace("        done = s[:, :1] == 1\n", "        raise RuntimeError('my kernel broke')\n", 1)
    (ctx.work / f"{name}.py").write_text(source)
    ctx.allowed.add(f"{name}.py")
    return f"{name}.py:make_graph"


@case("user", "nan-reward-in-training")
def _nan_reward(ctx: Ctx) -> None:
    space = write_space(ctx, "my_space", REWARDS["nan"])
    r = ctx.gm("run", space, *USER_BUDGET, "--out", "R")
    line = check_output(r, (1, 2), "stopped" if r.code == 1 else "error", ("nan", "x=["))
    if r.code == 2:
        if (ctx.work / "R").exists():
            raise Broken("the trial rollout met the NaN (exit 2) but the folder was written")
        return
    if not (ctx.work / "R" / "checkpoint.pt").exists() or (ctx.work / "R" / "metrics.json").exists():
        raise Broken("a NaN stop must keep the last good checkpoint and write no metrics.json")
    again = ctx.gm("run", space, "--out", "R", "--resume")
    check_output(again, (0, 1), "stopped" if again.code == 1 else None)
    if again.code == 1 and again.messages()[-1].split(" at ")[0] != line.split(" at ")[0]:
        raise Broken(f"--resume stopped with another line: {again.messages()[-1][:200]}")


@case("user", "zero-reward-names-the-floor")
def _zero_reward(ctx: Ctx) -> None:
    space = write_space(ctx, "my_space", REWARDS["zero"])
    check_output(ctx.gm("run", space, *USER_BUDGET, "--out", "R"), 1, "stopped", ("reward_floor", "x=["))


@case("user", "zero-reward-with-a-floor-trains")
def _floor(ctx: Ctx) -> None:
    space = write_space(ctx, "my_space", REWARDS["zero"])
    check_output(ctx.gm("run", space, *USER_BUDGET, "reward_floor=1e-6", "--out", "F"), 0)
    m = load_json(ctx.work / "F" / "metrics.json")
    if not (isinstance(m, dict) and math.isfinite(m.get("log_Z_importance_weighted", math.nan))):
        raise Broken(f"the floored run's log Z is not finite: {m}")


family(
    "user",
    "refused-before-the-folder",
    [("reward-raises", "raises"), ("reward-wrong-shape", "wrong-shape"), ("kernel-raises", "kernel")],
    lambda ctx, label, which: ctx.refused(
        "run", write_space(ctx, "my_space", REWARDS.get(which, GOOD_REWARD), kernel_raises=which == "kernel"), *USER_BUDGET, "--out", "R", absent="R"
    ),
)


@case("user", "factory-syntax-error")
def _syntax(ctx: Ctx) -> None:
    (ctx.work / "broken_space.py").write_text("def make_graph(:\n")
    ctx.allowed.add("broken_space.py")
    ctx.refused("run", "broken_space.py:make_graph", "--out", "R", absent="R")


@case("user", "factory-missing")
def _missing(ctx: Ctx) -> None:
    write_space(ctx, "my_space", GOOD_REWARD)
    ctx.refused("run", "my_space.py:no_such_factory", "--out", "R", absent="R")


@case("user", "diverged")
def _user_diverged(ctx: Ctx) -> None:
    space = write_space(ctx, "my_space", GOOD_REWARD)
    _diverge(ctx, "user", [space, "--set", "steps=50", "eval_every=10", "lr=1e300"], True)


# --- driver ---------------------------------------------------------------------------------------------------------------


def run_case(c: Case, root: Path, fixtures: Fixtures, keep: bool, check_fixtures: bool) -> dict:
    folder = root / "cases" / re.sub(r"[^\w.=+-]+", "_", c.id)
    shutil.rmtree(folder, ignore_errors=True)
    t0 = time.perf_counter()
    ctx = Ctx(folder, fixtures)
    ctx.home_before = snapshot(ctx.home)
    fixed = fixtures.snapshot() if check_fixtures else None  # the fixtures built so far
    why, skipped = None, None
    try:
        c.fn(ctx)
    except Broken as e:
        why = str(e)
    except Skipped as e:
        skipped = str(e)
    except Exception as e:  # the probe's own failure: reported, never hidden
        why = f"probe error: {type(e).__name__}: {e}"
    outside = changes(ctx.home_before, snapshot(ctx.home))
    if outside:
        why = (why + "; " if why else "") + f"files outside the run folder changed: {', '.join(outside[:4])}"
    extra = sorted(set(os.listdir(ctx.work)) - ctx.allowed)
    if extra:
        why = (why + "; " if why else "") + f"written outside the run folder, in the working folder: {', '.join(extra[:4])}"
    if fixed is not None:
        built = {rel.split(os.sep)[0] for rel in fixed}
        after = {rel: v for rel, v in fixtures.snapshot().items() if rel.split(os.sep)[0] in built}
        touched = changes(fixed, after)
        if touched:
            why = (why + "; " if why else "") + f"a fixture changed: {', '.join(touched[:3])}"
    seconds = time.perf_counter() - t0
    results: list[tuple[str, str | None, str | None]] = []
    if c.subcases:
        for sub in c.subcases:
            if sub in ctx.skipped:
                results.append((f"{c.id}/{sub}", None, ctx.skipped[sub]))
            elif sub in ctx.results:
                r = ctx.results[sub]
                results.append((f"{c.id}/{sub}", r if r else why, None))
            else:
                results.append((f"{c.id}/{sub}", why or skipped or "not run", None))
    else:
        results.append((c.id, why, skipped))
    if not keep and all(w is None for _, w, _ in results):
        shutil.rmtree(folder, ignore_errors=True)
    return {"case": c.id, "seconds": round(seconds, 1), "results": results, "commands": ctx.log}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", default="", help="comma-separated groups or case-name prefixes (e.g. symlink,kill or checksum/finished)")
    p.add_argument("--out", default=None, help="folder for the fixtures, the case folders and report.json (default: a new temporary folder)")
    p.add_argument("--jobs", type=int, default=1, help="cases at once (default 1)")
    p.add_argument("--keep", action="store_true", help="keep every case folder (default: only the broken ones)")
    p.add_argument("--list", action="store_true", help="print the cases and their count per group, run nothing")
    args = p.parse_args(argv)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # started in the background by a shell (`cmd &`, nohup): SIGINT is ignored, and so in every command started
        # from here, which would then never see a Ctrl-C; a terminal's user has it at its default
        signal.signal(signal.SIGINT, signal.default_int_handler)
    wanted = [w for w in args.only.split(",") if w]
    cases = [c for c in CASES if not wanted or any(c.group == w or c.id.startswith(w) for w in wanted)]
    if not cases:
        p.error(f"--only {args.only}: no such group; groups: {', '.join(dict.fromkeys(c.group for c in CASES))}")
    groups: dict[str, int] = {}
    for c in cases:
        groups[c.group] = groups.get(c.group, 0) + c.count()
    if args.list:
        for c in cases:
            print(c.id + (f" ({len(c.subcases)}: {', '.join(c.subcases)})" if c.subcases else ""))
        print(f"{sum(groups.values())} cases: " + ", ".join(f"{g} {n}" for g, n in groups.items()))
        return 0
    root = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="reliability_probe-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"{sum(groups.values())} cases ({', '.join(f'{g} {n}' for g, n in groups.items())}); command: {' '.join(GM)}; folder: {root}", flush=True)
    load0 = os.getloadavg()
    fixtures = Fixtures(root / "fixtures")
    t0 = time.perf_counter()
    reports, counts = [], {"held": 0, "broken": 0, "skipped": 0}
    broken_lines = []

    def report(rep: dict) -> None:
        for name, why, skipped in rep["results"]:
            if skipped:
                counts["skipped"] += 1
                print(f"skipped  {name}: {skipped}", flush=True)
            elif why:
                counts["broken"] += 1
                broken_lines.append(f"{name}: {why}")
                print(f"BROKEN   {name}: {why}", flush=True)
            else:
                counts["held"] += 1
                print(f"held     {name}  ({rep['seconds']:.0f} s)" if len(rep["results"]) == 1 else f"held     {name}", flush=True)
        reports.append(rep)

    if args.jobs <= 1:
        for c in cases:
            report(run_case(c, root, fixtures, args.keep, check_fixtures=True))
    else:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for fut in concurrent.futures.as_completed([pool.submit(run_case, c, root, fixtures, args.keep, False) for c in cases]):
                report(fut.result())
    minutes = (time.perf_counter() - t0) / 60
    load1 = os.getloadavg()
    total = sum(counts.values())
    summary = f"{total} cases, {counts['held']} held, {counts['broken']} broken" + (f", {counts['skipped']} skipped" if counts["skipped"] else "")
    print(f"\n{summary}; {minutes:.1f} min, --jobs {args.jobs}, {os.cpu_count()} cores, load average {load0[0]:.1f} at the start, {load1[0]:.1f} at the end")
    if broken_lines:
        print("broken:\n  " + "\n  ".join(broken_lines))
    (root / "report.json").write_text(
        json.dumps(
            {
                "summary": summary,
                "minutes": round(minutes, 2),
                "load": [load0, load1],
                "fixtures_seconds": {k: round(v, 1) for k, v in fixtures.seconds.items()},
                "fixture_commands": fixtures.log,
                "cases": reports,
            },
            indent=1,
        )
    )
    print(f"report: {root / 'report.json'}")
    return 1 if counts["broken"] else 0


if __name__ == "__main__":
    sys.exit(main())
