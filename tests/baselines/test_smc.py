"""Annealed SMC and AIS (``gflownet_measure.baselines.smc``) on targets with known :math:`\\log Z`.

Tolerances are statistical, from ``R`` seeded replicates: :math:`\\hat Z` is (for fixed kernels)
unbiased, so :math:`\\log \\hat Z` has mean :math:`\\log Z - \\sigma^2/2 + O(\\sigma^4)` by the delta method
(:math:`\\sigma` = std of :math:`\\log \\hat Z`). We require
:math:`|\\overline{\\log \\hat Z} - \\log Z| < 5 \\hat\\sigma / \\sqrt R + \\hat\\sigma^2` (a 5-sigma z-test of the
mean plus twice the Jensen bias, which also absorbs the O(1/N) bias of step-size adaptation), and
:math:`\\hat\\sigma` below a stated ceiling so the test cannot pass by being noisy. Moments use the same
z-test on the replicates' weighted means and variances. Every run is seeded, so results are reproducible.
"""
from __future__ import annotations

import math

import pytest
import torch

from gflownet_measure.baselines import smc
from gflownet_measure.baselines.smc import SMCResult, annealed_smc, mala_chain

R = 8  # replicates per configuration


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _runs(log_target, dim: int, **kw) -> list[SMCResult]:
    return [annealed_smc(log_target, dim, generator=_gen(1000 + seed), **kw) for seed in range(R)]


def _weighted_moments(res: SMCResult) -> tuple[torch.Tensor, torch.Tensor]:
    """Self-normalised mean and per-coordinate variance of the weighted particles."""
    w = res.log_weights.exp()[:, None]
    mean = (w * res.particles).sum(0)
    return mean, (w * (res.particles - mean).square()).sum(0)


def _assert_log_z(runs: list[SMCResult], truth: float, max_std: float) -> None:
    est = torch.tensor([r.log_Z for r in runs], dtype=torch.float64)
    assert torch.isfinite(est).all()
    mean, std = float(est.mean()), float(est.std())
    assert std < max_std, f"log Z std {std:.4f} over {R} seeds exceeds {max_std}"
    tol = 5 * std / math.sqrt(R) + std**2
    assert abs(mean - truth) < tol, f"log Z {mean:.4f} +- {std:.4f} vs truth {truth:.4f} (tol {tol:.4f})"


def _assert_close(values: torch.Tensor, truth: torch.Tensor, max_std: float, what: str) -> None:
    """5-sigma z-test per coordinate of replicate values ``[R, d]`` against ``truth [d]``."""
    mean, std = values.mean(0), values.std(0)
    assert (std < max_std).all(), f"{what}: replicate std {std.tolist()} exceeds {max_std}"
    assert ((mean - truth).abs() < 5 * std / math.sqrt(R)).all(), f"{what}: {mean.tolist()} vs {truth.tolist()} (std {std.tolist()})"


# MALA-SMC with ESS resampling, and the "HMC" baseline of Table 2 (AIS with HMC moves, no resampling).
METHODS = {"mala-smc": {"move": "mala"}, "hmc-ais": {"move": "hmc", "ess_threshold": 0.0}}


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dim", [2, 5])
def test_gaussian_log_z_and_moments(method, dim):
    # log p~(x) = log c - |x - m|^2 / (2 s^2): log Z = log c + (d/2) log(2 pi s^2); mean m, variance s^2.
    log_c, s = 1.3, 0.5
    m = torch.linspace(-1.0, 1.5, dim, dtype=torch.float64)

    def log_target(x):
        return log_c - (x - m).square().sum(-1) / (2 * s**2)

    runs = _runs(log_target, dim, n_particles=1000, n_temps=50, ref_std=2.0, **METHODS[method])
    _assert_log_z(runs, log_c + 0.5 * dim * math.log(2 * math.pi * s**2), max_std=0.15)
    for r in runs:
        assert r.particles.shape == (1000, dim) and r.log_weights.shape == (1000,)
        assert abs(float(torch.logsumexp(r.log_weights, 0))) < 1e-9  # normalised
        assert 0.3 < r.acceptance < 0.95  # adapted toward 0.574 (MALA) / 0.65 (HMC)
    moments = [_weighted_moments(r) for r in runs]
    # Mean error per run ~ s / sqrt(ESS): ~0.02-0.06 here (AIS keeps uneven weights, so a smaller ESS);
    # the ceilings (a fifth of the target's std and of its variance) only keep the z-test meaningful.
    _assert_close(torch.stack([mu for mu, _ in moments]), m, max_std=0.2 * s, what="mean")
    _assert_close(torch.stack([v for _, v in moments]), torch.full((dim,), s**2), max_std=0.2 * s**2, what="variance")


def test_two_mode_mixture_log_z_and_mode_weights():
    # p~ = c * (N((-4, 0), 0.5^2 I) + N((4, 0), 0.5^2 I)) / 2: log Z = log c, half the mass in each mode.
    # MALA at this scale cannot cross between modes, so the balance comes from the SMC weights alone.
    log_c, s = 0.7, 0.5
    mus = torch.tensor([[-4.0, 0.0], [4.0, 0.0]], dtype=torch.float64)

    def log_target(x):
        comp = -(x[:, None, :] - mus).square().sum(-1) / (2 * s**2) - math.log(2 * math.pi * s**2)
        return log_c + torch.logsumexp(comp, 1) - math.log(2.0)

    runs = _runs(log_target, 2, n_particles=1000, n_temps=50, ref_std=3.0, move="mala")
    _assert_log_z(runs, log_c, max_std=0.15)
    right = torch.stack([r.log_weights.exp()[r.particles[:, 0] > 0].sum() for r in runs])[:, None]
    _assert_close(right, torch.tensor([0.5], dtype=torch.float64), max_std=0.1, what="mass of the right mode")


def test_ess_triggered_resampling():
    # A narrow target far from the reference, few temperatures: the weights degenerate quickly.
    def log_target(x):
        return -(x - 3.0).square().sum(-1) / (2 * 0.2**2)

    def run(threshold):
        return annealed_smc(log_target, 2, 500, 10, ref_std=1.0, ess_threshold=threshold, generator=_gen(0))

    smc, ais, always = run(0.5), run(0.0), run(1.0)
    assert 0 < smc.n_resamples <= 10
    assert ais.n_resamples == 0
    assert always.n_resamples == 10  # ESS < N at every step once the incremental weights are not constant
    assert torch.allclose(always.log_weights, torch.full((500,), -math.log(500), dtype=torch.float64))


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("outside", ["-inf", "nan"])
def test_truncated_gaussian_minus_inf_region(method, outside):
    # Standard normal on the half-plane x0 > 0: log Z = log(2 pi / 2) = log pi. Outside, log p~ is
    # -inf (or NaN, which must be read as -inf); the reference puts half its particles there.
    def log_target(x):
        if outside == "-inf":
            return torch.where(x[:, 0] > 0, -0.5 * x.square().sum(-1), torch.full_like(x[:, 0], -math.inf))
        return -0.5 * x.square().sum(-1) + 0.0 * torch.log(x[:, 0])  # NaN for x0 < 0

    runs = _runs(log_target, 2, n_particles=1000, n_temps=50, ref_std=1.5, **METHODS[method])
    _assert_log_z(runs, math.log(math.pi), max_std=0.15)
    for r in runs:
        assert torch.isfinite(r.particles).all()
        assert (r.particles[r.log_weights > -math.inf, 0] > 0).all()  # weighted particles stay in the support
    # E[x0] on the half-normal: sqrt(2 / pi).
    mean0 = torch.stack([_weighted_moments(r)[0][:1] for r in runs])
    _assert_close(mean0, torch.tensor([math.sqrt(2 / math.pi)], dtype=torch.float64), max_std=0.05, what="E[x0]")


def test_no_support_raises():
    with pytest.raises(RuntimeError, match="no particle"):
        annealed_smc(lambda x: torch.full_like(x[:, 0], -math.inf), 2, 100, 5, generator=_gen(0))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"move": "rwm"}, "move must be one of"),
        ({"n_particles": 0}, "n_particles must be an integer >= 1"),
        ({"n_temps": 0}, "n_temps must be an integer >= 1"),
        ({"dim": 0}, "dim must be an integer >= 1"),
        ({"ess_threshold": -0.1}, r"ess_threshold must be in \[0, 1\]"),
        ({"ess_threshold": 1.5}, r"ess_threshold must be in \[0, 1\]"),
        ({"step_size": 0.0}, "step_size must be finite and > 0"),
    ],
)
def test_bad_input(kwargs, match):
    args = {"log_target": lambda x: -x.square().sum(-1), "dim": 2, "n_particles": 10, "n_temps": 3} | kwargs
    with pytest.raises(ValueError, match=match):
        annealed_smc(**args)


def test_log_target_shape_checked():
    with pytest.raises(ValueError, match=r"must map \[N, dim\] to \[N\]"):
        annealed_smc(lambda x: -x.square(), 2, 10, 3, generator=_gen(0))


@pytest.mark.parametrize("adjusted", [True, False])
def test_mala_local_search_leaves_the_target_invariant(monkeypatch, adjusted):
    """20,000 independent chains started from exact samples of the asymmetric double well e^{-x^4 + 6x^2 + x/2} / Z_1
    (many-well's factor, exact CDF by quadrature) stay exact after 30 adapted MALA moves: the KS distance to the exact
    CDF stays below 1.63 / sqrt(n), the 1% point of Kolmogorov's law (seeded). Without the Metropolis-Hastings correction
    (every proposal accepted: the unadjusted Langevin algorithm, at the same steps) the chains drift off the target and the
    same test fails, so it has the power to see a kernel that is not invariant."""
    from gflownet_measure.environments.sde_targets import ManyWell

    well = ManyWell(dim=2)
    gen = torch.Generator().manual_seed(7)
    x = well.sample_well((20000, 1), gen)
    if not adjusted:
        monkeypatch.setattr(smc, "_accept", lambda log_alpha, lt_y, generator: torch.ones_like(log_alpha, dtype=torch.bool))
    r = mala_chain(lambda z: ManyWell.well(z[:, 0]), x, 30, step_size=0.3, adapt=adjusted, generator=gen)
    from gflownet_measure.metrics import ks_distance
    ks = ks_distance(r.x[:, 0], well.cdf0)
    assert (ks < 1.63 / math.sqrt(len(x))) == adjusted, ks
    if adjusted:
        assert 0.3 < r.acceptance < 0.9 and r.log_target.shape == (20000,)
