"""Diffusion models as GFlowNets trained from data (gflownet_measure/environments/diffusion.py; the `mle` objective; likelihood bounds)."""
import math

import numpy as np
import pytest
import torch
from torch.distributions import Normal

from gflownet_measure.environments import diffusion as env
from gflownet_measure.environments.diffusion_data import load_data
from gflownet_measure.likelihood import log_likelihood_bounds
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet
from gflownet_measure.rollout import rsample_backward, sample_backward

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(dim: int, T: int, learn: bool, randomise: bool = True):
    cfg = env.DiffusionConfig(dim=dim, n_steps=T, hidden=8, learn_backward=learn)
    graph = env.make_graph(cfg)
    pf, pb = env.make_policies(graph, cfg)
    if randomise:  # the output layer starts at zero (eps = 0, unit variance factor): give it values, so the test sees the network
        with torch.no_grad():
            last = pf.net.joint[-1]
            last.weight.normal_(0, 0.3)
            last.bias.normal_(0, 0.3)
    return cfg, graph, GFlowNet(pf, pb)


def _at_data(x: torch.Tensor, T: int) -> torch.Tensor:
    return torch.cat([x, torch.full((len(x), 1), float(T + 1))], 1)


def test_objective_with_phi_zero_is_the_ddpm_bound():
    """The `mle` loss on the core's log-densities equals Ho et al. 2020's eq. 3 written out with torch's Normal."""
    torch.manual_seed(0)
    T, n = 4, 3
    cfg, graph, gfn = _model(n, T, learn=False)
    traj = sample_backward(graph, gfn.pb, _at_data(torch.randn(5, n), T))
    loss = OBJECTIVES["mle"](gfn, Batch(graph, traj))
    beta_bar, log_alpha_bar = env.ddpm_schedule(T, cfg.beta_min, cfg.beta_max)
    xs = traj.states[1 : T + 2, :, :n].double()  # level k holds x_{T+1-k}: xs[0] = x_T, ..., xs[T] = x_0
    elbo = Normal(0.0, 1.0).log_prob(xs[0]).sum(-1)
    for k in range(1, T + 1):
        t = T + 1 - k  # the step x_t -> x_{t-1}
        x_t, x_prev = xs[k - 1], xs[k]
        b, ab = beta_bar[t - 1], log_alpha_bar[t - 1].exp()
        with torch.no_grad():
            out = gfn.pf.net(x_t.float(), torch.full((len(x_t),), t / T)).double()
        mean = (x_t - b / (1 - ab).sqrt() * out[:, :n]) / (1 - b).sqrt()
        std = b.sqrt() * torch.exp(2 * torch.tanh(out[:, n:]))
        elbo += Normal(mean, std).log_prob(x_prev).sum(-1) - Normal((1 - b).sqrt() * x_prev, b.sqrt()).log_prob(x_t).sum(-1)
    # float32 policies against a float64 formula: a relative 1e-5 of a loss of a few hundred nats
    assert float(loss.detach()) == pytest.approx(float(-elbo.mean()), rel=1e-5)


def test_bounds_lie_below_the_exact_log_likelihood_of_a_gaussian_model():
    """With the zero-initialised denoiser P_F is linear-Gaussian: x_T ~ N(0, 1), x_{t-1} = x_t / sqrt(1 - b_t) + sqrt(b_t) z,
    so its terminal marginal is N(0, v_0) with v_{t-1} = v_t / (1 - b_t) + b_t, exactly. On 1-D Gaussian data both
    bounds must lie below log N(x; 0, v_0), the importance-weighted one between the ELBO and it."""
    torch.manual_seed(1)
    T = 5
    cfg, graph, gfn = _model(1, T, learn=False, randomise=False)
    beta_bar, _ = env.ddpm_schedule(T, cfg.beta_min, cfg.beta_max)
    v = 1.0
    for b in beta_bar.flip(0):
        v = v / (1 - float(b)) + float(b)
    x = 0.3 + 0.5 * torch.randn(300, 1)
    exact = Normal(0.0, math.sqrt(v)).log_prob(x.double())[:, 0]
    elbo, iw = log_likelihood_bounds(graph, gfn.pf, gfn.pb, _at_data(x, T), K=64)
    gap_elbo, gap_iw = exact - elbo, exact - iw
    # the mean ELBO gap is a KL divergence, > 0; with 64 trajectories per point its Monte Carlo error is ~0.01 nats (measured)
    se = float(gap_elbo.std() / math.sqrt(len(x)))
    assert float(gap_elbo.mean()) > 3 * se
    assert 0 < float(gap_iw.mean()) < float(gap_elbo.mean())  # IW tightens the bound, never past log p (E[IW] <= log p)


def test_learned_backward_policy_gets_path_wise_gradients():
    torch.manual_seed(2)
    T = 3
    _, graph, gfn = _model(2, T, learn=True)
    x = _at_data(torch.randn(8, 2), T)
    assert not sample_backward(graph, gfn.pb, x).states.requires_grad
    traj = rsample_backward(graph, gfn.pb, x)
    OBJECTIVES["mle"](gfn, Batch(graph, traj, pathwise=True)).backward()
    assert gfn.pb.phi.grad is not None and bool((gfn.pb.phi.grad != 0).all())
    assert gfn.pb.log_variances().shape == (T,)
    _, _, fixed = _model(2, T, learn=False)
    assert "pb.phi" not in dict(fixed.named_parameters())  # the DDPM baseline: phi = 0 frozen, a buffer


def _tbc_batch(graph, gfn, x: torch.Tensor, K: int, T: int) -> Batch:
    """K backward walks of each point of ``x``, in K blocks of the points (the layout ``mle_tbc`` reads)."""
    return Batch(graph, sample_backward(graph, gfn.pb, _at_data(x.repeat(K, 1), T)))


def test_tbc_loss_at_k_2_is_the_mle_term_plus_the_squared_difference_of_two_log_ratios():
    """MLE-GFN (Zhang et al. 2023a, eq. 33) at K = 2, written out from the core's log-densities: the loss is
    -mean(log P_F - log P_B) + alpha mean_b (r_1b - r_2b)^2 with r = log P_F - log P_B per trajectory."""
    torch.manual_seed(3)
    T, B = 3, 6
    _, graph, gfn = _model(2, T, learn=True)
    batch = _tbc_batch(graph, gfn, torch.randn(B, 2), 2, T)
    loss = OBJECTIVES["mle_tbc"](gfn, batch, tbc_weight=0.7, tbc_samples=2)
    from gflownet_measure.rollout import log_densities

    log_pf, log_pb = log_densities(batch.traj, gfn.pf, gfn.pb)
    m = batch.traj.mask
    r = ((log_pf - log_pb) * m).sum(0).detach().double()  # [2 B]
    expected = -r.mean() + 0.7 * (r[:B] - r[B:]).square().mean()
    # float32 log-densities summed over T steps: a relative 1e-5 of losses of tens of nats
    assert float(loss.detach()) == pytest.approx(float(expected), rel=1e-5)
    assert float((r[:B] - r[B:]).abs().min()) > 0  # the consistency term is not identically zero


def test_tbc_moves_p_b_by_its_log_densities_and_p_f_by_the_bound_alone():
    """The consistency term's gradient does not reach P_F; P_F's gradient is the bound's with P_B held; P_B's
    parameters get a gradient under the rule (from the log-densities of the sampled, non-reparametrised walks)."""
    torch.manual_seed(4)
    T, B, K = 3, 5, 3
    _, graph, gfn = _model(2, T, learn=True)
    batch = _tbc_batch(graph, gfn, torch.randn(B, 2), K, T)
    pf_params = [p for p in gfn.pf.parameters() if p.requires_grad]

    def grads(loss):
        gfn.zero_grad(set_to_none=True)
        loss.backward()
        return [None if p.grad is None else p.grad.clone() for p in pf_params], gfn.pb.phi.grad

    with_tbc, phi_grad = grads(OBJECTIVES["mle_tbc"](gfn, batch, tbc_weight=5.0, tbc_samples=K))
    without, phi_without = grads(OBJECTIVES["mle_tbc"](gfn, batch, tbc_weight=0.0, tbc_samples=K))
    for a, b in zip(with_tbc, without):
        torch.testing.assert_close(a, b)  # the same gradient whatever alpha: L_B does not reach P_F
    assert phi_grad is not None and bool((phi_grad != 0).any())
    assert phi_without is None or bool((phi_without == 0).all())  # with alpha = 0 nothing moves P_B (its log P_B is held in the bound)


def test_bits_per_dim_of_the_uniform_density_is_eight():
    """A uniform density on [-1, 1]^64 (model units) is uniform on [0, 256)^64: exactly 8 bits per dimension on the 0-255 scale."""
    digits = load_data("digits")
    assert digits.bits_per_dim(-64 * math.log(2.0)) == pytest.approx(8.0)
    x = digits.to_model(digits.test[:50], torch.Generator().manual_seed(0))
    assert float(x.min()) >= -1 and float(x.max()) < 1
    assert np.abs(digits.to_levels(x) - digits.test[:50]).max() <= 0.5 + 1e-4  # dequantisation stays within half a level
    assert digits.train.shape == (1500, 64) and digits.test.shape == (297, 64)
