"""Replay of transitions: FIFO ring, uniform sampling without replacement, and a checkpoint that restores it."""
from __future__ import annotations

import pytest
import torch

from gflownet_measure.buffers import TransitionBuffer


def test_transition_buffer_is_a_fifo_ring():
    buf = TransitionBuffer(5, 2, dtype=torch.float32)
    with pytest.raises(ValueError, match="empty"):
        buf.sample(1)
    s = torch.arange(7, dtype=torch.float32)[:, None].expand(7, 2)
    buf.add(s[:4], s[:4] + 100)
    buf.add(s[4:], s[4:] + 100)
    assert len(buf) == 5
    a, b = buf.sample(10)
    assert sorted(a[:, 0].tolist()) == [2.0, 3.0, 4.0, 5.0, 6.0]  # the two oldest were overwritten, no repeats
    torch.testing.assert_close(b, a + 100)


def test_transition_buffer_state_round_trips_through_a_state_dict():
    buf = TransitionBuffer(8, 3)
    buf.add(torch.ones(3, 3), torch.zeros(3, 3))
    other = TransitionBuffer(8, 3)
    other.load_state_dict(buf.state_dict())
    assert len(other) == 3
    torch.testing.assert_close(other.sample(8)[0], torch.ones(3, 3))
