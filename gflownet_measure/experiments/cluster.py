"""The runs of a multi-run experiment as tasks on a Ray cluster (``--set executor=ray address=...``).

Each run is one Ray task executing the same function as the local process pool (``gflownet_measure.experiments.common._one``): the same
folder, seed, settings, resume rule and metrics, so a table is the same whichever executor trained it (a table's
``--resume`` keeps the executor it was started with: the executor is one of its saved settings). A task asks Ray for ``--threads`` CPUs (and one GPU with ``--device cuda``);
at most ``jobs`` runs are in flight. The run folders are written by the tasks: on a cluster of several machines they
must lie on a file system every node sees, and the project must be installed on every node (Ray ships no code here).
Ray is an optional extra (``pip install -e '.[cluster]'``).
"""

from __future__ import annotations

from typing import Callable

import torch

from .settings import ConfigError

__all__ = ["require_ray", "run_on_ray"]


def require_ray():
    """The ``ray`` module, or a one-line :class:`ConfigError` naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError("executor=ray needs Ray, which is not installed; install the extra: pip install -e '.[cluster]'") from None
    return ray


def run_on_ray(one: Callable, run_fn: Callable, jobs: list, resume: bool, diverged_ok: bool, in_flight: int, address: str) -> list[dict]:
    """The metrics of every job, in order, each computed by ``one(run_fn, job, resume, diverged_ok, worker)`` in a Ray task.

    ``address``: the cluster to join (``auto``, ``ray://HOST:10001``); empty starts a Ray instance on this machine,
    shut down afterwards. An error in a run is raised here (the cause, not Ray's wrapper) once the runs in flight end.
    """
    ray = require_ray()
    started = not ray.is_initialized()
    if started:
        try:
            ray.init(address=address or None, include_dashboard=False, logging_level="ERROR", log_to_driver=True)
        except ConnectionError as e:
            raise ConfigError(
                f"address={address!r}: no Ray cluster answers there ({str(e).splitlines()[0][:100]}); valid: auto, ray://HOST:PORT, or empty for a local instance"
            ) from None
    threads, device = torch.get_num_threads(), torch.get_default_device()
    task = ray.remote(one).options(num_cpus=threads, num_gpus=1 if device.type == "cuda" else 0, max_retries=0)
    pending = [job._replace(out=job.out.resolve()) for job in jobs]  # a task's working folder is not the driver's
    queue = list(enumerate(pending))
    running: dict = {}
    results: list = [None] * len(jobs)
    try:
        while queue or running:
            while queue and len(running) < max(1, in_flight):
                k, job = queue.pop(0)
                running[task.remote(run_fn, job, resume, diverged_ok, (threads, device))] = k
            done, _ = ray.wait(list(running), num_returns=1)
            ref = done[0]
            k = running.pop(ref)
            try:
                results[k] = ray.get(ref)
            except ray.exceptions.RayTaskError as e:
                queue.clear()  # as the local pool: the runs in flight finish, the rest never start
                for other in list(running):
                    ray.wait([other])
                raise (e.cause if isinstance(e.cause, BaseException) else RuntimeError(str(e))) from None
    except KeyboardInterrupt:
        for ref in running:
            ray.cancel(ref, force=True)
        raise
    finally:
        if started:
            ray.shutdown()
    return results
