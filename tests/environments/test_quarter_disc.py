"""Quarter-disc specifics: arc geometry, the forced-exit rule, the mirrored backward kernel, normalisation by
independent quadrature, the Jacobian-free error, the reward's partition function and the grid metrics."""
import math
from dataclasses import replace

import numpy as np
import pytest
import torch

from gflownet_measure.charts import ArcChart, WithoutJacobian
from gflownet_measure.checks import check_graph
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.environments import quarter_disc as qd
from gflownet_measure.heads import BetaMixtureHead
from gflownet_measure.metrics import expected_sample_tv, grid_jsd, kde_log_density, rejection_sample, total_variation
from gflownet_measure.networks import tied
from gflownet_measure.rollout import log_densities, sample_backward, sample_forward, score

RHOS = [0.25, 0.1]


pytestmark = pytest.mark.usefixtures("one_thread")


def cfg(rho=0.25, jacobian=True):
    return qd.QuarterDiscConfig(rho, jacobian)


def states(n, seed=0):
    return torch.rand(n, 2, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("rho", RHOS)
def test_forward_arcs_stay_in_the_square_at_distance_rho(rho):
    kappa = qd.make_graph(cfg(rho)).kappa
    s = states(4000)
    arc = kappa(s).pieces[1]
    s, ctx = s[arc.mask], arc.context[arc.mask]
    for u in (0.0, 0.5, 1.0, None):
        u = torch.rand(len(s), 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) if u is None else torch.full((len(s), 1), u, dtype=torch.float64)
        x = arc.chart.forward(ctx, u)
        d = x - s
        assert ((x >= -1e-12) & (x <= 1 + 1e-12)).all()  # float64 round-off of s + rho (cos, sin)
        assert torch.allclose(torch.linalg.vector_norm(d, dim=1), torch.full((len(s),), rho, dtype=torch.float64), atol=1e-12)
        assert (d >= -1e-12).all()  # theta in [0, pi/2]: both coordinates grow


@pytest.mark.parametrize("rho", RHOS)
def test_forced_exit_is_the_codes_rule(rho):
    """Only the sink where ||(1,1) - s|| <= rho or a coordinate reaches 1 (docs/references.md, 'Quarter disc'), arc plus sink elsewhere."""
    m = qd.make_graph(cfg(rho)).kappa(states(20000, seed=1) ** 0.3)  # ** 0.3 crowds states near the corner (1, 1)
    s = m.pieces[1].context
    forced = (torch.linalg.vector_norm(1 - s, dim=1) <= rho) | (s >= 1 - 1e-10).any(1)
    assert forced.any() and (~forced).any()
    assert torch.equal(m.pieces[1].mask, ~forced)
    assert m.atoms.sink.all() and m.atoms.mask.all()  # every s != s0 can exit
    assert not m.pieces[0].mask.any()  # the polar piece is s0's only


def test_source_has_only_the_polar_piece_and_no_exit():
    m = qd.make_graph(cfg()).kappa(torch.zeros(1, 2, dtype=torch.float64))
    assert m.component_mask().tolist() == [[False, True, False]]


@pytest.mark.parametrize("rho", RHOS)
def test_backward_kernel_mirrors_the_forward_one(rho):
    """The backward arc of s' is the forward arc of (1,1) - s' reflected through (1/2, 1/2); children's parents include s."""
    g = qd.make_graph(cfg(rho))
    s = states(3000, seed=2)
    back = g.kappa_b(s)
    fwd = g.kappa((1 - s))
    u = torch.rand(len(s), 1, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    assert torch.equal(back.pieces[0].mask, fwd.pieces[1].mask & (torch.linalg.vector_norm(s, dim=1) > rho))
    both = back.pieces[0].mask
    xb = back.pieces[0].chart.forward(s[both], u[both])
    xf = fwd.pieces[1].chart.forward((1 - s)[both], u[both])
    assert torch.allclose(xb, 1 - xf, atol=1e-12)
    # a forward move is in the support of the child's backward kernel, at the mirrored arc coordinate
    m = g.kappa(s)
    ok = m.pieces[1].mask
    child = m.pieces[1].chart.forward(s[ok], u[ok])
    kb = g.kappa_b(child)
    assert (kb.component_of(s[ok], torch.zeros(int(ok.sum()), dtype=torch.bool)) == 1).all()  # component 1: the backward arc
    # states in the first quarter disc have s0 as their only parent
    inner = states(500, seed=3) * rho / math.sqrt(2)
    kb = g.kappa_b(inner)
    assert kb.atoms.mask.all() and not kb.pieces[0].mask.any() and (kb.atoms.x == 0).all()


def test_arc_chart_jacobian_matches_autograd_and_its_inverse():
    """Area formula |J| = |d phi / du| against autograd (float64, 1e-10 round-off), round trip, direction check."""
    chart = ArcChart(0.25, lambda s: qd.arc_bounds(1 - s, 0.25))
    s = torch.tensor([[0.3, 0.4], [0.9, 0.2], [0.2, 0.85], [0.8, 0.8]], dtype=torch.float64)
    u = torch.tensor([[0.3], [0.7], [0.01], [0.99]], dtype=torch.float64)
    for b in range(len(s)):
        jac = torch.autograd.functional.jacobian(lambda v: chart.forward(s[b : b + 1], v[None])[0], u[b])
        expected = 0.5 * torch.logdet(jac.T @ jac)
        assert torch.allclose(chart.log_abs_det_jacobian(s[b : b + 1], u[b : b + 1])[0], expected, atol=1e-10)
    x = chart.forward(s, u)
    assert torch.allclose(chart.inverse(s, x), u, atol=1e-10) and chart.contains(s, x).all()
    assert not chart.contains(s, s + 0.25 * torch.tensor([[-1.0, 0.0]], dtype=torch.float64)).any()  # a point of the circle off the arc
    with pytest.raises(ValueError, match="direction"):
        ArcChart(0.25, qd.arc_bounds, direction=0)


def test_arc_inverse_projects_round_off_at_the_end_points():
    """The clamp in ArcChart._coords: an end point moved off the arc by round-off maps to u in [0, 1] and is contained."""
    chart = ArcChart(0.25, lambda s: qd.arc_bounds(1 - s, 0.25))
    s = torch.tensor([[0.9, 0.2], [0.9, 0.2]], dtype=torch.float64)  # A > 0: the arc starts off the x-axis
    x = chart.forward(s, torch.tensor([[0.0], [1.0]], dtype=torch.float64))
    x = x + torch.tensor([[1e-12, -1e-12], [-1e-12, 0.0]], dtype=torch.float64)  # just past each end, along the circle
    u = chart.inverse(s, x)
    assert torch.equal(u, torch.tensor([[0.0], [1.0]], dtype=torch.float64))
    assert chart.contains(s, x).all()


def _gauss_legendre(n, lo, hi):
    x, w = np.polynomial.legendre.leggauss(n)
    return torch.tensor(lo + (hi - lo) * (x + 1) / 2), torch.tensor(w * (hi - lo) / 2)


@pytest.mark.parametrize("rho", RHOS)
def test_pf_integrates_to_one_by_independent_quadrature(rho):
    """P_F(s0, .) over the quarter disc in polar coordinates (r dr dphi written here, not taken from a chart), and
    P_F(s, .) over the arc (rho dtheta) plus exit. Gauss-Legendre with 96 nodes per axis on the smooth densities of an
    initialised network (concentrations near 2.6): quadrature error < 1e-8, float32 network outputs ~1e-6; tolerance 1e-4."""
    torch.manual_seed(0)
    g = qd.make_graph(cfg(rho))
    pf, _ = qd.make_policies(g, replace(cfg(rho), hidden=32, n_layers=2))
    r, wr = _gauss_legendre(96, 0.0, rho)
    phi, wphi = _gauss_legendre(96, 0.0, math.pi / 2)
    R, P = torch.meshgrid(r, phi, indexing="ij")
    x = torch.stack([R * torch.cos(P), R * torch.sin(P)], -1).reshape(-1, 2)
    with torch.no_grad():
        p = pf(torch.zeros_like(x)).log_prob(x, torch.zeros(len(x), dtype=torch.bool)).double().exp().reshape(96, 96)
    assert float((wr[:, None] * wphi[None, :] * R * p).sum()) == pytest.approx(1.0, abs=1e-4)
    s = torch.tensor([[0.3, 0.4], [0.85, 0.2], [0.2, 0.9]], dtype=torch.float64)
    for b in range(len(s)):
        A, B = qd.arc_bounds(1 - s[b : b + 1], rho)
        th, wth = _gauss_legendre(96, float(A) * math.pi / 2, float(B) * math.pi / 2)
        y = s[b] + rho * torch.stack([torch.cos(th), torch.sin(th)], -1)
        with torch.no_grad():
            d = pf(s[b : b + 1].expand(96, 2))
            arc = float((wth * rho * d.log_prob(y, torch.zeros(96, dtype=torch.bool)).double().exp()).sum())
            exit_ = float(d.log_prob(s[b : b + 1].expand(96, 2), torch.ones(96, dtype=torch.bool))[0].double().exp())
        assert arc + exit_ == pytest.approx(1.0, abs=1e-4)


@pytest.mark.parametrize("rho", RHOS)
def test_check_passes_with_jacobians_and_fails_eq15_without(rho):
    """Monte Carlo checks (z = 5, false-failure rate ~6e-7 per row); without Jacobians P_F at s0 integrates to
    int q(u) / |J(u)| du != 1 (e.g. 0.44 measured at rho = 0.25), far outside the Monte Carlo tolerance."""
    torch.manual_seed(0)
    g = qd.make_graph(cfg(rho))
    good = check_graph(g, *qd.make_policies(g, replace(cfg(rho), backward="learned", hidden=32, n_layers=2)), n=128)
    assert good.passed, str(good)
    torch.manual_seed(0)
    bad = check_graph(g, *qd.make_policies(g, replace(cfg(rho, jacobian=False), backward="learned", hidden=32, n_layers=2)), n=128)
    failed = {r.condition.split()[1] for r in bad.results if not r.passed}
    assert failed == {"15", "16"}, str(bad)


def test_without_jacobian_reports_zero():
    chart = WithoutJacobian(ArcChart(0.25, lambda s: qd.arc_bounds(1 - s, 0.25)))
    s, u = states(5), torch.full((5, 1), 0.5, dtype=torch.float64)
    assert torch.equal(chart.log_abs_det_jacobian(s, u), torch.zeros(5, dtype=torch.float64))
    assert torch.equal(chart.forward(s, u), chart.chart.forward(s, u))


def test_reward_levels_and_partition_function():
    """Midpoint rule on a 2000 x 2000 grid: every level boundary (0.1, 0.15, 0.25, ...) is a cell edge, so the rule is
    exact up to float64 summation (~1e-12); tolerance 1e-9."""
    c = (torch.arange(2000, dtype=torch.float64) + 0.5) / 2000
    x = torch.cartesian_prod(c, c)
    R = qd.log_reward(x).exp()
    assert torch.allclose(R.unique(), torch.tensor([0.1, 0.6, 2.6], dtype=torch.float64))
    assert float(R.mean()) == pytest.approx(0.305, abs=1e-9)
    assert qd.LOG_Z == pytest.approx(math.log(0.305), abs=1e-12) and qd.REWARD_MAX == pytest.approx(float(R.max()))


def test_rejection_sampler_is_exact_and_refuses_the_codes_bound():
    """Fraction of rejection samples in the R2 squares: 4 * 0.01 * 2.6 / 0.305 = 0.341; with n = 20,000 its standard
    error is 0.0034, tolerance 0.02 (~6 s.e.). The public code's bound 2.1 < max R must raise."""
    gen = torch.Generator().manual_seed(0)
    x = rejection_sample(qd.log_reward, torch.zeros(2), torch.ones(2), math.log(qd.REWARD_MAX), 20000, gen)
    assert x.shape == (20000, 2)
    assert float((qd.log_reward(x).exp() > 2).double().mean()) == pytest.approx(4 * 0.01 * 2.6 / 0.305, abs=0.02)
    with pytest.raises(ValueError, match="above the bound"):
        rejection_sample(qd.log_reward, torch.zeros(2), torch.ones(2), math.log(2.1), 1000, gen)


def test_level_masses_from_geometry_match_the_reward():
    """The exact level masses (0.1 * 0.75, 0.6 * 0.21, 2.6 * 0.04) / 0.305; reward_level indexes R's value at every point
    of a fine grid, whose level fractions weighted by R are those masses up to the grid's cells cut by a boundary
    (a 1,000 x 1,000 midpoint grid puts no point on one, and its cells lie wholly inside a level, since every boundary is a multiple of 0.05)."""
    masses = qd.level_masses()
    assert torch.allclose(masses, torch.tensor([0.075, 0.126, 0.104], dtype=torch.float64) / 0.305, atol=1e-12)
    side = (torch.arange(1000, dtype=torch.float64) + 0.5) / 1000
    x = torch.cartesian_prod(side, side)
    level = qd.reward_level(x)
    assert torch.equal(torch.tensor(qd.LEVELS, dtype=torch.float64)[level], qd.log_reward(x).exp().round(decimals=12))
    R = qd.log_reward(x).exp()
    by_level = torch.stack([R[level == k].sum() for k in range(3)]) / R.sum()
    assert torch.allclose(by_level, masses, atol=1e-9)


def test_concentration_bound_and_mixture_sizes_reach_every_head():
    """make_policies' concentration_max and mixture sizes set every Beta head of P_F and of the learned P_B; saturated
    pre-activations reach the bound (sigmoid(30) = 1 - 1e-13)."""
    g = qd.make_graph(cfg())
    pf, pb = qd.make_policies(g, replace(cfg(), backward="learned", hidden=8, n_layers=1, n_components_s0=5, n_components=3, concentration_max=50.0))
    heads = [*pf.heads, *pb.heads]
    assert [h.n_components for h in heads] == [5, 3, 3]
    for h in heads:
        conc = h(torch.full((1, h.n_params), 30.0)).conc  # the heads live on [0, 1]^k: a BetaMixture itself
        assert torch.allclose(conc, torch.tensor(50.0)) and float(h(torch.full((1, h.n_params), -30.0)).conc.max()) == pytest.approx(0.1)


def test_expected_sample_tv_is_exact():
    """n = 1: the sample is one level j, at TV 1 - p_j, so E TV = 1 - sum p^2 exactly. n = 10,000: against 2,000 seeded
    multinomial draws, whose mean TV has a standard error of 6.5e-5 (TV's spread 0.003 / sqrt(2000), measured); tolerance 3e-4.
    A point mass scores 0 at any n."""
    p = qd.level_masses()
    assert expected_sample_tv(p, 1) == pytest.approx(1 - float((p**2).sum()), abs=1e-12)
    counts = np.random.default_rng(0).multinomial(10000, p.numpy(), size=2000)
    simulated = 0.5 * np.abs(counts / 10000 - p.numpy()).sum(1).mean()
    assert expected_sample_tv(p, 10000) == pytest.approx(float(simulated), abs=3e-4)
    assert expected_sample_tv(torch.tensor([1.0, 0.0]), 50) == 0.0
    assert total_variation(torch.tensor([1.0, 0.0, 0.0]), p) == pytest.approx(1 - float(p[0]), abs=1e-12)


def test_grid_jsd_and_kde():
    torch.manual_seed(0)
    g = torch.randn(50, dtype=torch.float64)
    assert grid_jsd(g, g) == pytest.approx(0.0, abs=1e-12)
    assert grid_jsd(g, 2 * g) == pytest.approx(grid_jsd(2 * g, g), abs=1e-12)
    disjoint = torch.tensor([0.0, -math.inf]), torch.tensor([-math.inf, 0.0])
    assert grid_jsd(*disjoint) == pytest.approx(math.log(2), abs=1e-12)
    pts = torch.rand(300, 2, dtype=torch.float64)
    y = torch.rand(40, 2, dtype=torch.float64)
    brute = torch.logsumexp(-torch.linalg.vector_norm(y[:, None] - pts[None], dim=-1) / 0.1, 1)
    assert torch.allclose(kde_log_density(pts, y, 0.1, chunk=7), brute, atol=2e-4)  # float32 matrix-product distances: 4.7e-5 at most over 5 seeds


def test_edge_clamp_keeps_sampled_densities_finite():
    """With every concentration at its floor 0.1, Beta samples fall within float round-off of 0 and 1; the clamp
    of BetaHead/BetaMixtureHead keeps them in [1e-6, 1 - 1e-6] and every sampled transition's log-density finite."""
    torch.manual_seed(0)
    head = BetaMixtureHead(1, 2)
    d = head(torch.full((5000, head.n_params), -30.0))  # sigmoid(-30) ~ 0: alpha = beta = 0.1
    u = d.sample()
    assert (u >= 1e-6).all() and (u <= 1 - 1e-6).all() and ((u == 1e-6) | (u == 1 - 1e-6)).any()
    assert torch.isfinite(d.log_prob(u)).all()
    torch.manual_seed(0)
    g = qd.make_graph(cfg())
    pf, pb = qd.make_policies(g, replace(cfg(), backward="learned", hidden=16, n_layers=1))
    with torch.no_grad():
        for out in (pf.out, pb.out):
            out.weight.zero_()
            out.bias.fill_(-30.0)  # all logits equal, all concentrations 0.1
        pf.source_out.fill_(-30.0)  # the free parameters at s0 too
    traj = sample_forward(g, pf, 512)
    log_pf, log_pb = log_densities(traj, pf, pb)  # raises if any is non-finite
    assert torch.isfinite(log_pf).all() and torch.isfinite(log_pb).all()


def test_beta_mixture_density_integrates_to_one():
    """96-node Gauss-Legendre on [0, 1]^2 of a 4-component mixture with concentrations in [1.1, 5.1] (smooth): error < 1e-6."""
    head = BetaMixtureHead(2, 4, c_min=1.1, c_span=4.0)
    d = head(torch.randn(1, head.n_params, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    t, w = _gauss_legendre(96, 0.0, 1.0)
    u = torch.cartesian_prod(t, t)
    val = (d.log_prob(u).exp() * (w[:, None] * w[None, :]).reshape(-1)).sum()
    assert float(val) == pytest.approx(1.0, abs=1e-6)


def test_beta_mixture_samples_follow_the_mixture():
    """The component-first sampler draws the mixture's law: a Kolmogorov-Smirnov test of 20,000 draws of a 2-component
    mixture against its exact CDF (p > 1e-3: a correct sampler fails one seed in a thousand), and for a 4-component
    product over [0, 1]^2 the moment E[u1 u2], which couples the two coordinates through the shared component
    (within 5 standard errors of the exact sum_j w_j E[u1|j] E[u2|j])."""
    from scipy import stats

    torch.manual_seed(0)
    head = BetaMixtureHead(1, 2)
    raw = torch.tensor([[0.3, -0.5, -2.0, 1.5, 1.0, -1.0]], dtype=torch.float64)  # logits, alphas, betas
    d = head(raw)
    w = torch.softmax(raw[0, :2], 0).numpy()
    a, b = (0.1 + 5.0 * torch.sigmoid(raw[0, 2:])).chunk(2)
    u = d.sample((20000,))[:, 0, 0].numpy()
    cdf = lambda x: sum(w[j] * stats.beta.cdf(x, float(a[j]), float(b[j])) for j in range(2))  # noqa: E731
    assert stats.kstest(u, cdf).pvalue > 1e-3

    head = BetaMixtureHead(2, 4)
    raw = torch.randn(1, head.n_params, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    C = 4
    w = torch.softmax(raw[0, :C], 0)
    a, b = (0.1 + 5.0 * torch.sigmoid(raw[0, C:])).chunk(2)
    mean = (a / (a + b)).reshape(C, 2)
    u = head(raw.expand(20000, -1)).sample()
    prod = u[:, 0] * u[:, 1]
    exact = float((w * mean[:, 0] * mean[:, 1]).sum())
    assert abs(float(prod.mean()) - exact) < 5 * float(prod.std()) / math.sqrt(len(prod))


def test_tied_backward_policy_scores_with_one_torso_pass():
    """With P_B tied to the P_F torso, log_densities runs the torso once over the trajectories' states; its log-densities
    and the torso's gradients equal those of separate P_F and P_B calls (float32 torso: 1e-5)."""
    torch.manual_seed(0)
    g = qd.make_graph(cfg())
    pf, pb = qd.make_policies(g, replace(cfg(), backward="learned", hidden=32, n_layers=2))
    assert tied(pf, pb) and not tied(pf, qd.make_policies(g, cfg())[1])
    traj = sample_forward(g, pf, 256)
    mask = traj.mask
    s, nx, ns = traj.states[:-1][mask], traj.states[1:][mask], traj.sink[1:][mask]
    separate_f = pf(s).log_prob(nx, ns)
    separate_b = pb(nx[~ns]).log_prob(s[~ns], torch.zeros(int((~ns).sum()), dtype=torch.bool))
    grads = torch.autograd.grad(separate_f.sum() + separate_b.sum(), list(pf.torso.parameters()))
    log_pf, log_pb = log_densities(traj, pf, pb)
    assert torch.allclose(log_pf[mask], separate_f, atol=1e-5)
    assert torch.allclose(log_pb[mask][~ns], separate_b, atol=1e-5) and (log_pb[mask][ns] == 0).all()
    tied_grads = torch.autograd.grad(log_pf.sum() + log_pb.sum(), list(pf.torso.parameters()))
    for g1, g2 in zip(grads, tied_grads):
        assert torch.allclose(g1, g2, rtol=1e-4, atol=1e-5)


def test_scores_at_the_rollouts_draw_equal_scores_at_the_located_transitions():
    """``score`` evaluates P_F at the rollout's own draw (``traj.draw``, no chart inverse); without it, it locates each
    transition in the kernel. Both give the same P_F, P_B and behaviour densities, with exploration on both pieces
    (float32 coordinates against their float64 inverses: 1e-5)."""
    torch.manual_seed(3)
    g = qd.make_graph(cfg())
    pf, pb = qd.make_policies(g, replace(cfg(), backward="learned", hidden=32, n_layers=2))
    traj = sample_forward(g, pf, 256, epsilon=0.2)
    assert traj.draw is not None and len(traj.draw.comp) == int(traj.mask.sum())
    assert traj.trimmed().draw is traj.draw
    at_draw, located = score(traj, pf, pb, epsilon=0.2), score(traj._replace(draw=None), pf, pb, epsilon=0.2)
    for name, a, b in zip(at_draw._fields, at_draw, located):
        assert torch.allclose(a, b, atol=1e-5), name


def _boundary_states(rho, dtype):
    """States of S \\ {s0} on and next to its boundary: the four walls at offsets from 0 (exact) to 1e-6, and the circle
    ||s|| = rho at relative offsets from -1e-12 to +1e-12 (float64 round-off is 1.1e-16), cast to ``dtype``."""
    t = torch.linspace(0.0, 1.0, 41, dtype=torch.float64)
    near = torch.tensor([0.0, 1e-300, 1e-30, 1e-18, 1e-17, 3e-17, 1e-16, 3e-16, 1e-12, 1e-6], dtype=torch.float64)
    walls = [torch.stack(p, -1) for a in near for p in ((a.expand(41), t), (t, a.expand(41)), (1 - a.expand(41), t), (t, 1 - a.expand(41)))]
    phi = torch.linspace(0.0, math.pi / 2, 41, dtype=torch.float64)
    ring = torch.stack([torch.cos(phi), torch.sin(phi)], -1)
    circle = [rho * (1 + f) * ring for f in (-1e-12, -1e-16, 0.0, 1e-16, 2e-16, 5e-16, 1e-15, 1e-12)]
    s = torch.cat(walls + circle).clamp(0.0, 1.0).to(dtype)
    return s[(s != 0).any(1)]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("rho", RHOS)
def test_every_state_of_the_support_has_a_parent(rho, dtype):
    """kappa_b(s', .) != 0 for every s' != s0 of [0, 1]^2, in particular on the walls x = 0 < rho < y and y = 0 < rho < x
    (the backward arc is one point there: the atom at that point) and within round-off of them and of the circle. Away
    from the boundary the kernel is the arc or the atom s0 as before; every parent lies in S; uniform backward walks from
    every boundary state reach s0."""
    g = qd.make_graph(cfg(rho))
    s = _boundary_states(rho, dtype)
    kb = g.kappa_b(s)
    assert not kb.is_zero().any(), s[kb.is_zero()].tolist()
    a = kb.atoms
    parents = a.x[:, 0][a.mask[:, 0]]
    assert ((parents >= 0) & (parents <= 1)).all()
    # on the walls beyond the disc the backward arc is the single point s' - rho e_y (x = 0) or s' - rho e_x (y = 0)
    y = torch.linspace(rho, 1.0, 30, dtype=torch.float64)[1:].to(dtype)
    for wall, step in ((torch.stack([torch.zeros_like(y), y], -1), (0.0, rho)), (torch.stack([y, torch.zeros_like(y)], -1), (rho, 0.0))):
        m = g.kappa_b(wall)
        assert m.atoms.mask.all() and not m.pieces[0].mask.any()
        assert torch.allclose(m.atoms.x[:, 0], wall - torch.tensor(step, dtype=dtype), atol=1e-15 if dtype == torch.float64 else 1e-7)
    # off the boundary nothing changes: the atom is s0 exactly on the disc, the arc exactly outside it
    inner = states(4000, seed=5).to(dtype)
    m = g.kappa_b(inner)
    disc = torch.linalg.vector_norm(inner, dim=1) <= rho
    assert torch.equal(m.atoms.mask[:, 0], disc) and torch.equal(m.pieces[0].mask, ~disc) and (m.atoms.x == 0).all()
    torch.manual_seed(0)
    traj = sample_backward(g, UniformPolicy(g.kappa_b), s)  # raises unless every walk reaches s0
    assert (traj.states >= -1e-15).all()


@pytest.mark.parametrize("rho", RHOS)
@pytest.mark.parametrize("end", ["wall x = 0", "far end"])
def test_saturated_backward_policy_walks_from_the_boundary_reach_s0(rho, end):
    """A learned P_B whose arc Beta sits at its floor/ceiling (alpha = 0.1, beta = 5.1, or mirrored): ~31% of draws land
    on the clamp edge u = 1e-6 (or 1 - 1e-6). Towards the wall x = 0 each such step multiplies x by ~1e-6, so two or three
    in a row put the parent within float64 round-off of the wall (x ~ +-1e-17, y > rho), where the computed arc has
    B <= A: before the fix kappa_b was the zero measure there and the walk raised (the issue's figure-2 crash). Seeded
    (torch.manual_seed(0)); what is asserted holds for every draw (every walk reaches s0, states in S up to 1e-15)."""
    torch.manual_seed(0)
    g = qd.make_graph(cfg(rho))
    _, pb = qd.make_policies(g, replace(cfg(rho), backward="learned", hidden=16, n_layers=1))
    C = pb.heads[0].n_components
    lo, hi = (-30.0, 30.0) if end == "wall x = 0" else (30.0, -30.0)
    with torch.no_grad():
        pb.out.weight.zero_()
        pb.out.bias.zero_()  # [atom, arc] logits, C mixture logits, then C alphas and C betas (BetaMixtureHead)
        pb.out.bias[2 + C : 2 + 2 * C] = lo
        pb.out.bias[2 + 2 * C :] = hi
    side = torch.linspace(0.0, 1.0, 25, dtype=torch.float64)[1:]
    inner = torch.cartesian_prod(side, side)  # off the walls x = 0 and y = 0: only the walks take them there
    with torch.no_grad():
        for x in (inner,) * 10 + (_boundary_states(rho, torch.float64),):
            traj = sample_backward(g, pb, x)  # raises unless every walk reaches s0
            assert (traj.states >= -1e-15).all() and (traj.states <= 1 + 1e-15).all()


@pytest.mark.parametrize("rho", RHOS)
def test_uniform_backward_walks_give_figure2_panel_c(rho):
    """Figure 2 (c) is the law of s1 under R (x) the fixed uniform P_B: ``uniform_backward`` is the P_B that
    ``make_policies`` builds for ``backward=uniform`` (equal densities at its own draws), and its walks from exact samples of
    R end at an s1 in the quarter disc of radius rho, at x itself where x is in that disc (s0 -> x -> sink). Seeded
    (torch.manual_seed(0)); what is asserted holds for every draw, up to float64 round-off."""
    torch.manual_seed(0)
    g = qd.make_graph(cfg(rho))
    pb = qd.uniform_backward(rho)
    _, built = qd.make_policies(g, cfg(rho))
    s = states(2000, seed=3)
    d = pb(s)
    parent, sink = d.sample()
    assert torch.equal(d.log_prob(parent, sink), built(s).log_prob(parent, sink))
    x = rejection_sample(qd.log_reward, torch.zeros(2), torch.ones(2), math.log(qd.REWARD_MAX), 4000, torch.Generator().manual_seed(1))
    s1 = sample_backward(g, pb, x).states[1]
    assert (torch.linalg.vector_norm(s1, dim=1) <= rho + 1e-12).all() and (s1 >= -1e-15).all()
    inside = torch.linalg.vector_norm(x, dim=1) <= rho
    assert inside.any() and torch.equal(s1[inside], x[inside].to(s1.dtype))
