"""The SDE targets (gflownet_measure/environments/sde_targets.py): each log-density integrates to its stated normaliser (quadrature in
low dimension, factor by factor above), and each exact sampler matches the density's moments."""
import math

import pytest
import torch

from gflownet_measure.environments.sde_targets import TARGETS, Funnel, ManyWell
from gflownet_measure.metrics import ks_distance

N = 200000


def _trapezoid_weights(g: torch.Tensor) -> torch.Tensor:
    w = torch.full_like(g, float(g[1] - g[0]))
    w[0] = w[-1] = w[0] / 2
    return w


@pytest.mark.parametrize("name", ["gmm9", "gmm25"])
def test_grid_mixtures_integrate_to_one(name):
    """log Z = 0: a trapezoid sum on a grid of step 0.05 (1/11 of a component's standard deviation; the trapezoid rule on
    a Gaussian is then exact to far below 1e-9) over the means' range widened by 4 (mass outside < 1e-12)."""
    t = TARGETS[name]
    g = torch.arange(t.limits[0] - 1, t.limits[1] + 1 + 1e-9, 0.05, dtype=torch.float64)
    w = _trapezoid_weights(g)
    p = t.log_prob(torch.cartesian_prod(g, g)).exp().reshape(len(g), len(g))
    assert float(w @ p @ w) == pytest.approx(math.exp(t.log_Z), abs=1e-9)


@pytest.mark.parametrize("sigma0", [1.0, 3.0])
def test_funnel_integrates_to_one_coordinate_by_coordinate(sigma0):
    """The 2-D funnel integrates to 1, x_1 on the grid z e^{x_0 / 2} (Jacobian e^{x_0 / 2}) so that the neck and the mouth
    are resolved alike; and the d-dimensional density integrated over its last coordinate is the (d-1)-dimensional one,
    at random points, for d = 10 down to 3: by induction every funnel integrates to 1. Trapezoid sums of Gaussians on
    grids of 1/20 to 1/50 of their standard deviation over +-10 of them: exact to 1e-9."""
    x0 = torch.linspace(-10 * sigma0, 10 * sigma0, 2001, dtype=torch.float64)
    z = torch.linspace(-10, 10, 1001, dtype=torch.float64)
    x1 = z[None, :] * torch.exp(x0[:, None] / 2)
    f2 = Funnel(sigma0=sigma0, dim=2)
    p = f2.log_prob(torch.stack([x0[:, None].expand_as(x1), x1], -1).reshape(-1, 2)).exp().reshape(x1.shape)
    inner = (p * torch.exp(x0[:, None] / 2)) @ _trapezoid_weights(z)
    assert float(inner @ _trapezoid_weights(x0)) == pytest.approx(1.0, abs=1e-9)
    gen = torch.Generator().manual_seed(0)
    for d in range(10, 2, -1):
        pts = Funnel(sigma0=sigma0, dim=d - 1).sample(5, gen).double()
        xs = torch.cat([pts.repeat_interleave(len(z), 0), (z.repeat(5) * torch.exp(pts[:, :1].repeat_interleave(len(z), 0)[:, 0] / 2))[:, None]], 1)
        integral = (Funnel(sigma0=sigma0, dim=d).log_prob(xs).exp().reshape(5, len(z)) @ _trapezoid_weights(z)) * torch.exp(pts[:, 0] / 2)
        assert torch.allclose(integral, Funnel(sigma0=sigma0, dim=d - 1).log_prob(pts).exp(), rtol=1e-9)
    assert TARGETS["funnel"].sigma0 == 1.0 and TARGETS["hard_funnel"].sigma0 == 3.0 and TARGETS["hard_funnel"].dim == 10


def _well_quadrature():
    """Independent of the class's own quadrature: Simpson's rule on [-6, 6] with 120,000 intervals."""
    g = torch.linspace(-6, 6, 120001, dtype=torch.float64)
    w = torch.ones_like(g)
    w[1:-1:2], w[2:-1:2] = 4.0, 2.0
    w *= float(g[1] - g[0]) / 3
    return g, w, torch.exp(ManyWell.well(g))


def test_many_well_normaliser_by_quadrature_of_its_factors():
    """One pair integrates to Z_1 sqrt(2 pi) (a 2-D trapezoid sum), Z_1 = 11784.50927 as gfn-diffusion and torchgfn
    state it, and the 32-D log-density is the sum of 16 pairs' with log Z = 16 log(Z_1 sqrt(2 pi)) = 164.6957."""
    g, w, f = _well_quadrature()
    Z1 = float(f @ w)
    assert Z1 == pytest.approx(11784.50927, rel=1e-9)
    pair = ManyWell(dim=2)
    a = torch.linspace(-5, 5, 801, dtype=torch.float64)
    b = torch.linspace(-10, 10, 801, dtype=torch.float64)
    p = pair.log_prob(torch.cartesian_prod(a, b)).exp().reshape(len(a), len(b))
    assert math.log(float(_trapezoid_weights(a) @ p @ _trapezoid_weights(b))) == pytest.approx(pair.log_Z, abs=1e-6)
    mw = TARGETS["many_well"]
    assert mw.dim == 32 and mw.log_Z == pytest.approx(16 * (math.log(Z1) + 0.5 * math.log(2 * math.pi)), abs=1e-8)
    assert mw.log_Z == pytest.approx(164.6957, abs=1e-4)
    x = torch.randn(7, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.allclose(mw.log_prob(x), sum(pair.log_prob(x[:, 2 * i : 2 * i + 2]) for i in range(16)))


def test_exact_samplers_match_the_moments():
    """Sample moments of 200,000 exact samples against moments computed from the densities, within 5 standard errors."""
    gen = torch.Generator().manual_seed(3)

    def close(v: torch.Tensor, exact: float):
        assert abs(float(v.mean()) - exact) < 5 * float(v.std()) / math.sqrt(len(v)), (float(v.mean()), exact)

    x = TARGETS["gmm25"].sample(N, gen).double()  # mean 0, variance 0.3 + mean of {-10..10}^2 = 50.3 per coordinate
    for i in range(2):
        close(x[:, i], 0.0)
        close(x[:, i].square(), 50.3)
    counts = TARGETS["gmm25"].mode_counts(x)  # within 3 standard deviations: probability 1 - e^{-9/2} per sample
    p = (1 - math.exp(-4.5)) / 25
    assert len(counts) == 25 and (counts - N * p).abs().max() < 5 * math.sqrt(N * p * (1 - p))
    for name in ("funnel", "hard_funnel"):  # x0 ~ N(0, s0^2); x_i^2 e^{-x0} ~ chi^2_1: mean 1
        t = TARGETS[name]
        x = t.sample(N, gen).double()
        close(x[:, 0], 0.0)
        close(x[:, 0].square(), t.sigma0**2)
        close((x[:, 1:].square() * torch.exp(-x[:, :1])).mean(1), 1.0)
    t = TARGETS["many_well"]
    x = t.sample(N, gen).double()
    g, w, f = _well_quadrature()
    for k, moment in enumerate((g, g.square(), (g > 0).double())):  # E[x], E[x^2], P(x > 0) of the well, by quadrature
        exact = float((f * moment) @ w / (f @ w))
        close({0: x[:, 0], 1: x[:, 2].square(), 2: (x[:, 4] > 0).double()}[k], exact)
        if k == 2:
            assert t.right_mass() == pytest.approx(exact, abs=1e-7)
    close(x[:, 1].square(), 1.0)


@pytest.mark.parametrize("name", [name for name, t in TARGETS.items() if hasattr(t, "sample")])
def test_samples_agree_with_the_density_and_the_marginal_cdf(name):
    """Stein's identity E[grad log p] = 0 under p, and the KS distance of x_0 to the exact marginal CDF below 1.63 /
    sqrt(n) (the 1% point of Kolmogorov's law), on 20,000 seeded samples; 5 standard errors for the gradient."""
    t = TARGETS[name]
    x = t.sample(20000, torch.Generator().manual_seed(4)).double().requires_grad_(True)
    (grad,) = torch.autograd.grad(t.log_prob(x).sum(), x)
    assert (grad.mean(0).abs() < 5 * grad.std(0) / math.sqrt(len(x))).all()
    assert ks_distance(x.detach()[:, 0], t.cdf0) < 1.63 / math.sqrt(len(x))
    assert ks_distance(x.detach()[:, 0] + 0.1, t.cdf0) > 1.63 / math.sqrt(len(x))  # the metric sees a shift of 0.1


def test_targets_are_registered_as_sde_settings():
    from gflownet_measure.environments import sde
    from gflownet_measure.experiments.settings import build, resolve
    for name in ("gmm25", "hard_funnel", "many_well"):
        space = build(sde.SDEConfig, resolve(sde.SETTINGS, {"target": name, "hidden": 8, "n_steps": 3}))
        graph = sde.make_graph(space)
        assert graph.source.shape == (TARGETS[name].dim + 1,)


def test_lgcp_is_the_gaussian_prior_times_the_poisson_likelihood():
    """The LGCP's log R plus the constants it leaves out (n_i log a - log n_i!) is torch's own MultivariateNormal(mu, K)
    and Poisson(a e^x) log-densities, at the prior mean and at two prior draws (float64; the two sides factorise K
    separately, so 1e-9 relative); its gradient is the closed form -K^{-1}(x - mu) + n - a e^x. The counts follow the
    public codes' convention: row floor(40 x), column floor(40 y), flattened row-major."""
    t = TARGETS["lgcp"]
    assert t.dim == 1600 and int(t.counts.sum()) == 126 and int(t.counts.max()) == 3
    first = t.points[0]  # (0.3006, 0.8930): row 12, column 35
    assert t.counts[int(first[0] * 40) * 40 + int(first[1] * 40)] >= 1
    K = t.covariance()
    assert float(K[0, 1]) == pytest.approx(1.91 * math.exp(-33 / 40)) and float(K[0, 41]) == pytest.approx(1.91 * math.exp(-math.sqrt(2) * 33 / 40))
    prior = torch.distributions.MultivariateNormal(torch.full((t.dim,), t.mean, dtype=torch.float64), covariance_matrix=K)
    torch.manual_seed(0)
    x = torch.cat([prior.mean[None], prior.sample((2,))])
    expected = prior.log_prob(x) + torch.distributions.Poisson(t.area * x.exp()).log_prob(t.counts).sum(1)
    assert (t.log_prob(x) + t.likelihood_constant).tolist() == pytest.approx(expected.tolist(), rel=1e-9)
    x = x.requires_grad_(True)
    (grad,) = torch.autograd.grad(t.log_prob(x).sum(), x)
    closed = -torch.linalg.solve(K, (x - t.mean).T).T + t.counts - t.area * x.exp()
    assert torch.allclose(grad, closed.detach(), rtol=1e-8, atol=1e-8)
    L = torch.linalg.cholesky(K)  # the whitened form: log R(mu + L z) + log det L, the same normaliser
    z = torch.linalg.solve_triangular(L, (x.detach() - t.mean).T, upper=False).T
    assert t.whitened_log_prob(z).tolist() == pytest.approx((t.log_prob(x.detach()) + L.diagonal().log().sum()).tolist(), rel=1e-9)
