"""``run NAME --world-size N``: the same run as ``torchrun --standalone --nproc-per-node N -m gflownet_measure.experiments.cli run NAME``,
launched from the command line itself with torch's elastic launcher (the engine behind ``torchrun``).

The parent has already checked every setting (bad input stops there, with one line and exit code 2); it names the run
folder for the replicas (``--out``), starts ``N`` processes on this machine with a rendezvous on a free local port, and
returns rank 0's exit code. Each replica runs the command line's entry point (:func:`gflownet_measure.experiments.cli.main`,
which passes itself in) with the same arguments, less ``--world-size``: the command line's ``torchrun`` path
(:mod:`gflownet_measure.distributed`).
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Callable

__all__ = ["launch_replicas", "replica_argv"]


def replica_argv(args: argparse.Namespace, out: Path) -> list[str]:
    """The ``run`` arguments of one replica: those given, with the resolved ``--out`` and without ``--world-size``."""
    argv = ["run", args.name, "--out", str(out), "--threads", str(args.threads)]
    for flag in ("preset", "seed", "device"):
        if getattr(args, flag) is not None:
            argv += [f"--{flag}", str(getattr(args, flag))]
    for group in args.assignments:
        argv += ["--set", *group]
    argv += ["--resume"] * args.resume + ["--overwrite"] * args.overwrite
    return argv


def launch_replicas(args: argparse.Namespace, out: Path, main: Callable[[list[str]], int]) -> int:
    """Run ``args.world_size`` replicas of ``run`` (spawned, one machine) and return rank 0's exit code; each calls
    ``main`` (a module-level function: the spawned process imports it by name) on :func:`replica_argv`."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    config = LaunchConfig(
        min_nodes=1,
        max_nodes=1,
        nproc_per_node=args.world_size,
        run_id=uuid.uuid4().hex,
        rdzv_backend="c10d",
        rdzv_endpoint="localhost:0",  # torchrun --standalone: a store on a free local port
        max_restarts=0,
        start_method="spawn",
        monitor_interval=0.1,
    )
    codes = elastic_launch(config, main)(replica_argv(args, out))
    return codes[0]
