"""BCD Nets (Cundy, Grover & Ermon 2021, "BCD Nets: Scalable Variational Approaches for Bayesian Causal Discovery"):
a variational posterior over linear-Gaussian SEMs, the "BCD Nets" baseline of Deleu et al. 2023 (JSP-GFN), Table D.1.
Written from the paper, with the settings its public code uses where the paper leaves them open; no copy of the paper
was in reach to check its equation numbers, so the formulas are written out in full below instead.

Model. A linear SEM :math:`x_j = \\sum_i W_{ij} x_i + \\epsilon_j`,
:math:`\\epsilon_j \\sim \\mathcal N(0, \\sigma_j^2)`, with the weighted adjacency factored as

.. math:: W = P^\\top L P,

:math:`L` strictly lower triangular (``L[a, b]``, ``a > b``: the weight of the edge from the node at position ``a``
to the node at position ``b``) and :math:`P` a permutation matrix (``P[a, i] = 1``: node ``i`` at position
``a``), so that :math:`W_{ij} = L_{\\pi(i) \\pi(j)}` and every :math:`W` is acyclic. ``W[i, j]`` is the weight of
``i -> j``, this project's layout. The log-likelihood of the rows :math:`X [N, d]` (the Jacobian
:math:`|\\det(I - W)|` is 1 on a DAG), from the Gram matrix :math:`C = X^\\top X`:

.. math:: \\log p(X \\mid P, L, \\Sigma) = -\\tfrac12 \\sum_j \\big[((I - W)^\\top C (I - W))_{jj} / \\sigma_j^2 + N \\log(2\\pi\\sigma_j^2)\\big].

Priors: uniform :math:`p(P) = 1/d!`; on each entry of :math:`L` the horseshoe (Carvalho et al. 2010),
whose marginal density is :math:`p(w) = (2\\pi^3)^{-1/2} \\tau^{-1} e^{z} E_1(z)`, :math:`z = w^2 / (2\\tau^2)`
(:func:`horseshoe_log_prob`), with the global scale of the public code,
:math:`\\tau = \\tfrac{1}{\\sqrt N} \\tfrac{p}{1 - p}`, :math:`p = 2k/(d - 1)` the edge probability of ER-k
(Piironen & Vehtari 2017's :math:`p_0 / (D - p_0)`; :math:`\\tau = 1/(2d)` where :math:`p \\ge 1`: 0.1 at
``d = 5``, ``N = 100``, ``k = 1``); :math:`\\log \\sigma_j \\sim \\mathcal N(0, 3^2)`.

Variational family: :math:`q_\\phi(L, \\Sigma) q_\\phi(P \\mid L, \\Sigma)`, a mean-field Gaussian over
the :math:`d(d-1)/2` entries of :math:`L` and :math:`\\log\\sigma` (one shared :math:`\\sigma` with ``equal_noise``, as
in the paper's equal-variance experiments; ``d`` otherwise), and a Gumbel-Matching distribution over :math:`P` whose
logits :math:`\\theta = h_\\phi(L, \\Sigma)` come from an MLP (2 hidden layers of 128 GELU units, squashed to
:math:`10 \\tanh(\\cdot / 10)`), sampled by the Hungarian algorithm with the Gumbel-Sinkhorn straight-through gradient
at temperature ``tau`` (:mod:`.permutations`). The paper's normalising-flow option for :math:`q(L, \\Sigma)` is not
implemented.

Objective: the ELBO

.. math:: \\mathcal L(\\phi) = E_{q(L, \\Sigma)} E_{q(P | L, \\Sigma)} \\big[\\log p(X \\mid P, L, \\Sigma) + \\log p(L) + \\log p(\\Sigma)
          + \\log p(P) - \\log q(P \\mid L, \\Sigma)\\big] + H[q(L, \\Sigma)],

with :math:`\\log q(P \\mid \\theta) \\approx \\langle\\theta, P\\rangle - \\log\\operatorname{perm}(e^\\theta)` (exact
permanent here, :func:`~.permutations.log_permanent`, hence ``d <= 7``), the Gaussian entropy in closed form, and a
``batch_size``-sample reparametrised estimate per step, maximised by Adam at ``lr``. As in the public code the loss is
:math:`-\\mathcal L / \\tau + \\tfrac12 \\lVert \\phi_P \\rVert^2` (an L2 penalty on the MLP's weights).

Graphs. Every :math:`W_{ij}` with :math:`\\pi(i) > \\pi(j)` is nonzero almost surely, so a sample's graph is
:math:`G_{ij} = [|W_{ij}| > \\text{threshold}]`, the paper's 0.3 (its SHD and AUROC are computed with the same
threshold): an edge is a weight that matters at the data's scale, and the horseshoe puts most of the mass of
a null weight well below it. The graph of a DAG's :math:`W` is a DAG. ``thetas`` are :math:`W \\odot G`.

Graph prior, against JSP-GFN's. JSP-GFN's ``LinearGaussian`` puts a uniform prior on DAGs and
:math:`\\mathcal N(0, \\sigma_0^2)` on each active weight, with a known noise variance. BCD Nets' prior on graphs is
implied: :math:`P(G) = \\sum_{\\pi} \\frac{1}{d!} P_{\\mathrm{hs}}(|L| > 0.3 \\text{ on } G\\text{'s edges}, \\le 0.3
\\text{ elsewhere} \\mid \\pi)`, so a graph gets prior mass in proportion to its number of topological orders (the
empty graph is consistent with all :math:`d!`, a Hamiltonian path with one) times the horseshoe's odds of its weights
clearing the threshold: sparse graphs are favoured, and a weak edge (:math:`|w| \\le 0.3`, which the exact posterior of
JSP-GFN's model does resolve at :math:`\\sigma = 0.1`) is no edge at all; and it learns the noise variance.

Cost on one CPU thread, on a machine whose 2 cores were shared with other jobs: 15-17 ms per step at ``d = 3`` and
``d = 5`` with the defaults (the backward pass through the Sinkhorn sweeps is most of it), so the paper's 20,000
steps took 340-350 s per dataset at ``d = 5`` (docs/results.md, section 4, 'BCD Nets beside the exact posterior').
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch
from scipy.special import exp1
from torch import Tensor, nn

from gflownet_measure.jsp_gfn.bayesnets.dags import is_dag
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian

from .permutations import all_permutations, gumbel_noise, gumbel_permutations, hungarian, log_permanent
from .samples import BaselineSamples, check_counts

__all__ = ["horseshoe_scale", "horseshoe_log_prob", "bcd_nets"]

LOG_SIGMA_PRIOR_STD = 3.0  # std of the N(0, s^2) prior on each log sigma (the public code's)
LOGIT_BOUND = 10.0  # the permutation logits are squashed to LOGIT_BOUND * tanh(. / LOGIT_BOUND)
HIDDEN = 128  # units of each of the 2 hidden layers of h_phi


class _LogScaledE1(torch.autograd.Function):
    """:math:`f(z) = \\log(e^z E_1(z))`, elementwise for ``z >= 0``, with :math:`f'(z) = 1 - 1 / (z e^{f(z)})`.

    ``scipy.special.exp1`` underflows near :math:`z = 700`; from :math:`z = 500` on, the asymptotic series
    :math:`e^z E_1(z) \\approx z^{-1}(1 - 1/z + 2/z^2 - 6/z^3 + 24/z^4)` is exact to about :math:`120 / z^5 < 10^{-11}`.
    """

    @staticmethod
    def forward(ctx, z: Tensor) -> Tensor:
        zn = z.detach().cpu().double().numpy()
        small, big = zn.clip(max=500.0), zn.clip(min=500.0)
        with np.errstate(divide="ignore"):  # z = 0: E_1 = inf, f = inf
            series = np.where(zn < 500, small + np.log(exp1(small)), np.log((1 - 1 / big + 2 / big**2 - 6 / big**3 + 24 / big**4) / big))
        f = torch.from_numpy(series).to(z)
        ctx.save_for_backward(z, f)
        return f

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:
        z, f = ctx.saved_tensors
        return grad * (1 - 1 / (z * f.exp()))


def horseshoe_scale(n: int, d: int, edges_per_node: float) -> float:
    """The horseshoe's global scale :math:`\\tau = \\frac{1}{\\sqrt N} \\frac{p}{1-p}`, :math:`p = 2k / (d-1)`; :math:`1/(2d)` where :math:`p \\ge 1` or ``d = 1`` (module docstring)."""
    p = 2 * edges_per_node / (d - 1) if d > 1 else math.inf
    return p / (1 - p) / math.sqrt(n) if 0 < p < 1 else 1 / (2 * d)


def horseshoe_log_prob(w: Tensor, tau: float) -> Tensor:
    """:math:`\\log p(w) = \\log(e^z E_1(z)) - \\log\\tau - \\tfrac12 \\log(2\\pi^3)`, :math:`z = w^2/(2\\tau^2)`: the horseshoe's exact marginal log-density (Carvalho et al. 2010), elementwise; :math:`+\\infty` at 0."""
    return _LogScaledE1.apply(w.square() / (2 * tau**2)) - math.log(tau) - 0.5 * math.log(2 * math.pi**3)


class _Posterior(nn.Module):
    """:math:`q_\\phi(L, \\Sigma)` (Gaussian over ``[l, log sigma]``) and the MLP :math:`h_\\phi` of :math:`q_\\phi(P | L, \\Sigma)`."""

    def __init__(self, d: int, n_noise: int):
        super().__init__()
        self.d, self.n_l = d, d * (d - 1) // 2
        width = self.n_l + n_noise
        self.mean = nn.Parameter(torch.zeros(width, dtype=torch.float64))
        self.log_std = nn.Parameter(torch.full((width,), -1.0, dtype=torch.float64))  # the public code's start
        self.h = nn.Sequential(nn.Linear(width, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, HIDDEN), nn.GELU(), nn.Linear(HIDDEN, d * d)).double()

    def sample_z(self, n: int, generator: torch.Generator) -> Tensor:
        """``[n, width]``: reparametrised draws of ``[l, log sigma]``."""
        eps = torch.randn((n, len(self.mean)), dtype=torch.float64, generator=generator)
        return self.mean + self.log_std.exp() * eps

    def entropy(self) -> Tensor:
        """:math:`H[q(L, \\Sigma)] = \\sum (\\log s + \\tfrac12 \\log 2\\pi e)`."""
        return (self.log_std + 0.5 * math.log(2 * math.pi * math.e)).sum()

    def logits(self, z: Tensor) -> Tensor:
        """``[n, d, d]``: :math:`\\theta = 10 \\tanh(h_\\phi(z) / 10)`, rows positions, columns nodes."""
        return LOGIT_BOUND * torch.tanh(self.h(z).view(-1, self.d, self.d) / LOGIT_BOUND)

    def weights(self, z: Tensor, P: Tensor) -> Tensor:
        """``[n, d, d]``: :math:`W = P^\\top L P` from the ``l`` part of ``z`` and permutations ``P``."""
        L = torch.zeros(len(z), self.d, self.d, dtype=z.dtype)
        rows, cols = torch.tril_indices(self.d, self.d, -1)
        L = L.index_put((torch.arange(len(z))[:, None], rows, cols), z[:, : self.n_l])
        return P.mT @ L @ P


def _log_likelihood(W: Tensor, log_sigma: Tensor, gram: Tensor, n: int) -> Tensor:
    """``[B]``: :math:`\\log p(X | W, \\Sigma)` from :math:`C = X^\\top X` (module docstring); ``log_sigma [B, 1 or d]``."""
    eye = torch.eye(W.shape[-1], dtype=W.dtype)
    resid = torch.diagonal((eye - W).mT @ gram @ (eye - W), dim1=-2, dim2=-1)  # [B, d]: sum_n (x_nj - (x_n W)_j)^2
    log_var = (2 * log_sigma).expand_as(resid)
    return -0.5 * (resid / log_var.exp() + n * (math.log(2 * math.pi) + log_var)).sum(-1)


def _elbo(q: _Posterior, gram: Tensor, n: int, hs_tau: float, tau: float, batch_size: int, perms: Tensor, generator: torch.Generator) -> Tensor:
    """A ``batch_size``-sample estimate of the ELBO (eq. 4, module docstring)."""
    z = q.sample_z(batch_size, generator)
    logits = q.logits(z)
    P = gumbel_permutations(logits, tau, generator)
    lower, log_sigma = z[:, : q.n_l], z[:, q.n_l :]
    log_q_p = (logits * P.detach()).sum((-2, -1)) - log_permanent(logits, perms)
    log_prior = horseshoe_log_prob(lower, hs_tau).sum(-1) - 0.5 * (log_sigma / LOG_SIGMA_PRIOR_STD).square().sum(-1) - math.lgamma(q.d + 1)
    return (_log_likelihood(q.weights(z, P), log_sigma, gram, n) + log_prior - log_q_p).mean() + q.entropy()


def bcd_nets(
    model: LinearGaussian,
    n_samples: int = 1000,
    seed: int = 0,
    steps: int = 20000,
    batch_size: int = 64,
    lr: float = 1e-3,
    tau: float = 0.2,
    threshold: float = 0.3,
    equal_noise: bool = True,
    edges_per_node: float = 1.0,
) -> BaselineSamples:
    """BCD Nets trained for ``steps`` Adam steps on ``model.data``, then ``n_samples`` draws of :math:`(G, W)` (module docstring).

    Settings, with the paper's (public code's) defaults: ``steps`` 20,000; ``batch_size`` 64 Monte Carlo samples per
    ELBO estimate; ``lr`` 1e-3 (the paper's AdaBelief, Adam here); ``tau`` 0.2, the Gumbel-Sinkhorn temperature of the
    backward pass; ``threshold`` 0.3 on :math:`|W_{ij}|` for an edge; ``equal_noise``: one noise variance shared by all
    nodes (the equal-variance experiments); ``edges_per_node`` :math:`k` sets the horseshoe scale
    (:func:`horseshoe_scale`). Only ``model.data`` is read: BCD Nets has its own priors and learns the noise.

    Returns:
        :class:`~gflownet_measure.jsp_gfn.baselines.samples.BaselineSamples` with ``graphs [n_samples, d, d]`` bool (acyclic by construction),
        ``thetas [n_samples, d * d]`` float64 (:math:`W \\odot G`, flat row-major: ``theta[k, i * d + j]`` is the weight
        of ``i -> j``), ``discarded = 0``. Deterministic given ``seed``.
    """
    if not isinstance(model, LinearGaussian):
        raise ValueError(f"bcd_nets: model must be a LinearGaussian (BCD Nets is a linear-Gaussian SEM); got {type(model).__name__}")
    check_counts("bcd_nets", n_samples=n_samples, steps=steps, batch_size=batch_size)
    for name, real in (("lr", lr), ("tau", tau), ("threshold", threshold)):
        if not (math.isfinite(real) and real > 0):
            raise ValueError(f"bcd_nets: {name} must be finite and > 0; got {real!r}")
    start = time.perf_counter()
    x = model.data.double()
    n, d = x.shape
    perms = all_permutations(d)
    gram = x.T @ x
    hs_tau = horseshoe_scale(n, d, edges_per_node)
    generator = torch.Generator().manual_seed(seed)
    with torch.random.fork_rng():  # the MLP's initial weights from seed, the global generator left as it was
        torch.manual_seed(seed)
        q = _Posterior(d, 1 if equal_noise else d)
    optimizer = torch.optim.Adam(q.parameters(), lr=lr)
    for _ in range(int(steps)):
        loss = -_elbo(q, gram, n, hs_tau, tau, int(batch_size), perms, generator) / tau + 0.5 * sum(p.square().sum() for p in q.h.parameters())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    with torch.no_grad():
        z = q.sample_z(int(n_samples), generator)
        logits = q.logits(z)
        W = q.weights(z, hungarian(logits + gumbel_noise(logits, generator)))
    graphs = W.abs() > threshold
    if not is_dag(graphs).all():
        raise RuntimeError("bcd_nets: a thresholded W has a cycle; W = P^T L P should be acyclic")
    thetas = torch.where(graphs, W, 0.0).flatten(1)
    return BaselineSamples(graphs, thetas, time.perf_counter() - start, 0)
