"""The coordinate families of gflownet_measure.heads: edge-clamped products and mixtures of Betas on [0, 1]^k or on any
bounded box, wrapped von Mises laws on a box of one period, and the check that matches a head with its chart."""
import math

import numpy as np
import pytest
import torch
from torch.distributions import Beta, Categorical, Independent, MixtureSameFamily, VonMises

from gflownet_measure.charts import AffineChart, WithoutJacobian
from gflownet_measure.heads import (
    BetaHead,
    BetaMixture,
    BetaMixtureHead,
    ClampedBetaProduct,
    Rescaled,
    VonMisesHead,
    VonMisesMixture,
    VonMisesMixtureHead,
    WrappedVonMises,
    box_text,
    check_head,
)
from gflownet_measure.measures import Box


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


def _gauss_legendre(n: int, lo: float, hi: float):
    """Nodes and weights ``[n]`` of the n-point Gauss-Legendre rule on ``[lo, hi]`` (float64)."""
    x, w = np.polynomial.legendre.leggauss(n)
    return torch.tensor(lo + (hi - lo) * (x + 1) / 2), torch.tensor(w * (hi - lo) / 2)


BACKWARD = Box((-1.0,), (0.0,))  # the coordinates of a backward move, u in [-1, 0]


def test_unit_box_heads_return_the_unit_laws_themselves():
    """On [0, 1]^k (the default) a head's law is the one it always was, not a rescaled copy: no extra arithmetic."""
    raw = torch.randn(4, BetaMixtureHead(2, 3).n_params)
    assert type(BetaHead(2)(raw[:, :4])) is ClampedBetaProduct
    assert type(BetaMixtureHead(2, 3)(raw)) is BetaMixture
    assert type(BetaHead(2, domain=Box((0.0, 0.0), (1.0, 1.0)))(raw[:, :4])) is ClampedBetaProduct
    assert BetaHead(2).domain == Box((0.0, 0.0), (1.0, 1.0))


def test_beta_head_on_a_box_is_the_unit_law_moved_there():
    """q(u) = q_0((u - l)/(h - l)) / prod(h - l) (float64, exact up to round-off: 1e-12), samples in the box, rsample differentiable."""
    torch.manual_seed(0)
    box = Box((-1.0, 2.0), (0.0, 5.0))
    head = BetaHead(2, domain=box)
    raw = torch.randn(32, head.n_params, dtype=torch.float64, requires_grad=True)
    q = head(raw)
    assert isinstance(q, Rescaled) and q.has_rsample and q.batch_shape == (32,) and q.event_shape == (2,)
    u = q.rsample()
    low, high = torch.tensor(box.low, dtype=torch.float64), torch.tensor(box.high, dtype=torch.float64)
    assert q.support.check(u).all() and bool(((u >= low) & (u <= high)).all())
    unit = BetaHead(2)(raw)
    assert torch.allclose(q.log_prob(u), unit.log_prob((u - low) / (high - low)) - math.log(3.0), atol=1e-12, rtol=0)
    q.log_prob(u).sum().backward()
    assert torch.isfinite(raw.grad).all()


def test_beta_mixture_head_on_a_backward_box_integrates_to_one_and_does_not_reparametrise():
    """96-node Gauss-Legendre on [-1, 0] of a 3-component mixture with concentrations >= 1.1 (smooth): |integral - 1| < 1e-6."""
    head = BetaMixtureHead(1, 3, c_min=1.1, c_span=4.0, domain=BACKWARD)
    q = head(torch.randn(1, head.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    assert not q.has_rsample
    with pytest.raises(NotImplementedError):
        q.rsample()
    t, w = _gauss_legendre(96, -1.0, 0.0)
    assert float((q.log_prob(t[:, None]).exp() * w).sum()) == pytest.approx(1.0, abs=1e-6)
    torch.manual_seed(0)
    u = q.sample((1000,))
    assert u.shape == (1000, 1, 1) and bool(((u >= -1.0) & (u <= 0.0)).all())


def test_wrapped_von_mises_is_a_periodic_density_on_its_box():
    """On [l, l + T]^2 (T = 2 pi and 0.5): the density integrates to one, takes the same value at the box's two ends,
    and is the von Mises of the angle 2 pi (u - l)/T times 2 pi / T per coordinate. The 64^2-node Gauss-Legendre rule is
    exact to round-off on this smooth integrand; the tolerance 1e-7 is that of torch's log I_0 (a polynomial
    approximation, off by up to 3.3e-8 for kappa in [0.01, 10.1], once per coordinate)."""
    box = Box((0.0, -0.25), (2 * math.pi, 0.25))
    head = VonMisesHead(box)
    raw = torch.randn(1, head.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    q = head(raw)
    assert isinstance(q, WrappedVonMises) and not q.has_rsample and q.event_shape == (2,)
    t0, w0 = _gauss_legendre(64, 0.0, 2 * math.pi)
    t1, w1 = _gauss_legendre(64, -0.25, 0.25)
    u = torch.cartesian_prod(t0, t1)
    assert float((q.log_prob(u).exp() * (w0[:, None] * w1[None, :]).reshape(-1)).sum()) == pytest.approx(1.0, abs=1e-7)
    ends = torch.tensor([[0.0, -0.25], [2 * math.pi, 0.25]], dtype=torch.float64)
    assert torch.allclose(q.log_prob(ends[:1]), q.log_prob(ends[1:]), atol=1e-12, rtol=0)
    loc, kappa = raw[0, :2], 0.1 + 10.0 * torch.sigmoid(raw[0, 2:])
    angle = torch.stack([u[:, 0], (u[:, 1] + 0.25) * (2 * math.pi / 0.5)], -1)
    expected = VonMises(loc, kappa).log_prob(angle).sum(-1) + math.log(2 * math.pi / 0.5)
    assert torch.allclose(q.log_prob(u), expected, atol=1e-12, rtol=0)


def test_wrapped_von_mises_samples_follow_the_law():
    """20,000 draws on [-1, 0] (T = 1): all in the box, and the circular moment E[cos(theta - mu)] = I_1(kappa) / I_0(kappa)
    (theta = 2 pi (u + 1)) within 5 standard errors (a correct sampler fails about one seed in 1.7 million)."""
    torch.manual_seed(0)
    head = VonMisesHead(BACKWARD)
    raw = torch.tensor([[2.5, 0.3]], dtype=torch.float64)  # mu = 2.5 rad, kappa = 0.1 + 10 sigmoid(0.3)
    u = head(raw.expand(20000, -1)).sample()[:, 0]
    assert bool(((u >= -1.0) & (u <= 0.0)).all())
    kappa = 0.1 + 10.0 * torch.sigmoid(torch.tensor(0.3, dtype=torch.float64))
    c = torch.cos(2 * math.pi * (u + 1.0) - 2.5)
    exact = float(torch.special.i1e(kappa) / torch.special.i0e(kappa))
    assert abs(float(c.mean()) - exact) < 5 * float(c.std()) / math.sqrt(len(c))


def test_heads_refuse_domains_they_cannot_live_on():
    with pytest.raises(ValueError, match=r"BetaHead\(k=2\) needs a bounded domain box of dimension 2, got \[0, 1\]\^1"):
        BetaHead(2, domain=Box((0.0,), (1.0,)))
    with pytest.raises(ValueError, match="bounded"):
        BetaMixtureHead(1, 2, domain=Box((-math.inf,), (math.inf,)))
    with pytest.raises(ValueError, match="bounded"):
        VonMisesHead(Box((-math.inf,), (math.inf,)))
    with pytest.raises(ValueError, match="c_min > 0"):
        VonMisesHead(BACKWARD, c_min=0.0)


def test_box_text():
    assert box_text(Box((0.0, 0.0), (1.0, 1.0))) == "[0, 1]^2"
    assert box_text(BACKWARD) == "[-1, 0]^1"
    assert box_text(Box((0.0, -1.0), (2 * math.pi, math.inf))) == "[0, 6.28319] x [-1, inf]"


def test_check_head_names_the_head_the_chart_and_their_boxes():
    chart = AffineChart(Box((0.0,), (1.0,)), slots=(0,))
    check_head(0, BetaHead(1), chart)  # a match: nothing happens
    message = "head 1 (BetaHead(k=2), on [0, 1]^2) does not match piece 1's chart AffineChart with domain [0, 1]^1: a head's dimension and box must be its chart's"
    with pytest.raises(ValueError) as info:
        check_head(1, BetaHead(2), chart)
    assert str(info.value) == message
    with pytest.raises(ValueError, match=r"head 0 \(VonMisesHead\(k=1\), on \[-1, 0\]\^1\) does not match piece 0's chart WithoutJacobian with domain \[0, 1\]\^1"):
        check_head(0, VonMisesHead(BACKWARD), WithoutJacobian(chart))
    with pytest.raises(ValueError, match=r"head 0 \(Linear\) declares no domain box"):
        check_head(0, torch.nn.Linear(1, 1), chart)


def test_von_mises_mixture_integrates_to_one_and_is_the_mixture_per_angle():
    """On [-pi, pi]^2 (the torus increments): the density integrates to one by the 64^2-node periodic trapezoidal rule
    (exact to ~I_64(kappa)/I_0(kappa), nothing at kappa <= 30; the tolerance 1e-7 is torch's log I_0 approximation, as
    above), is periodic, and equals the product over angles of torch's MixtureSameFamily of von Mises laws."""
    box = Box((-math.pi,) * 2, (math.pi,) * 2, periodic=True)
    head = VonMisesMixtureHead(box, n_components=5, c_min=4.0)
    raw = torch.randn(3, head.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    q = head(raw)
    assert isinstance(q, VonMisesMixture) and q.batch_shape == (3,) and q.event_shape == (2,) and not q.has_rsample
    u, log_w = box.weighted_points(64**2, "quadrature")
    total = (q.log_prob(u[:, None, :]) + log_w[:, None]).logsumexp(0).exp()
    assert torch.allclose(total, torch.ones(3, dtype=torch.float64), atol=1e-7, rtol=0)
    ends = torch.tensor([[-math.pi, -math.pi], [math.pi, math.pi]], dtype=torch.float64)
    assert torch.allclose(q.log_prob(ends[:1]), q.log_prob(ends[1:]), atol=1e-12, rtol=0)
    mix = MixtureSameFamily(Categorical(logits=q.logits), VonMises(q.loc, q.concentration))
    x = torch.rand(7, 3, 2, dtype=torch.float64) * 2 * math.pi - math.pi
    assert torch.allclose(q.log_prob(x), mix.log_prob(x + math.pi).sum(-1), atol=1e-10, rtol=0)  # angles measured from the box's low end
    assert bool((q.concentration >= 4.0).all())


def test_von_mises_mixture_samples_follow_the_law():
    """20,000 draws of a two-component mixture on one angle: in the box, and the first circular moment E[e^{i theta}] =
    sum_j w_j e^{i mu_j} I_1(kappa_j)/I_0(kappa_j) within 5 standard errors per part (seeded; a correct sampler fails ~1e-6)."""
    torch.manual_seed(0)
    head = VonMisesMixtureHead(Box((-math.pi,), (math.pi,), periodic=True), n_components=2, c_min=1.0)
    raw = torch.tensor([[0.0, 1.0, -2.0, 1.5, 0.5, -1.0]], dtype=torch.float64)  # logits, locations, concentration pre-activations
    q = head(raw.expand(20000, -1))
    u = q.sample()[:, 0]
    assert bool(((u >= -math.pi) & (u <= math.pi)).all())
    w = torch.softmax(raw[0, :2], 0)
    kappa = 1.0 + torch.nn.functional.softplus(raw[0, 4:])
    r = torch.special.i1e(kappa) / torch.special.i0e(kappa)
    for f in (torch.cos, torch.sin):
        exact = float((w * r * f(raw[0, 2:4])).sum())
        v = f(u + math.pi)  # the angle measured from the box's low end
        assert abs(float(v.mean()) - exact) < 5 * float(v.std()) / math.sqrt(len(v))


def test_periodic_box_quadrature_is_the_trapezoidal_rule():
    """A periodic box's quadrature integrates cos(k u) exactly for k below the node count (Gauss-Legendre does not)."""
    box = Box((0.0,), (2 * math.pi,), periodic=True)
    u, log_w = box.weighted_points(12, "quadrature")
    assert float(log_w.exp().sum()) == pytest.approx(2 * math.pi, abs=1e-12)
    for k in range(1, 12):
        assert abs(float((torch.cos(k * u[:, 0]) * log_w.exp()).sum())) < 1e-12
    with pytest.raises(ValueError, match="periodic"):
        Box((0.0,), (math.inf,), periodic=True)
