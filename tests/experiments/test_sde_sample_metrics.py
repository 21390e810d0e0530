"""The SDE samplers' sample metrics: the mixtures' per-mode share against the exact one, and the EUBO."""

import math

import pytest
import torch

from gflownet_measure.environments.sde import BrownianBridge, EulerMaruyamaPolicy, level_graph, level_kernels
from gflownet_measure.environments.sde_targets import TARGETS
from gflownet_measure.experiments.sde import MODE_SHARE_TOLERANCE, evaluate_bounds, evaluate_eubo, sample_metrics
from gflownet_measure.objectives import GFlowNet
from gflownet_measure.training import seeded_generator

pytestmark = pytest.mark.usefixtures("one_thread")


def test_mode_share_is_the_mass_within_three_standard_deviations():
    g = TARGETS["gmm25"]
    x = g.sample(200_000, seeded_generator(0))
    share = g.mode_counts(x).double() / len(x)
    # binomial standard error of a share of 0.04 from 200,000 samples: 4.4e-4; 5e-3 is over ten of them
    assert share.sub(g.mode_share()).abs().max() < 5e-3
    assert g.mode_share() == pytest.approx((1 - math.exp(-4.5)) / 25)


def test_exact_samples_are_within_share_and_a_missing_mode_is_not():
    g = TARGETS["gmm25"]
    x = g.sample(20_000, seeded_generator(1))
    # 791 samples expected a mode, binomial sd 3.5% of that: 30% is 8.5 sd, a miss has probability below 1e-15
    m = sample_metrics("gmm25", x)
    assert m["modes_within_share"] == 25 and m["mode_share_max_error"] < MODE_SHARE_TOLERANCE and m["modes_covered"] == 25
    far = (x - g.means[7]).norm(dim=1) < 3.0  # every sample of mode 7 (its neighbours are 5 away, 9 sd)
    moved = torch.where(far[:, None], g.means[8] + (x - g.means[7]), x)  # mode 7's samples given to mode 8
    m = sample_metrics("gmm25", moved)
    assert m["modes_covered"] == 24 and m["modes_within_share"] == 23 and m["mode_share_max_error"] == pytest.approx(1.0, abs=0.15)


def _reference_sampler(sigma: float, target_sd: float, n: int = 2, T: int = 10, log_Z: float = 0.7):
    """The zero-drift Euler-Maruyama sampler of diffusion coefficient ``sigma`` (the policy's last layer starts at zero:
    it ends at :math:`\\mathcal N(0, \\sigma^2 I)`) and the bridge P_B, on the target :math:`R = Z\\,\\mathcal N(0, s^2 I)`,
    ``s`` = ``target_sd``."""

    def log_reward(x):
        return log_Z - 0.5 * (x / target_sd).square().sum(1) - n * (0.5 * math.log(2 * math.pi) + math.log(target_sd))

    graph = level_graph("gauss", n, T, sigma / math.sqrt(T), log_reward)
    kappa, kappa_b = level_kernels(graph)
    return graph, GFlowNet(EulerMaruyamaPolicy(kappa, sigma, hidden=8), BrownianBridge(kappa_b, sigma)), log_Z


def _kl_normal(s1: float, s2: float, n: int = 2) -> float:
    """:math:`\\mathrm{KL}(\\mathcal N(0, s_1^2 I_n) \\| \\mathcal N(0, s_2^2 I_n))`."""
    return n * (math.log(s2 / s1) + s1**2 / (2 * s2**2) - 0.5)


def test_eubo_and_elbo_are_log_Z_for_an_exact_sampler_and_bracket_it_otherwise():
    torch.manual_seed(0)
    graph, gfn, log_Z = _reference_sampler(sigma=1.5, target_sd=1.5)
    x = 1.5 * torch.randn(500, 2, generator=seeded_generator(2))
    # P_F(tau) = R(x) P_B(tau|x) / Z along every path: w is log Z on every trajectory, up to float32 round-off
    assert evaluate_eubo(gfn, graph, x) == pytest.approx(log_Z, abs=1e-4)
    assert evaluate_bounds(gfn, graph, 500)["log_Z_lower_bound"] == pytest.approx(log_Z, abs=1e-4)
    # the target twice as wide as the sampler's end point: the path KLs are the end points' (P_B is the reference's bridge),
    # ELBO = log Z - KL(N(0, 1.5^2) || N(0, 3^2)) = log Z - 0.64, EUBO = log Z + KL(N(0, 3^2) || N(0, 1.5^2)) = log Z + 1.61;
    # w = |x|^2 / 6 + const, so its sd is 0.75 (ELBO side, |x|^2 ~ 2.25 chi2_2) and 3.0 nats (EUBO side, 9 chi2_2): the means
    # of 4,000 have sd 0.012 and 0.047, and the tolerances are 3 of them
    graph, gfn, log_Z = _reference_sampler(sigma=1.5, target_sd=3.0)
    x = 3.0 * torch.randn(4000, 2, generator=seeded_generator(3))
    assert evaluate_bounds(gfn, graph, 4000)["log_Z_lower_bound"] == pytest.approx(log_Z - _kl_normal(1.5, 3.0), abs=0.04)
    assert evaluate_eubo(gfn, graph, x) == pytest.approx(log_Z + _kl_normal(3.0, 1.5), abs=0.15)
