"""The side-by-side harness of the ``*_vs_torchgfn.py`` benchmarks: each side trains in its own child interpreter
with one torch thread, the two taking turns, and is timed per whole training iteration.

A benchmark script imports this module (``benchmarks/`` is on ``sys.path`` when the script runs), parses with
:func:`parser`, and either runs one side (``--side``, in the child: :func:`one_thread`, :class:`Turns`, :func:`timed`)
or both (:func:`run_sides`, in the parent).

Turns: the two children live side by side but never compute at the same time. The parent hands the turn to one,
which trains ``--chunk`` iterations (with ``--seconds``, equal wall clock: until its timed iterations reach its share
of the seconds) and hands it back; the order alternates ABBA (torchgfn, ours, ours, torchgfn, ...)
so that a slow drift in the machine's load falls on both sides alike. One side after the other instead (the
harness's first design) let the background change between the two halves of a run: on 2 shared cores the ratio of
one unchanged code ranged from 0.47 to 0.58 over five seeds run back to back. The last turn of each side also holds its sampling
and the writing of its result file.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

__all__ = ["Turns", "one_thread", "parser", "run_sides", "timed"]

_GO, _DONE = "go", "peer:done"


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive number of iterations, got {value}")
    return value


def parser(doc: str, samples: int, samples_help: str, debug_help: str) -> argparse.ArgumentParser:
    """The benchmarks' shared options; ``--side``/``--out`` (hidden) select the child's side and result file."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--iterations", type=int, default=2000, help="training iterations on each side")
    p.add_argument("--quick", action="store_true", help="200 iterations (overrides --iterations)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--chunk", type=_positive, default=100, help="iterations per turn; the two sides alternate turns, ABBA")
    p.add_argument("--seconds", type=float, default=0.0, help="equal wall clock: each side trains this many seconds (timed iterations), in --turns turns; 0: --iterations each")
    p.add_argument("--turns", type=_positive, default=10, help="with --seconds: turns per side, each up to its share of the seconds")
    p.add_argument("--samples", type=int, default=samples, help=samples_help)
    p.add_argument("--torchgfn-python", default=sys.executable, help="interpreter for the torchgfn side")
    p.add_argument("--ours-python", default=sys.executable, help="interpreter for our side")
    p.add_argument("--torchgfn-debug", action="store_true", help=debug_help)
    p.add_argument("--side", choices=("ours", "torchgfn"), help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    return p


def one_thread() -> None:
    """One intra-op and (where still settable) one inter-op torch thread in this process."""
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


class Turns:
    """The child's end of the turn-taking (module docstring): :meth:`take` waits for the parent's go, :meth:`give` hands the turn back.

    The protocol runs on the child's stdin and on a copy of its stdout; stdout itself is pointed at stderr, so that
    whatever else the side prints cannot be mistaken for the protocol.
    """

    def __init__(self):
        self._reply = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)

    def take(self) -> None:
        line = sys.stdin.readline().strip()
        if line != _GO:
            raise RuntimeError(f"peer: expected {_GO!r} from the parent, got {line!r}")

    def give(self) -> None:
        self._reply.write(_DONE + "\n")
        self._reply.flush()


def timed(step, iterations: int, label: str, turns: Turns, chunk: int, budget: float = 0.0, n_turns: int = 0) -> list[float]:
    """Seconds of each call of ``step(k)`` (one whole training iteration each); progress on stderr.

    ``iterations`` calls, ``chunk`` per turn; or, with a ``budget`` in seconds (equal wall clock), ``n_turns`` turns,
    the ``j``-th running until the timed iterations reach ``budget * j / n_turns`` seconds (at least one iteration a
    turn), so both sides train the same seconds, each overshooting by less than one iteration.
    Tells the parent it is ready first. Returns holding the turn: the side's sampling after training runs in its last
    turn, and the caller gives it back when its result file is written.
    """
    seconds: list[float] = []
    turns.give()  # set up and ready: the parent starts the first turn once both sides are
    quotas = [budget * (j + 1) / n_turns for j in range(n_turns)] if budget > 0 else [None] * -(-iterations // chunk)
    k = 0
    for j, quota in enumerate(quotas):
        turns.take()
        first = k
        while (k < min(iterations, first + chunk)) if quota is None else (k == first or sum(seconds) < quota):
            t0 = time.perf_counter()
            loss = step(k)
            seconds.append(time.perf_counter() - t0)
            k += 1
        print(f"  [{label}] turn {j + 1}/{len(quotas)}: iteration {k}, loss {loss:.4g}, {sum(seconds):.1f} s so far", file=sys.stderr, flush=True)
        if j + 1 < len(quotas):
            turns.give()
    return seconds


def run_sides(script: str, pythons: dict[str, str], a: argparse.Namespace, outs: dict[str, Path], extra: tuple[str, ...] = ()) -> dict[str, float]:
    """Run ``script --side S`` for each side ``S`` of ``pythons`` (its interpreter) with one thread, taking turns, writing ``outs[S]``;
    ``extra``: the script's own options, passed to both children.

    Returns each side's wall seconds over its own turns (training, sampling and writing; not the waits).
    """
    sides = list(pythons)
    env = os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    procs = {}
    for side in sides:
        cmd = [pythons[side], os.path.abspath(script), "--side", side, "--out", str(outs[side]), "--iterations", str(a.iterations), "--seed", str(a.seed), "--samples", str(a.samples), "--chunk", str(a.chunk)]
        cmd += ["--seconds", str(a.seconds), "--turns", str(a.turns)]
        if a.torchgfn_debug:
            cmd.append("--torchgfn-debug")
        cmd += extra
        procs[side] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True)
    wall = dict.fromkeys(sides, 0.0)

    def wait_for(side: str) -> None:
        proc = procs[side]
        if proc.stdout.readline().strip() != _DONE:
            raise subprocess.CalledProcessError(proc.wait(), proc.args)

    try:
        for side in sides:  # both set up (imports, models) before anything is timed
            wait_for(side)
        for turn in range(a.turns if a.seconds > 0 else -(-a.iterations // a.chunk)):
            for side in sides if turn % 2 == 0 else sides[::-1]:
                proc = procs[side]
                t0 = time.perf_counter()
                proc.stdin.write(_GO + "\n")
                proc.stdin.flush()
                wait_for(side)
                wall[side] += time.perf_counter() - t0
        for side in sides:
            if procs[side].wait() != 0:
                raise subprocess.CalledProcessError(procs[side].returncode, procs[side].args)
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
    return wall
