"""The SDE graph on R^n (Lahlou et al. 2023, section 4.2): exactness of the Brownian bridge, scored and
reparametrised rollouts, exploration densities, targets and objectives."""
import math

import pytest
import torch

from gflownet_measure.environments import sde
from gflownet_measure.environments.sde_targets import TARGETS
from gflownet_measure.experiments.settings import build, resolve
from gflownet_measure.metrics import log_weights
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet
from gflownet_measure.rollout import log_densities, rollout, sample_forward, score


def setup(**overrides):
    cfg = resolve(sde.SETTINGS, {"hidden": 16} | overrides)
    space = build(sde.SDEConfig, cfg)
    graph = sde.make_graph(space)
    pf, pb = sde.make_policies(graph, space)
    return cfg, graph, pf, pb


@pytest.mark.parametrize("target", ["gmm9", "funnel"])
def test_bridge_is_the_exact_backward_law_of_the_reference_process(target):
    """With zero drift (the zero-initialised network) P_F(tau) = N(x; 0, sigma^2 I) P_B(tau | x) exactly, so
    w = log R(x) - log N(x; 0, sigma^2 I) on every trajectory, whatever its path (float32 round-off over T steps:
    at most 1.6e-5 measured on the funnel, 4.2e-6 on gmm9)."""
    torch.manual_seed(0)
    cfg, graph, pf, pb = setup(target=target, n_steps=20)
    traj, scores = rollout(graph, pf, 256, pb=pb)
    w = log_weights(traj.log_R, scores.log_pf, scores.log_pb, traj.mask)
    x = traj.terminal[:, :-1].double()
    sigma = sde.sigma_of(build(sde.SDEConfig, cfg))
    ref = -0.5 * (x / sigma).square().sum(1) - x.shape[1] * (math.log(sigma) + 0.5 * math.log(2 * math.pi))
    assert torch.allclose(w.double(), traj.log_R.double() - ref, atol=2e-4)
    # and the rollout's scores are the densities log_densities recomputes from the states
    lpf, lpb = log_densities(traj, pf, pb)
    assert torch.allclose(lpf, scores.log_pf, atol=1e-4) and torch.allclose(lpb, scores.log_pb, atol=1e-4)


def test_trajectories_have_fixed_length_and_step_counter():
    cfg, graph, pf, pb = setup(n_steps=7)
    traj, _ = rollout(graph, pf, 32)
    assert traj.states.shape == (9, 32, 3) and (traj.length == 8).all()
    assert torch.equal(traj.states[:8, 0, -1], torch.arange(8.0))


def test_pis_network_is_its_layers_on_the_concatenation():
    """The split first joint layer (the time half once per distinct time, or given per row as a rollout's table gives it)
    is joint(cat(x_net(x), t_net(t))) up to float32 round-off, in value and gradient, for times in any order and for one
    shared time."""
    torch.manual_seed(0)
    net = sde.PISNetwork(2, 4, hidden=16)
    with torch.no_grad():
        for p in net.parameters():
            p.normal_(0, 0.3)
    x = 3 * torch.randn(50, 2)
    for t in (torch.randint(0, 9, (50,)) / 8.0, torch.full((50,), 0.375)):
        out, ref = net(x, t), net.joint(torch.cat([net.x_net(x), net.t_net(t)], 1))
        for y in (out, net(x, t, net.time_part(t))):
            assert torch.allclose(y, ref, rtol=1e-5, atol=1e-5 * float(ref.detach().abs().max()))
        grads = [torch.autograd.grad(y.square().sum(), net.joint[1].weight)[0] for y in (out, ref)]
        assert torch.allclose(*grads, rtol=1e-4, atol=1e-4 * float(grads[1].abs().max()))


def test_reparametrised_rollout_carries_gradients_to_the_policy():
    torch.manual_seed(1)
    cfg, graph, pf, pb = setup(n_steps=5)
    gfn = GFlowNet(pf, pb)
    with torch.no_grad():  # a non-zero last layer so the drift depends on the parameters
        pf.net.joint[-1].weight.normal_(0, 0.1)
    traj, scores = rollout(graph, pf, 64, pb=pb, reparametrise=True)
    assert traj.states.requires_grad and traj.log_R.requires_grad
    loss = OBJECTIVES["reverse_kl"](gfn, Batch(graph, traj, scores, pathwise=True))
    loss.backward()
    assert pf.net.x_net[0].weight.grad.abs().sum() > 0  # only reachable through the sampled states


def test_widened_exploration_is_scored_by_its_own_density():
    """Off-policy steps come from q = N(m, v + noise): E_q[P_F / q] = 1 per step; the estimate is a mean of
    64 x 5 iid ratios, within 5 standard errors."""
    torch.manual_seed(2)
    cfg, graph, pf, pb = setup(n_steps=5)
    traj, scores = rollout(graph, pf, 4096, pb=pb, noise=0.5)
    ratio = (scores.log_pf - scores.log_q)[:-1].exp()  # the last step (into the sink) is an atom: ratio 1
    assert not torch.allclose(scores.log_pf, scores.log_q)
    ratio = ratio.detach()
    assert abs(float(ratio.mean()) - 1) < 5 * float(ratio.std()) / math.sqrt(ratio.numel())


@pytest.mark.parametrize("noise", [0.0, 0.5])
def test_batched_scores_equal_the_scored_rollout(noise):
    """``sample_forward`` then ``score`` (the training path) draws the same trajectories from the same seed as a scored
    ``rollout`` and gives the same log P_F, log P_B and behaviour log q, to float32 round-off of one network
    evaluated on a batch of 32 rows or of 32 x 6 rows (1e-4 in log-density)."""
    torch.manual_seed(3)  # the network and its perturbation too
    cfg, graph, pf, pb = setup(n_steps=5)
    with torch.no_grad():  # a non-zero drift, so that log P_F depends on the network's output
        pf.net.joint[-1].weight.normal_(0, 0.1)
    torch.manual_seed(3)
    traj, expected = rollout(graph, pf, 32, pb=pb, noise=noise)
    torch.manual_seed(3)
    again = sample_forward(graph, pf, 32, noise=noise)
    assert torch.equal(again.states, traj.states)
    got = score(again, pf, pb, noise=noise)
    for name, a, b in zip(expected._fields, got, expected):
        assert torch.allclose(a, b, atol=1e-4), name
    assert (noise > 0) == (not torch.allclose(got.log_q, got.log_pf.detach(), atol=1e-3))


def test_widening_a_beta_policy_is_an_error():
    from gflownet_measure.environments import quarter_disc
    cfg = quarter_disc.QuarterDiscConfig()
    g = quarter_disc.make_graph(cfg)
    pf, _ = quarter_disc.make_policies(g, cfg)
    with pytest.raises(ValueError, match="Gaussian"):
        pf(g.source[None]).widened(0.1).sample()


@pytest.mark.parametrize("name", ["gmm9", "funnel"])
def test_targets_are_normalised_and_their_samples_match(name):
    t = TARGETS[name]
    gen = torch.Generator().manual_seed(3)
    x = t.sample(200000, gen).double()
    if name == "gmm9":  # log Z = 0: a fine grid integral (the mass beyond [-9, 9]^2 is < 1e-12)
        g = torch.linspace(-9, 9, 721, dtype=torch.float64)
        pts = torch.cartesian_prod(g, g)
        assert float(t.log_prob(pts).exp().sum() * (g[1] - g[0]) ** 2) == pytest.approx(1.0, abs=1e-6)
        counts = t.mode_counts(x)  # within 3 standard deviations in 2-D: probability 1 - e^{-9/2} per sample
        p = (1 - math.exp(-4.5)) / 9
        assert (counts - 200000 * p).abs().max() < 5 * math.sqrt(200000 * p * (1 - p))
    else:  # x0 ~ N(0, 1), x_i | x0 ~ N(0, e^{x0}): E[x_i^2] = E[e^{x0}] = e^{1/2}; 5 standard errors
        assert abs(float(x[:, 0].mean())) < 5 / math.sqrt(len(x))
        second = x[:, 1:].square().mean(1)
        assert abs(float(second.mean()) - math.exp(0.5)) < 5 * float(second.std()) / math.sqrt(len(x))
    # the density's gradient agrees with its samples: E[grad log p] = 0 under p (Stein); 5 standard errors
    xs = x[:20000].clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(t.log_prob(xs).sum(), xs)
    assert (grad.mean(0).abs() < 5 * grad.std(0) / math.sqrt(len(xs))).all()


def test_langevin_term_adds_the_clipped_score():
    torch.manual_seed(4)
    cfg, graph, pf, _ = setup(n_steps=10, langevin=True)
    _, _, plain, _ = setup(n_steps=10)
    plain.net.load_state_dict(pf.net.state_dict())
    s = torch.cat([torch.randn(8, 2) * 3, torch.full((8, 1), 3.0)], 1)
    x = s[:, :2].clone().requires_grad_(True)
    (score,) = torch.autograd.grad(TARGETS["gmm9"].log_prob(x).sum(), x)
    with torch.no_grad():
        loc = pf(s).coords[0](torch.ones(8, dtype=torch.bool)).mean
        loc0 = plain(s).coords[0](torch.ones(8, dtype=torch.bool)).mean
    c = float(pf.langevin(torch.full((1,), 0.3))[0, 0].detach())  # 0.01 at initialisation
    assert c == pytest.approx(0.01)
    assert torch.allclose(loc - loc0, c * score * math.sqrt(0.1) / sde.sigma_of(build(sde.SDEConfig, cfg)), atol=1e-5)
    # the training path samples with this policy too: its gradient of log R must be computable inside sample_forward
    assert sample_forward(graph, pf, 4).states.shape == (12, 4, 3)


def test_target_regime_weights_are_uniform_and_forward_kl_is_the_likelihood():
    from gflownet_measure.experiments.sde import _target_batch
    torch.manual_seed(5)
    cfg, graph, pf, pb = setup(n_steps=6)
    gfn = GFlowNet(pf, pb)
    batch = _target_batch(graph, gfn, cfg["target"], 64)
    traj, scores = batch.traj, batch.scores
    loss = OBJECTIVES["forward_kl"](gfn, batch)
    assert float(loss.detach()) == pytest.approx(-float((scores.log_pf * traj.mask).sum(0).mean().detach()), rel=1e-5)
    assert float(OBJECTIVES["tb"](gfn, batch).detach()) > 0


def test_divergences_need_scores():
    cfg, graph, pf, pb = setup(n_steps=3)
    traj, _ = rollout(graph, pf, 4)
    with pytest.raises(ValueError, match="scores"):
        OBJECTIVES["forward_kl"](GFlowNet(pf, pb), Batch(graph, traj))


def test_checks_catch_a_policy_without_its_jacobian():
    """Dropping the chart's log|J| = n log c (the Li et al. 2023 error) leaves a density that integrates to
    c^n = 0.25 against Lebesgue (gmm9, sigma = 1, T = 4): eq. 15 fails, the graph's own conditions still hold."""
    from gflownet_measure.charts import WithoutJacobian
    from gflownet_measure.checks import check_graph

    torch.manual_seed(6)
    cfg, graph, pf, pb = setup(n_steps=4, sigma=1.0)
    broken = sde.SDEKernel(2, 4, 0.5, forward=True)
    broken.chart = WithoutJacobian(broken.chart)
    pf.kernel = broken
    report = check_graph(graph, pf, pb, n=64)
    failed = {r.condition for r in report.results if not r.passed}
    assert failed == {"eq. 15 P_F integrates to 1"}, str(report)
    worst = next(r for r in report.results if r.condition in failed)
    assert worst.estimate == pytest.approx(0.75, abs=0.05)  # |integral - 1| at the worst state


@pytest.mark.slow  # trains two samplers to convergence (600 Adam steps each): about 5 s
def test_vargrad_and_tb_share_the_minimiser_of_a_one_step_sampler():
    """One Euler-Maruyama step (T = 1, sigma = 1, learned variance) to R(x) = 3 N(x; 1.5, 0.5^2): both losses vanish exactly
    when P_F = R / Z (TB with log Z = log 3, VarGrad with the batch mean of w = log 3), the unique minimiser here, as P_B
    has one choice. Trained alike (same seed, 600 off-policy batches of 256, exploration variance 0.5), both reach it:
    mean 1.5 and standard deviation 0.5 within 0.05 (10,000 samples: the standard error of the mean is 0.005; the rest is
    what 600 Adam steps at lr 1e-2 leave), and their log Z estimates log 3 within 0.05."""
    from gflownet_measure.gaussian import LOG_2PI

    def log_reward(x):
        return math.log(3.0) - 0.5 * ((x[:, 0] - 1.5) / 0.5).square() - math.log(0.5) - 0.5 * LOG_2PI

    graph = sde.level_graph("one-step", 1, 1, 1.0, log_reward)
    for name in ("tb", "vargrad"):
        torch.manual_seed(0)
        gfn = GFlowNet(sde.EulerMaruyamaPolicy(graph.kappa, 1.0, hidden=16, learned_variance=True), sde.BrownianBridge(graph.kappa_b, 1.0))
        opt = torch.optim.Adam([{"params": gfn.pf.parameters(), "lr": 1e-2}, {"params": [gfn.log_Z], "lr": 0.1}])
        for _ in range(600):
            loss = OBJECTIVES[name](gfn, OBJECTIVES[name].sample(graph, gfn, 256, noise=0.5))
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            traj, scores = rollout(graph, gfn.pf, 10000, pb=gfn.pb)
            x = traj.terminal[:, 0]
            w = log_weights(traj.log_R, scores.log_pf, scores.log_pb, traj.mask)
        assert float(x.mean()) == pytest.approx(1.5, abs=0.05) and float(x.std()) == pytest.approx(0.5, abs=0.05), name
        log_Z = float(gfn.log_Z.detach()) if name == "tb" else float(w.mean())
        assert log_Z == pytest.approx(math.log(3.0), abs=0.05), name


def test_langevin_clip_bounds_the_score_term():
    """langevin_clip=0.5: the drift's Langevin term is c(t) clip(grad log R, +-0.5); on gmm9 the score's size is the distance
    to the nearest mode over 0.3, above 0.5 at most of these 8 points."""
    torch.manual_seed(4)
    cfg, graph, pf, _ = setup(n_steps=10, langevin=True, langevin_clip=0.5)
    x = torch.randn(8, 2) * 3
    g = pf._grad_log_reward(x)
    assert g.abs().max() == pytest.approx(0.5) and pf.clip == 0.5


def test_learned_bridge_starts_at_the_bridge_and_keeps_its_weights_unbiased():
    """learned_backward: with the network's zero-initialised last layer P_B is the Brownian bridge to the bit; with
    random weights (corrections up to 1 +- 0.5) it is still a normalised density, so with the reference P_F (zero drift)
    mean e^w = Z = 1 over 100,000 trajectories of gmm9, within 4 standard errors (measured at the seed: 0.5 SE), while
    its log P_B sums differ from the plain bridge's by 0.79 on average (0.11-1.64 between the 10% and 90% points), so a
    wrong normaliser would show; TB's gradient reaches P_B."""
    torch.manual_seed(0)
    _, graph, pf, pb = setup(n_steps=3)
    _, _, _, learned = setup(n_steps=3, learned_backward=True, backward_range=0.5)
    traj, scores = rollout(graph, pf, 512, pb=pb)
    assert torch.equal(log_densities(traj, pf, learned)[1], scores.log_pb)
    with torch.no_grad():
        for p in learned.net.parameters():
            p.normal_(0, 0.5)
        traj, scores = rollout(graph, pf, 100_000, pb=learned)
        w = log_weights(traj.log_R, scores.log_pf, scores.log_pb, traj.mask).double()
        moved = (scores.log_pb.sum(0) - log_densities(traj, pf, pb)[1].sum(0)).abs().mean()
    e = w.exp()
    assert abs(float(e.mean()) - 1.0) < 4 * float(e.std()) / math.sqrt(len(e)) and float(moved) > 0.1
    gfn = GFlowNet(pf, learned)
    OBJECTIVES["tb"](gfn, OBJECTIVES["tb"].sample(graph, gfn, 64)).backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in learned.net.joint[-1].parameters())
