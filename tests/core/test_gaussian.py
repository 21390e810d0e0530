"""StepNormal against torch's Normal: the same draws bit for bit at the same seed, the same log-density, an expand that keeps
the law, and a clear error for arguments of two shapes (it does not broadcast)."""

import pytest
import torch
from torch.distributions import Independent, Normal

from gflownet_measure.gaussian import StepNormal, diagonal_normal


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(), (5,)])
def test_draws_and_densities_equal_torch_normal(dtype, shape):
    g = torch.Generator().manual_seed(0)
    loc = 3 * torch.randn(300, 4, generator=g, dtype=dtype)
    scale = torch.rand(300, 4, generator=g, dtype=dtype) + 0.1
    ours, torchs = diagonal_normal(loc, scale), Independent(Normal(loc, scale), 1)
    torch.manual_seed(7)
    a = ours.sample(shape)
    torch.manual_seed(7)
    b = torchs.sample(shape)
    assert torch.equal(a, b)  # exact: one normal draw per entry, scaled and shifted in the same order
    assert torch.equal(ours.log_prob(a), torchs.log_prob(a))
    assert ours.batch_shape == torchs.batch_shape and ours.event_shape == torchs.event_shape


def test_rsample_is_differentiable_and_sample_is_not():
    loc = torch.zeros(3, 2, requires_grad=True)
    q = diagonal_normal(loc, torch.ones(3, 2))
    assert q.rsample().requires_grad and not q.sample().requires_grad


def test_expand_keeps_the_law():
    q = StepNormal(torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0])).expand((4, 2))
    assert isinstance(q, StepNormal) and q.batch_shape == (4, 2)
    assert torch.equal(q.log_prob(torch.zeros(4, 2)), Normal(torch.tensor([1.0, -2.0]), torch.tensor([0.5, 3.0])).log_prob(torch.zeros(4, 2)).expand(4, 2))


def test_two_shapes_are_refused():
    with pytest.raises(ValueError, match="one shape"):
        StepNormal(torch.zeros(3, 2), torch.ones(2))
