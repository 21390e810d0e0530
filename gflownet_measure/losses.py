"""GFlowNet objectives as pure functions of log-densities (Lahlou et al. 2023, Definition 7).

Every quantity is already a log-density w.r.t. the graph's reference measures (log F w.r.t. nu,
log P_F w.r.t. kappa, log P_B w.r.t. kappa_b, log R w.r.t. kappa_b(sink, .)), so the same arithmetic
serves discrete, continuous and hybrid spaces. Shapes are time-major: ``[T, B]`` per transition,
``[T + 1, B]`` per position. The flow at the position of the sink is ``log R(x)`` (and the
backward density of the step into the sink is 0 there), so the terminal condition
:math:`F(x) P_F(\\bot | x) = R(x)` is the last detailed-balance residual.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "PENALTIES",
    "square",
    "huber",
    "tb_residual",
    "db_residuals",
    "subtb_residuals",
    "subtb_loss",
    "fm_residual",
    "rm_residual",
    "masked_mean",
    "undirected_subtb_residual",
    "length2_penalty",
    "reverse_kl",
    "reverse_kl_iw",
    "forward_kl_iw",
    "neg_elbo",
    "tb_consistency",
]


def square(r: Tensor) -> Tensor:
    """:math:`g(r) = r^2`."""
    return r.square()


def huber(r: Tensor, delta: float = 1.0) -> Tensor:
    """:math:`g(r) = r^2/2` for :math:`|r| \\le \\delta`, :math:`\\delta(|r| - \\delta/2)` beyond (JSP-GFN eq. 8)."""
    return F.huber_loss(r, torch.zeros_like(r), reduction="none", delta=delta)


PENALTIES: dict[str, Callable[[Tensor], Tensor]] = {"square": square, "huber": huber}


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``x`` over entries where ``mask`` holds."""
    return (x * mask).sum() / mask.sum().clamp(min=1)


def tb_residual(log_Z: Tensor, log_pf: Tensor, log_pb: Tensor, log_R: Tensor, mask: Tensor) -> Tensor:
    """Trajectory balance (Malkin et al. 2022; Lahlou et al. 2023 eq. 19), ``[B]``.

    .. math:: \\delta_{TB}(\\tau) = \\log Z + \\sum_t \\log P_F(s_{t+1}|s_t) - \\sum_t \\log P_B(s_t|s_{t+1}) - \\log R(x)
    """
    return log_Z + ((log_pf - log_pb) * mask).sum(0) - log_R


def db_residuals(log_F: Tensor, log_pf: Tensor, log_pb: Tensor) -> Tensor:
    """Detailed balance (Bengio et al. 2023; Lahlou et al. 2023 eq. 18), ``[T, B]``.

    .. math:: \\delta_{DB}(s_t, s_{t+1}) = \\log F(s_t) + \\log P_F(s_{t+1}|s_t) - \\log F(s_{t+1}) - \\log P_B(s_t|s_{t+1})

    ``log_F [T + 1, B]`` holds :math:`\\log Z` at position 0 and :math:`\\log R(x)` at the sink.
    """
    return log_F[:-1] + log_pf - log_F[1:] - log_pb


def subtb_residuals(log_F: Tensor, log_pf: Tensor, log_pb: Tensor) -> Tensor:
    """Sub-trajectory balance residuals for all position pairs ``i < j``, ``[T + 1, T + 1, B]``.

    .. math:: \\delta_{ij} = \\log F(s_i) + \\sum_{t=i}^{j-1} \\big(\\log P_F(s_{t+1}|s_t) - \\log P_B(s_t|s_{t+1})\\big) - \\log F(s_j)

    (Madan et al. 2023). Entry ``[i, j]`` is meaningful for ``i < j <= n`` (``n``: sink position).
    """
    c = torch.cat([torch.zeros_like(log_pf[:1]), torch.cumsum(log_pf - log_pb, 0)], 0)  # [T + 1, B]
    return log_F[:, None] + c[None, :] - c[:, None] - log_F[None, :]


def subtb_loss(log_F: Tensor, log_pf: Tensor, log_pb: Tensor, length: Tensor, lam: float, penalty=square) -> Tensor:
    """SubTB(lambda): per trajectory, :math:`\\sum_{i<j} \\lambda^{j-i} g(\\delta_{ij}) / \\sum_{i<j} \\lambda^{j-i}`, batch mean.

    ``length [B]`` is the sink's position ``n``; pairs ``0 <= i < j <= n`` count. The weights are taken as
    :math:`\\lambda^{j-i-1}` (the same ratio), so a small lambda does not underflow to 0 / 0 and ``lam = 0`` is the
    limit lambda -> 0: the mean of the one-step (DB) terms.
    """
    T1 = log_F.shape[0]
    pos = torch.arange(T1, device=log_F.device)
    gap = (pos[None, :] - pos[:, None]).to(log_F.dtype)  # [T+1, T+1]: j - i
    valid = (gap[..., None] > 0) & (pos[None, :, None] <= length[None, None, :])  # [T+1, T+1, B]
    w = torch.where(valid, torch.as_tensor(lam, dtype=log_F.dtype) ** (gap[..., None] - 1), torch.zeros_like(gap[..., None]))
    r = subtb_residuals(log_F, log_pf, log_pb)
    per_traj = (w * penalty(torch.where(valid, r, torch.zeros_like(r)))).sum((0, 1)) / w.sum((0, 1))
    return per_traj.mean()


def fm_residual(log_in: Tensor, in_mask: Tensor, log_out: Tensor, out_mask: Tensor) -> Tensor:
    """Flow matching at a state (Bengio et al. 2021; Lahlou et al. 2023 eq. 17), ``[B]``.

    .. math:: \\delta_{FM}(s) = \\log \\sum_{p} F(p \\to s) - \\log \\sum_{c} F(s \\to c)

    over the atoms of :math:`\\kappa_b(s,\\cdot)` (``log_in [B, P]``) and of :math:`\\kappa(s,\\cdot)`
    (``log_out [B, C]``), the sink included among the children.
    """
    ninf = torch.tensor(float("-inf"), dtype=log_in.dtype, device=log_in.device)
    return torch.logsumexp(torch.where(in_mask, log_in, ninf), 1) - torch.logsumexp(torch.where(out_mask, log_out, ninf), 1)


def rm_residual(log_flow_to_sink: Tensor, log_R: Tensor) -> Tensor:
    """Reward matching at a terminable state: :math:`\\log F(x \\to \\bot) - \\log R(x)`, ``[B]``."""
    return log_flow_to_sink - log_R


def undirected_subtb_residual(
    log_R: Tensor, log_pf_stop: Tensor, log_pf_edge: Tensor, log_pb_edge: Tensor, log_R_next: Tensor, log_pf_stop_next: Tensor
) -> Tensor:
    """Sub-trajectory balance along the undirected path :math:`x \\leftarrow s \\to s' \\to x'` (Deleu et al. 2023, eq. 6).

    .. math:: \\delta = \\log R(x') - \\log R(x) + \\log P_B(s | s') + \\log P_F(x | s) - \\log P_F(s' | s) - \\log P_F(x' | s')

    for terminal states :math:`x, x'` whose only parents are :math:`s, s'` (so :math:`P_B(s | x) = 1`) and
    whose flows are their rewards. It is the SubTB residual of the two trajectories
    :math:`s_0 \\leadsto s \\to x` and :math:`s_0 \\leadsto s \\to s' \\to x'` with :math:`F(s)` eliminated, so it
    needs no state flow; it is zero for all pairs iff the policy samples :math:`R` (Theorem 3.1). Broadcasts:
    e.g. ``log_R [S, 1, B]`` against ``log_R_next [1, S, B]`` gives all ``S x S`` pairs per transition.
    """
    return log_R_next - log_R + log_pb_edge + log_pf_stop - log_pf_edge - log_pf_stop_next


def length2_penalty(grad: Tensor, n_active: Tensor) -> Tensor:
    """The differential form of SubTB on :math:`(G, \\#) \\to (G, \\theta)` (Deleu et al. 2023, eq. C.21), ``[B]``.

    .. math:: \\mathrm{pen}(G) = \\frac{1}{S \\max(k_G, 1)} \\sum_{s=1}^S \\big\\|\\nabla_\\theta[\\log R(G, \\theta_s) - \\log P_\\phi(\\theta_s | G)]\\big\\|^2

    ``grad [S, B, ...]`` holds the gradients (zero at inactive coordinates), ``n_active [B]`` is :math:`k_G`.
    The ``max`` guards the empty graph, where the public JSP-GFN code divides 0 by 0 (docs/references.md, 'Loss (eq. 8)').
    """
    S = grad.shape[0]
    return grad.square().flatten(2).sum((0, 2)) / (S * n_active.clamp(min=1).to(grad.dtype))


# --- Divergences between path measures (Lahlou et al. 2023, section 4.2, Table 2) --------------------------
# With w(tau) = log R(x) + sum_t log P_B - sum_t log P_F (``[B]``; see metrics.log_weights) and the target
# path measure P*(tau) = R(x) P_B(tau | x) / Z, KL(P_F || P*) = E_{P_F}[-w] + log Z.


def reverse_kl(log_w: Tensor) -> Tensor:
    """:math:`\\mathrm{KL}(P_F \\| P^*) - \\log Z \\approx -\\frac1B \\sum_b w_b` on *reparametrised* trajectories of :math:`P_F`.

    The gradient flows through the sampled states (path-wise, as PIS, Zhang & Chen 2022).
    """
    return -log_w.mean()


def reverse_kl_iw(log_pf: Tensor, log_q: Tensor, log_w: Tensor) -> Tensor:
    """A surrogate whose gradient is the importance-weighted score-function gradient of :math:`\\mathrm{KL}(P_F \\| P^*)`.

    .. math:: \\nabla_\\theta \\mathrm{KL} = \\mathbb E_q\\Big[\\tfrac{P_F}{q} (-w - b)\\, \\nabla_\\theta \\log P_F\\Big]
       \\approx \\sum_b \\hat\\rho_b (-w_b - b)\\, \\nabla_\\theta \\log P_F(\\tau_b)

    for trajectories from a behaviour policy ``q``; :math:`\\hat\\rho = \\mathrm{softmax}(\\log P_F - \\log q)`
    (self-normalised) and the baseline :math:`b = -\\sum_b \\hat\\rho_b w_b` (valid since
    :math:`\\mathbb E_{P_F}[\\nabla \\log P_F] = 0`). ``log_pf`` and ``log_q`` are per-trajectory sums ``[B]``.
    """
    rho = torch.softmax((log_pf - log_q).detach(), 0)
    f = -log_w.detach()
    return (rho * (f - (rho * f).sum()) * log_pf).sum()


def forward_kl_iw(log_pf: Tensor, log_q: Tensor, log_w: Tensor) -> Tensor:
    """:math:`\\mathrm{KL}(P^* \\| P_F)` up to a constant, by self-normalised importance weighting of ``q``-trajectories.

    .. math:: -\\sum_b \\hat\\omega_b \\log P_F(\\tau_b),\\qquad
       \\hat\\omega = \\mathrm{softmax}\\big(w + \\log P_F - \\log q\\big) = \\mathrm{softmax}(\\log R + \\log P_B - \\log q)

    With exact target samples and backward paths, :math:`q = P^*` and the weights are uniform
    (maximum likelihood). ``log_pf``, ``log_q`` and ``log_w`` are per-trajectory ``[B]``.
    """
    omega = torch.softmax((log_w + log_pf - log_q).detach(), 0)
    return -(omega * log_pf).sum()


# --- Maximum likelihood from data (no reward): the terminal states are data points --------------------------


def neg_elbo(log_pf: Tensor, log_pb: Tensor, mask: Tensor) -> Tensor:
    """Minus the evidence lower bound of the terminal marginal :math:`P_T` at the end of each trajectory, ``[B]``.

    .. math:: -\\log P_T(x) \\le -\\big(\\textstyle\\sum_t \\log P_F(s_{t+1}|s_t) - \\sum_t \\log P_B(s_t|s_{t+1})\\big),
       \\qquad \\tau \\sim P_B(\\cdot | x)

    (Jensen's inequality on :math:`P_T(x) = \\mathbb E_{P_B(\\tau|x)}[P_F(\\tau) / P_B(\\tau|x)]`, with densities w.r.t. the
    kernels and :math:`P_T` w.r.t. :math:`\\kappa_b(\\bot, \\cdot)`; Zhang et al. 2023a, the diffusion ELBO of Ho et al. 2020
    eq. 3 when :math:`P_B` is the fixed noising process). It is :math:`w` of :func:`~gflownet_measure.metrics.log_weights`
    with :math:`\\log R = 0`.
    """
    return -((log_pf - log_pb) * mask).sum(0)


def tb_consistency(log_ratio: Tensor) -> Tensor:
    """The trajectory-balance consistency of MLE-GFN's backward policy (Zhang et al. 2023a, eq. 33), ``[B]``, from the log
    ratios ``log_ratio [K, B]`` of ``K`` backward trajectories of each of ``B`` data points,
    :math:`r_k = \\mathrm{sg}[\\log P_F(\\tau_k)] - \\log P_B(\\tau_k | x)`:

    .. math:: \\mathcal L_B(x) = \\frac{1}{K (K - 1)} \\sum_{j \\ne k} (r_j - r_k)^2 = \\frac{2}{K - 1} \\sum_k (r_k - \\bar r)^2,

    the mean squared difference over ordered pairs (twice the unbiased variance; for ``K = 2`` the squared difference of
    the two log ratios, as both public implementations write it). Zero exactly when :math:`P_F(\\tau) / P_B(\\tau | x)` is
    the same for every trajectory ending at :math:`x`, i.e. when :math:`P_B(\\tau | x) = P_F(\\tau) / P_T(x)`, the
    backward policy that makes the bound of :func:`neg_elbo` tight. ``K >= 2``.
    """
    K = log_ratio.shape[0]
    if K < 2:
        raise ValueError(f"tb_consistency needs K >= 2 backward trajectories per point, got {K}")
    return 2.0 / (K - 1) * (log_ratio - log_ratio.mean(0)).square().sum(0)
