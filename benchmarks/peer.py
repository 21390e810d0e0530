"""The side-by-side harness of the ``*_vs_torchgfn.py`` benchmarks: each side trains in its own child interpreter,
one after the other, with one torch thread, and is timed per whole training iteration.

A benchmark script imports this module (``benchmarks/`` is on ``sys.path`` when the script runs), parses with
:func:`parser`, and either runs one side (``--side``, in the child: :func:`one_thread`, :func:`timed`) or both
(:func:`run_side` twice, in the parent).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

__all__ = ["one_thread", "parser", "run_side", "timed"]


def parser(doc: str, samples: int, samples_help: str, debug_help: str) -> argparse.ArgumentParser:
    """The benchmarks' shared options; ``--side``/``--out`` (hidden) select the child's side and result file."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--iterations", type=int, default=2000, help="training iterations on each side")
    p.add_argument("--quick", action="store_true", help="200 iterations (overrides --iterations)")
    p.add_argument("--seed", type=int, default=0)
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


def timed(step, iterations: int, label: str) -> list[float]:
    """Seconds of each of ``iterations`` calls of ``step(k)`` (one whole training iteration each), progress on stderr."""
    seconds = []
    for k in range(iterations):
        t0 = time.perf_counter()
        loss = step(k)
        seconds.append(time.perf_counter() - t0)
        if (k + 1) % max(1, iterations // 4) == 0:
            print(f"  [{label}] iteration {k + 1}/{iterations}, loss {loss:.4g}, {sum(seconds):.1f} s so far", file=sys.stderr, flush=True)
    return seconds


def run_side(script: str, python: str, side: str, a: argparse.Namespace, out: Path) -> float:
    """Run ``script --side side`` in the interpreter ``python`` with one thread, writing ``out``; returns its wall seconds."""
    cmd = [python, os.path.abspath(script), "--side", side, "--out", str(out), "--iterations", str(a.iterations), "--seed", str(a.seed), "--samples", str(a.samples)]
    if a.torchgfn_debug:
        cmd.append("--torchgfn-debug")
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=os.environ | {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
    return time.perf_counter() - t0
