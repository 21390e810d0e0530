"""The coordinate families of gflownet_measure.heads: edge-clamped products and mixtures of Betas on [0, 1]^k."""
import pytest
import torch
from torch.distributions import Beta, Categorical, Independent, MixtureSameFamily

from gflownet_measure.heads import BetaHead, BetaMixture, BetaMixtureHead, ClampedBetaProduct


def test_beta_product_reparametrises_and_stays_off_the_edges():
    torch.manual_seed(0)
    raw = torch.randn(64, 6, requires_grad=True)
    q = BetaHead(3, c_min=0.05, c_span=0.1)(raw)  # concentrations below 1: mass piles up at 0 and 1
    assert isinstance(q, ClampedBetaProduct) and q.has_rsample
    assert q.batch_shape == (64,) and q.event_shape == (3,)
    u = q.rsample()
    assert q.support.check(u).all() and bool(((u >= q.edge) & (u <= 1 - q.edge)).all())
    q.log_prob(u).sum().backward()
    assert raw.grad is not None and torch.isfinite(raw.grad).all()
    assert torch.isfinite(q.log_prob(torch.zeros(1, 3))).all()  # an edge is evaluated at the clamped point
    assert torch.equal(q.log_prob(torch.zeros(64, 3)), q.log_prob(torch.full((64, 3), q.edge)))


def test_beta_mixture_is_the_mixture_of_products_and_does_not_reparametrise():
    torch.manual_seed(0)
    C, k = 3, 2
    head = BetaMixtureHead(k, C)
    raw = torch.randn(16, head.n_params, dtype=torch.float64)
    q = head(raw)
    assert isinstance(q, BetaMixture) and not q.has_rsample
    assert q.batch_shape == (16,) and q.event_shape == (k,)
    with pytest.raises(NotImplementedError):
        q.rsample()
    u = q.sample((5,))
    assert u.shape == (5, 16, k) and q.support.check(u).all()
    alpha, beta = q.conc.unbind(-1)  # [16, C, k] each
    reference = MixtureSameFamily(Categorical(logits=q.logits), Independent(Beta(alpha, beta), 1))
    assert torch.allclose(q.log_prob(u), reference.log_prob(u), atol=1e-10)
