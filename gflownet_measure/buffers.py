"""Replay buffers with uniform sampling."""

from __future__ import annotations

import torch

from .trajectories import Trajectories

__all__ = ["ReplayBuffer", "TransitionBuffer"]


class ReplayBuffer:
    """A FIFO ring of at most ``capacity`` trajectories, sampled uniformly without replacement.

    Trajectories are stored batch-major and padded to ``max_length + 1`` positions (padding is
    flagged as sink, as in :class:`Trajectories`), their states as ``dtype`` (float64 for the continuous
    spaces, whose states are float64; float32 halves the memory where states are small integers).
    """

    def __init__(self, capacity: int, max_length: int, state_dim: int, dtype: torch.dtype = torch.float64):
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.states = torch.zeros(capacity, max_length + 1, state_dim, dtype=dtype)
        self.sink = torch.ones(capacity, max_length + 1, dtype=torch.bool)
        self.log_R = torch.zeros(capacity, dtype=torch.float64)
        self.size, self.head = 0, 0

    def __len__(self) -> int:
        return self.size

    def add(self, traj: Trajectories) -> None:
        """Append the ``B`` trajectories of ``traj`` (the oldest are overwritten when full; of a batch larger than
        the capacity only the last ``capacity`` are kept)."""
        T1, B = traj.sink.shape
        pad = self.states.shape[1] - T1
        if pad < 0:
            raise ValueError(f"trajectories of {T1} positions do not fit a replay buffer of max_length {self.states.shape[1] - 1} (+1 positions)")
        states, sink, log_R = traj.states.transpose(0, 1), traj.sink.transpose(0, 1), traj.log_R
        if B > self.capacity:
            states, sink, log_R, B = states[-self.capacity :], sink[-self.capacity :], log_R[-self.capacity :], self.capacity
        idx = (self.head + torch.arange(B)) % self.capacity
        self.states[idx] = torch.cat([states, states[:, -1:].expand(-1, pad, -1)], 1).to(self.states.dtype)
        self.sink[idx] = torch.cat([sink, torch.ones(B, pad, dtype=torch.bool)], 1)
        self.log_R[idx] = log_R.to(self.log_R.dtype)
        self.head = int((self.head + B) % self.capacity)
        self.size = min(self.capacity, self.size + B)

    def sample(self, n: int) -> Trajectories:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = torch.randperm(self.size)[: min(n, self.size)]
        return Trajectories(self.states[idx].transpose(0, 1), self.sink[idx].transpose(0, 1), self.log_R[idx]).trimmed()


class TransitionBuffer(torch.nn.Module):
    """A FIFO ring of at most ``capacity`` transitions ``(s, s')`` of state vectors, sampled uniformly without replacement.

    ``dtype`` is the storage type (e.g. ``torch.uint8`` for 0/1 states: a hundredfold saving for the
    DAG space); :meth:`sample` returns float32 states. A module whose contents are registered
    buffers, so that a checkpoint of a model holding it restores the replay too.
    """

    states: torch.Tensor  # registered buffers (nn.Module's __getattr__ would type them Tensor | Module)
    cursor: torch.Tensor

    def __init__(self, capacity: int, state_dim: int, dtype=torch.uint8):
        super().__init__()
        if capacity < 1:
            raise ValueError(f"replay capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.register_buffer("states", torch.zeros(capacity, 2, state_dim, dtype=dtype))
        self.register_buffer("cursor", torch.zeros(2, dtype=torch.long))  # (size, head)

    def __len__(self) -> int:
        return int(self.cursor[0])

    def add(self, s: torch.Tensor, s_next: torch.Tensor) -> None:
        """Append ``B`` transitions ``s [B, D] -> s_next [B, D]`` (the oldest are overwritten when full)."""
        B = s.shape[0]
        if B > self.capacity:
            s, s_next, B = s[-self.capacity :], s_next[-self.capacity :], self.capacity
        size, head = self.cursor.tolist()
        idx = (head + torch.arange(B)) % self.capacity
        self.states[idx] = torch.stack([s, s_next], 1).to(self.states.dtype)
        self.cursor[0], self.cursor[1] = min(self.capacity, size + B), (head + B) % self.capacity

    def sample(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``min(n, len)`` transitions ``(s [n, D], s_next [n, D])``."""
        if len(self) == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        pair = self.states[torch.randperm(len(self))[: min(n, len(self))]].float()
        return pair[:, 0], pair[:, 1]
