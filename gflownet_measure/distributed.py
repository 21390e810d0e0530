"""Data-parallel training over processes with ``torch.distributed``: one run, ``W`` replicas.

Replica ``r`` of ``W`` (a process, launched by ``torchrun``) holds the same weights, samples its own batch of ``B``
trajectories from its own random stream, and computes its loss ``L_r`` on it. The gradients are averaged,

    g = (1 / W) sum_r grad L_r,

so that, every objective being a mean over its batch, ``g`` is the gradient of the mean loss over the union of the
``W`` batches: each update is one update of batch ``W B``, computed ``W`` times faster where the replicas have their
own cores (DDP, Li et al. 2020, "PyTorch Distributed", section 3, does the same reduction inside ``backward``; here
it is one ``all_reduce`` after it, because a GFlowNet's loss calls several modules, not one ``forward``).

What each replica keeps for itself: its random streams (seeded from the run's seed and its rank, :func:`replica_seed`),
and the modules' buffers (a replay buffer, JSP-GFN's walkers). What is shared: the parameters (broadcast from rank 0
at the start, then kept equal by the averaged gradients and identical optimiser steps), log Z among them. Rank 0 alone
evaluates, writes the history and the checkpoints; the other replicas end with :class:`ReplicaFinished`.
Gloo carries the tensors on CPU, NCCL on CUDA (:func:`init_from_env`).
"""

from __future__ import annotations

import os

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor, nn

__all__ = [
    "ReplicaFinished",
    "world",
    "is_main",
    "init_from_env",
    "replica_seed",
    "broadcast_parameters",
    "average_gradients",
    "gather_objects",
    "broadcast_object",
    "barrier",
]


class ReplicaFinished(Exception):
    """Raised by :meth:`~gflownet_measure.training.Trainer.run` on ranks other than 0 after the last update: evaluating the
    trained sampler and writing the run folder belong to rank 0, which holds the same weights."""


def world() -> tuple[int, int]:
    """``(rank, world_size)`` of this process: ``(0, 1)`` outside a process group."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def is_main() -> bool:
    return world()[0] == 0


def init_from_env(device: str = "cpu") -> tuple[int, int]:
    """Join the process group that ``torchrun`` describes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``):
    gloo on CPU, NCCL on CUDA. Nothing is done for a single process or a group already joined. Returns :func:`world`."""
    size = int(os.environ.get("WORLD_SIZE", "1"))
    if size > 1 and not dist.is_initialized():
        cuda = torch.device(device).type == "cuda"
        if cuda:
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group("nccl" if cuda else "gloo")
    return world()


def replica_seed(seed: int, rank: int, step: int = 0) -> int:
    """The seed of replica ``rank``'s random streams, from the run's ``seed`` (and the update ``step`` it resumes at):
    distinct, reproducible streams through numpy's ``SeedSequence`` (not ``seed + rank``, whose streams overlap between
    runs of neighbouring seeds)."""
    return int(np.random.SeedSequence([seed % 2**63, rank, step]).generate_state(2, np.uint64)[0] % 2**63)


def broadcast_parameters(module: nn.Module) -> None:
    """Every replica takes rank 0's parameters (buffers stay each replica's own)."""
    if world()[1] == 1:
        return
    with torch.no_grad():
        for p in module.parameters():
            dist.broadcast(p.data, src=0)


def average_gradients(params: list[Tensor], loss: Tensor) -> float:
    """Replace each ``p.grad`` by its mean over the replicas, and return the mean loss: ``(1/W) sum_r L_r``.

    One ``all_reduce`` of one flat buffer carries every gradient and the loss (a NaN on any replica reaches all of them,
    so they stop together). A parameter without a gradient on some replica (a module its batch did not use) counts as
    zero there; one without a gradient on every replica keeps ``grad = None``, as in a single process, so Adam skips it.
    """
    size = world()[1]
    if size == 1:
        return float(loss.detach())
    has = torch.tensor([p.grad is not None for p in params], dtype=torch.float32, device=loss.device)
    dist.all_reduce(has, op=dist.ReduceOp.MAX)
    grads: list[Tensor] = []  # the gradients of the parameters used on some replica, zero where this one left them unset
    for p, h in zip(params, has.tolist()):
        if h > 0:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            grads.append(p.grad)
    dtype = grads[0].dtype if grads else loss.dtype
    flat = torch.cat([g.reshape(-1) for g in grads] + [loss.detach().reshape(1).to(dtype)])
    dist.all_reduce(flat)
    flat /= size
    offset = 0
    for g in grads:
        n = g.numel()
        g.copy_(flat[offset : offset + n].view_as(g))
        offset += n
    return float(flat[-1])


def gather_objects(obj) -> list:
    """``obj`` of every replica, in rank order (a single process: ``[obj]``)."""
    size = world()[1]
    if size == 1:
        return [obj]
    out = [None] * size
    dist.all_gather_object(out, obj)
    return out


def broadcast_object(obj):
    """Rank 0's ``obj`` on every replica."""
    if world()[1] == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def barrier() -> None:
    if world()[1] > 1:
        dist.barrier()
