"""Evaluation metrics: distances to exact distributions and log Z estimates."""

from __future__ import annotations

import math

import torch
from torch import Tensor

__all__ = [
    "l1_distance",
    "total_variation",
    "expected_sample_tv",
    "log_z_bounds",
    "log_weights",
    "log_weight_summary",
    "grid_jsd",
    "ks_distance",
    "grid_kl",
    "kde_log_density",
    "periodic_kde_log_density",
    "periodic_kde_jsd",
    "rejection_sample",
]


def l1_distance(p: Tensor, q: Tensor) -> float:
    """:math:`\\sum_x |p(x) - q(x)|` between two probability vectors (in ``[0, 2]``)."""
    return float((p.double() - q.double()).abs().sum())


def total_variation(p: Tensor, q: Tensor) -> float:
    """:math:`\\mathrm{TV}(p, q) = \\tfrac12 \\sum_k |p_k - q_k| \\in [0, 1]` between two probability vectors: the largest difference of the probabilities of one event."""
    return 0.5 * l1_distance(p, q)


def expected_sample_tv(masses: Tensor, n: int) -> float:
    """:math:`\\mathbb E\\, \\mathrm{TV}(\\hat p, p)` for the frequencies :math:`\\hat p` of ``n`` independent draws from the categorical law ``p = masses [K]``.

    What an exact sampler of ``n`` points scores on :func:`total_variation`, computed exactly: by linearity it is
    :math:`\\tfrac{1}{2n} \\sum_k \\mathbb E|N_k - n p_k|`, and each count :math:`N_k` is Binomial(n, p_k), whose mean absolute
    deviation is De Moivre's

    .. math:: \\mathbb E|N - np| = 2\\, m \\binom{n}{m} p^m (1 - p)^{n - m + 1},\\qquad m = \\lfloor np \\rfloor + 1

    (evaluated in log space; a mass of 0 or 1 deviates by 0). About :math:`\\tfrac12 \\sum_k \\sqrt{2 p_k (1 - p_k) / (\\pi n)}` for large ``n``.
    """
    total = 0.0
    for p in masses.double().tolist():
        if 0.0 < p < 1.0:
            m = math.floor(n * p) + 1
            log_choose = math.lgamma(n + 1) - math.lgamma(m + 1) - math.lgamma(n - m + 1)
            total += 2 * m * math.exp(log_choose + m * math.log(p) + (n - m + 1) * math.log1p(-p))
    return total / (2 * n)


def log_weights(log_R: Tensor, log_pf: Tensor, log_pb: Tensor, mask: Tensor) -> Tensor:
    """:math:`w = \\log R(x) + \\sum_t \\log P_B - \\sum_t \\log P_F` per trajectory ``[B]`` (Lahlou et al. 2023, section 4.2)."""
    return log_R + ((log_pb - log_pf) * mask).sum(0)


def ks_distance(x: Tensor, cdf) -> float:
    """The Kolmogorov-Smirnov distance :math:`\\sup_t |\\hat F_n(t) - F(t)|` of the samples ``x [n]`` to the exact CDF ``cdf``.

    With :math:`x_{(1)} \\le \\dots \\le x_{(n)}`: :math:`\\max_i \\max\\big(i/n - F(x_{(i)}),\\, F(x_{(i)}) - (i-1)/n\\big)`.
    An exact sampler scores about :math:`0.87/\\sqrt n` on average (Kolmogorov's law; its 95% point is :math:`1.36/\\sqrt n`).
    """
    xs = torch.sort(x.double().flatten()).values
    n = len(xs)
    F = cdf(xs).double()
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return float(torch.maximum(i / n - F, F - (i - 1) / n).max())


def log_z_bounds(w: Tensor) -> tuple[float, float]:
    """``(mean w, log-mean-exp w)``: the evidence lower bound and the importance-weighted estimate of :math:`\\log Z`.

    By Jensen both are below :math:`\\log Z` in expectation; the second is consistent as ``K`` grows.
    """
    w = w.double()
    return float(w.mean()), float(torch.logsumexp(w, 0) - math.log(len(w)))


def log_weight_summary(w: Tensor) -> dict[str, float]:
    """How far a sampler is from balance, from the log-weights ``w [K]`` of :func:`log_weights` of ``K`` of its own trajectories:

    .. math:: \\mathrm{ELBO} = \\bar w, \\quad \\mathrm{sd}(w), \\quad
       \\mathrm{ESS} = \\frac{(\\sum_k e^{w_k})^2}{K \\sum_k e^{2 w_k}}, \\quad
       \\log \\hat Z = \\log \\frac1K \\sum_k e^{w_k}

    (Kish's effective sample size as a fraction of ``K``, 1 for a perfect sampler whose ``w`` is the constant
    :math:`\\log Z`; :math:`\\log Z - \\mathrm{ELBO}` is the KL divergence of the sampler's path measure from the
    target's). Keys ``elbo``, ``log_weight_sd``, ``ess``, ``iw_log_Z``.
    """
    w = w.double()
    elbo, iw = log_z_bounds(w)
    ess = float(torch.exp(2 * torch.logsumexp(w, 0) - torch.logsumexp(2 * w, 0))) / len(w)
    return {"elbo": elbo, "log_weight_sd": float(w.std()) if len(w) > 1 else 0.0, "ess": ess, "iw_log_Z": iw}


def grid_jsd(log_p: Tensor, log_q: Tensor) -> float:
    """Jensen-Shannon divergence (nats) between two unnormalised log-densities on the same grid ``[G]``.

    .. math:: p = \\mathrm{softmax}(\\log p),\\ q = \\mathrm{softmax}(\\log q),\\ m = \\tfrac12(p + q),\\quad
       \\mathrm{JSD} = \\tfrac12 \\mathrm{KL}(p\\|m) + \\tfrac12 \\mathrm{KL}(q\\|m) \\in [0, \\log 2]

    (the evaluation of Lahlou et al. 2023, section 4.1). Grid points where a density is zero (-inf) add nothing to its KL.
    """
    lp, lq = torch.log_softmax(log_p.double(), 0), torch.log_softmax(log_q.double(), 0)
    lm = torch.logaddexp(lp, lq) - math.log(2.0)

    def kl(la: Tensor) -> Tensor:
        return torch.where(la > -math.inf, la.exp() * (la - lm), torch.zeros_like(la)).sum()

    return float(0.5 * kl(lp) + 0.5 * kl(lq))


def grid_kl(log_p: Tensor, log_q: Tensor) -> float:
    """:math:`\\mathrm{KL}(p \\| q) = \\sum_g p_g \\log(p_g / q_g)` (nats) between two unnormalised log-densities on the same grid ``[G]``,
    each normalised over the grid; a sum over the grid (the public torus code reports a mean, :math:`1/G` of this)."""
    lp, lq = torch.log_softmax(log_p.double(), 0), torch.log_softmax(log_q.double(), 0)
    return float(torch.where(lp > -math.inf, lp.exp() * (lp - lq), torch.zeros_like(lp)).sum())


def periodic_kde_log_density(samples: Tensor, points: Tensor, bandwidth: float, period: float = 2 * math.pi, chunk: int = 512) -> Tensor:
    """Gaussian-kernel density estimate on a torus, up to a constant, ``[G]`` at ``points [G, n]`` from ``samples [K, n]``.

    .. math:: \\log \\hat p(y) = \\log \\sum_{k=1}^K \\exp\\Big(-\\frac{\\|d(y, x_k)\\|^2}{2h^2}\\Big) + \\text{const},\\qquad
       d_i = \\big((y_i - x_{ki} + T/2) \\bmod T\\big) - T/2

    with :math:`d` the shortest signed difference around each circle of circumference ``period`` :math:`T` (the kernel of the
    nearest image; the others add :math:`e^{-(T/2)^2/(2h^2)}`, below 1e-200 at :math:`h = 0.1`, :math:`T = 2\\pi`). The public
    torus code tiles the samples 3 x 3 instead, which is the same sum over the nearest images.
    """
    x = samples.double()
    out = []
    for y in points.double().split(chunk):
        d = torch.remainder(y[:, None, :] - x[None] + period / 2, period) - period / 2  # [chunk, K, n]
        out.append(torch.logsumexp(-d.square().sum(-1) / (2 * bandwidth**2), 1))
    return torch.cat(out)


def periodic_kde_jsd(samples: Tensor, reference: Tensor, points: Tensor, bandwidth: float, period: float = 2 * math.pi) -> float:
    """JSD (nats) between the periodic Gaussian KDEs of two sample sets, each normalised over the grid ``points [G, n]``.

    .. math:: \\hat p = \\mathrm{KDE}_h(x_{1..K}),\\ \\hat q = \\mathrm{KDE}_h(y_{1..M}) \\text{ at the grid},\\quad
       \\mathrm{JSD}(\\hat p / \\textstyle\\sum \\hat p,\\ \\hat q / \\textstyle\\sum \\hat q) \\in [0, \\log 2]

    (:func:`periodic_kde_log_density`, then :func:`grid_jsd`): the torus metric of Lahlou et al. 2023, appendix C.1, with
    ``reference`` drawn from the target. Unlike a KDE against the exact density it is not zero for a perfect sampler: both
    KDEs carry sampling noise, so its floor (two independent exact sample sets) shrinks with the sample sizes.
    """
    return grid_jsd(periodic_kde_log_density(samples, points, bandwidth, period), periodic_kde_log_density(reference, points, bandwidth, period))


def kde_log_density(samples: Tensor, points: Tensor, bandwidth: float, chunk: int = 512) -> Tensor:
    """Exponential-kernel density estimate up to a constant, ``[G]`` at ``points [G, D]`` from ``samples [K, D]``.

    .. math:: \\log \\hat p(y) = \\log \\sum_{k=1}^K \\exp(-\\|y - x_k\\|_2 / h) + \\text{const}

    The normalising constant (:math:`K` times the kernel's integral) is omitted: the grid metrics
    renormalise over their grid. Evaluated in chunks of ``chunk`` points (a ``[chunk, K]`` distance matrix).
    """
    x = samples.float()  # float32 matrix-product distances: ~1e-4 absolute error near zero distance, 3e-5 in log p (measured)
    out = [torch.logsumexp(-torch.cdist(y, x, compute_mode="use_mm_for_euclid_dist") / bandwidth, 1) for y in points.float().split(chunk)]
    return torch.cat(out).double()


def rejection_sample(log_density, low: Tensor, high: Tensor, log_bound: float, n: int, generator=None) -> Tensor:
    """``n`` exact draws ``[n, D]`` from the density proportional to :math:`e^{\\log f}` on the box ``[low, high]``.

    Uniform proposals, accepted with probability :math:`f(x) / M`, :math:`\\log M` = ``log_bound``.
    Raises if a proposal exceeds the bound (the sampler would then target :math:`\\min(f, M)`).
    """
    low, high = low.double(), high.double()
    out, have = [], 0
    while have < n:
        x = low + (high - low) * torch.rand(2 * n, len(low), dtype=torch.float64, generator=generator)
        log_f = log_density(x).double()
        if (log_f > log_bound + 1e-12).any():
            raise ValueError(f"rejection_sample: log f reaches {float(log_f.max()):.6g} above the bound log M = {log_bound:.6g}")
        keep = torch.log(torch.rand(len(x), dtype=torch.float64, generator=generator)) < log_f - log_bound
        out.append(x[keep])
        have += int(keep.sum())
    return torch.cat(out)[:n]
