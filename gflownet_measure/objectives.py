"""Training objectives as registered values: the losses of :mod:`gflownet_measure.losses` applied to a GFlowNet's modules.

An :class:`Objective` is a loss ``objective(gfn, batch, **hyper) -> Tensor`` together with what it needs, so that
an experiment asks the objective instead of deciding for it:

- ``needs_flow``: a state-flow network :math:`\\log F` w.r.t. :math:`\\nu` (DB, SubTB);
- ``needs_scores``: the log-densities of the batch under the behaviour policy, :math:`\\log q` (the divergences of
  Lahlou et al. 2023, section 4.2: their importance weights are :math:`P_F / q`);
- ``pathwise``: on-policy, the gradient flows through reparametrised states (the reverse KL of PIS, Zhang & Chen 2022);
- ``atoms_only``: the kernels must be sums of atoms (FM: its in- and out-flow integrals are sums);
- ``batch``: what one update consumes, ``"trajectories"`` (:class:`Batch`), ``"data"`` (a :class:`Batch` of
  trajectories walked back from data points, no reward: ``mle``) or ``"transitions"`` (replayed edges, as
  JSP-GFN's undirected SubTB, registered by :mod:`gflownet_measure.jsp_gfn.dag_params.objective`);
- ``log_Z``: how :math:`\\log Z` is read from the trained modules (the free parameter, the out-flow of :math:`s_0`
  under FM, or ``None`` when the objective learns none);
- ``hyper``: its hyper-parameters with their defaults, named as the settings that set them (``subtb_lambda``).

:meth:`Objective.sample` draws the batch an objective needs from a behaviour policy :math:`q = (1-\\epsilon)\\tilde P_F +
\\epsilon U` (:func:`~gflownet_measure.rollout.rollout`). Adding an objective is one :func:`register` call
(docs/objectives.md walks through VarGrad).

``OBJECTIVES`` (``dict[str, Objective]``): every registered objective, by name; :func:`register` adds one,
:func:`get_objective` reads one (a one-line ``ValueError`` naming the valid ones otherwise) and
:func:`objective_names` lists them by kind. This module registers ``tb``, ``db``, ``subtb``, ``fm`` (the balance
conditions of Definition 7), ``vargrad``, the divergences ``reverse_kl`` and ``forward_kl``, ``mle`` (maximum
likelihood of data, on trajectories walked back from data points) and ``mle_tbc`` (MLE-GFN's rule for a learned
backward policy); environments may add
their own (JSP-GFN's on transitions).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple

import torch
from torch import Tensor, nn

from . import losses
from .graph import PointedGraph
from .metrics import log_weights
from .options import lookup
from .rollout import Scores, log_densities, rollout, sample_forward, score
from .trajectories import Trajectories

if TYPE_CHECKING:
    from .densities import Policy

__all__ = ["GFlowNet", "Batch", "Objective", "OBJECTIVES", "register", "get_objective", "objective_names"]


class GFlowNet(nn.Module):
    """The learned pieces: :math:`P_F`, :math:`P_B`, :math:`\\log Z` and optionally :math:`\\log F` (w.r.t. nu)."""

    def __init__(self, pf: Policy, pb: Policy, log_F: nn.Module | None = None, log_Z: float = 0.0):
        super().__init__()
        self.pf, self.pb, self.log_F = pf, pb, log_F
        self.log_Z = nn.Parameter(torch.tensor(float(log_Z)))

    def flows(self, traj: Trajectories) -> Tensor:
        """``[T + 1, B]``: :math:`\\log Z` at :math:`s_0`, :math:`\\log F(s_t)` inside, :math:`\\log R(x)` at the sink, 0 after."""
        if self.log_F is None:
            raise ValueError("this objective needs a state-flow network log_F")
        T1, B = traj.sink.shape
        pos = torch.arange(T1, device=traj.sink.device)[:, None]
        inner = (~traj.sink) & (pos > 0)
        log_F = self.log_F(traj.states[inner])
        out = torch.zeros(T1, B, dtype=log_F.dtype, device=log_F.device)
        out[inner] = log_F
        out = torch.where(pos == 0, self.log_Z.to(out.dtype).expand(T1, B), out)
        at_sink = traj.sink & ~torch.cat([torch.zeros(1, B, dtype=torch.bool), traj.sink[:-1]])
        return torch.where(at_sink, traj.log_R[None].expand(T1, B), out)


class Batch(NamedTuple):
    """What a trajectory objective is evaluated on.

    Attributes:
        graph: the pointed graph the trajectories live on.
        traj: the trajectories.
        scores: their log-densities :math:`(\\log P_F, \\log P_B, \\log q)` when recorded (a scored rollout, or
            :func:`~gflownet_measure.rollout.score`); ``None``: the balance objectives evaluate the policies once on
            all transitions (:func:`~gflownet_measure.rollout.log_densities`).
        pathwise: the states are reparametrised draws of :math:`P_F` itself, differentiable in its parameters.
    """

    graph: PointedGraph
    traj: Trajectories
    scores: Scores | None = None
    pathwise: bool = False


def _parameter_log_Z(gfn: GFlowNet, graph: PointedGraph) -> float:
    """The free parameter :math:`\\log Z` (TB, DB, SubTB: the flow at :math:`s_0`)."""
    return float(gfn.log_Z.detach())


def _out_flow_log_Z(gfn: GFlowNet, graph: PointedGraph) -> float:
    """Under FM the logits of :math:`P_F` are log edge flows: :math:`\\log Z = \\log \\sum_{s'} F(s_0 \\to s')`."""
    with torch.no_grad():
        return float(gfn.pf(graph.source[None]).logits.logsumexp(1)[0])


@dataclass(frozen=True)
class Objective:
    """A registered training objective; see the module docstring for what each field declares."""

    name: str
    loss: Callable[..., Tensor]
    summary: str
    divergence: bool = False
    needs_flow: bool = False
    needs_scores: bool = False
    pathwise: bool = False
    atoms_only: bool = False
    batch: str = "trajectories"
    log_Z: Callable[[GFlowNet, PointedGraph], float] | None = _parameter_log_Z
    hyper: Mapping[str, Any] = field(default_factory=dict)

    def __call__(self, gfn: GFlowNet, batch: Any, **hyper: Any) -> Tensor:
        """The loss on ``batch`` (a :class:`Batch`, or the batch type the objective names), a scalar."""
        unknown = sorted(set(hyper) - set(self.hyper))
        if unknown:
            raise ValueError(f"objective {self.name!r} has no hyper-parameter {', '.join(unknown)}; valid: {', '.join(self.hyper) or 'none'}")
        if self.needs_scores and getattr(batch, "scores", None) is None:
            raise ValueError(
                f"the {self.name} objective needs the scores of a rollout (the behaviour density log q); sample with rollout(..., pb=...) or score the sampled trajectories with rollout.score(traj, pf, pb, epsilon, noise)"
            )
        return self.loss(gfn, batch, **{**self.hyper, **hyper})

    def options(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """The hyper-parameters that ``settings`` sets (by name); the others keep their defaults."""
        return {k: settings[k] for k in self.hyper if k in settings}

    def sample(self, graph: PointedGraph, gfn: GFlowNet, n: int, epsilon: float = 0.0, noise: float = 0.0) -> Batch:
        """``n`` trajectories from :math:`q = (1-\\epsilon)\\tilde P_F + \\epsilon U` (``noise``: extra variance of
        :math:`\\tilde P_F`'s Gaussian coordinates), in the form this objective needs.

        On-policy (``epsilon = noise = 0``) a ``pathwise`` objective gets reparametrised trajectories scored while they
        are drawn (one policy call per step); otherwise the batch is drawn without gradients and, if the objective
        ``needs_scores``, scored by one batched call per policy (:func:`~gflownet_measure.rollout.score`).
        """
        if self.batch != "trajectories":
            raise ValueError(f"objective {self.name!r} trains on {self.batch}, not on sampled trajectories")
        if self.pathwise and epsilon == 0 and noise == 0:
            traj, scores = rollout(graph, gfn.pf, n, pb=gfn.pb, reparametrise=True)
            return Batch(graph, traj, scores, pathwise=True)
        traj = sample_forward(graph, gfn.pf, n, epsilon, noise)
        return Batch(graph, traj, score(traj, gfn.pf, gfn.pb, epsilon, noise) if self.needs_scores else None)


OBJECTIVES: dict[str, Objective] = {}
"""Every registered objective, by name."""


def register(objective: Objective) -> Objective:
    """Add ``objective`` to :data:`OBJECTIVES` (a name is registered once)."""
    if objective.name in OBJECTIVES:
        raise ValueError(f"an objective named {objective.name!r} is already registered")
    OBJECTIVES[objective.name] = objective
    return objective


def get_objective(name: str) -> Objective:
    """The registered objective ``name``; ``ValueError`` naming the valid ones otherwise."""
    return lookup(OBJECTIVES, name, "objective")


def objective_names(divergence: bool | None = None, continuous: bool = False, batch: str = "trajectories") -> tuple[str, ...]:
    """Sorted names of the registered objectives on ``batch``: balance conditions only (``divergence=False``), divergences
    only (``True``) or both (``None``); with ``continuous`` only those that run on kernels with continuous pieces."""
    return tuple(
        sorted(
            n for n, o in OBJECTIVES.items() if o.batch == batch and (divergence is None or o.divergence == divergence) and not (continuous and o.atoms_only)
        )
    )


# --- The balance conditions of Definition 7 (zero exactly at a solution) ------------------------------------


def _densities(gfn: GFlowNet, batch: Batch) -> tuple[Tensor, Tensor]:
    return (batch.scores.log_pf, batch.scores.log_pb) if batch.scores is not None else log_densities(batch.traj, gfn.pf, gfn.pb)


def _tb(gfn: GFlowNet, batch: Batch) -> Tensor:
    """:math:`\\mathbb E_\\tau[\\delta_{TB}(\\tau)^2]` (eq. 19)."""
    log_pf, log_pb = _densities(gfn, batch)
    return losses.square(losses.tb_residual(gfn.log_Z, log_pf, log_pb, batch.traj.log_R, batch.traj.mask)).mean()


def _db(gfn: GFlowNet, batch: Batch) -> Tensor:
    """Mean of :math:`\\delta_{DB}(s_t, s_{t+1})^2` over transitions (eq. 18)."""
    log_pf, log_pb = _densities(gfn, batch)
    return losses.masked_mean(losses.square(losses.db_residuals(gfn.flows(batch.traj), log_pf, log_pb)), batch.traj.mask)


def _subtb(gfn: GFlowNet, batch: Batch, subtb_lambda: float) -> Tensor:
    """:math:`\\lambda^{j-i}`-weighted mean of :math:`\\delta_{ij}^2` over sub-trajectories (Madan et al. 2023)."""
    log_pf, log_pb = _densities(gfn, batch)
    return losses.subtb_loss(gfn.flows(batch.traj), log_pf, log_pb, batch.traj.length, subtb_lambda, losses.square)


def _vargrad(gfn: GFlowNet, batch: Batch) -> Tensor:
    """The log-variance loss (Richter et al. 2020, VarGrad; Zhang et al. 2023): TB with :math:`\\log Z` replaced by the
    batch mean of :math:`w = \\log R + \\sum_t \\log P_B - \\sum_t \\log P_F`,

    .. math:: \\mathcal L = \\frac1B \\sum_b \\big(w_b - \\bar w\\big)^2,

    zero exactly when :math:`w` is constant along the batch's trajectories, i.e. at a solution of eq. 19 with
    :math:`\\log Z = \\bar w`. No :math:`\\log Z` is learned.
    """
    log_pf, log_pb = _densities(gfn, batch)
    w = log_weights(batch.traj.log_R, log_pf, log_pb, batch.traj.mask)
    return (w - w.mean()).square().mean()


def _fm(gfn: GFlowNet, batch: Batch) -> Tensor:
    """Flow matching at every visited state plus reward matching at its sink edge (eq. 17); the logits of P_F are log edge flows."""
    graph, traj = batch.graph, batch.traj
    s = traj.states[~traj.sink]  # visited states, s0 included
    out = gfn.pf(s)
    atoms = out.measure.atoms
    if out.measure.pieces:
        raise ValueError("flow matching needs kernels made of atoms only (the in- and out-flow integrals are sums)")
    has_sink = (atoms.sink & atoms.mask).any(1)
    log_to_sink = out.logits.masked_fill(~atoms.sink, float("-inf")).logsumexp(1)
    rm = losses.rm_residual(log_to_sink[has_sink], graph.checked_log_reward(s[has_sink]))
    inner = ~graph.is_source(s)
    parents = gfn.pb.kernel(s[inner]).atoms  # kappa_b(s, .)
    P = parents.mask.shape[1]
    child = s[inner][:, None].expand(-1, P, -1)[parents.mask]
    flows_in = gfn.pf(parents.x[parents.mask]).log_flow(child, torch.zeros(len(child), dtype=torch.bool))
    log_in = torch.full(parents.mask.shape, float("-inf"), dtype=flows_in.dtype, device=flows_in.device)
    log_in[parents.mask] = flows_in
    fm = losses.fm_residual(log_in, parents.mask, out.logits[inner], atoms.mask[inner])
    return losses.square(fm).mean() + losses.square(rm).mean()


# --- Divergences between path measures (section 4.2): minimised, not zero, at a solution ----------------------


def _path_sums(batch: Batch) -> tuple[Tensor, Tensor, Tensor]:
    """Per-trajectory :math:`\\log P_F`, :math:`\\log q` and :math:`w = \\log R + \\sum_t \\log P_B - \\sum_t \\log P_F` ``[B]``."""
    assert batch.scores is not None  # the divergences declare needs_scores, which Objective.__call__ checks
    m, (log_pf, log_pb, log_q) = batch.traj.mask, batch.scores
    return (log_pf * m).sum(0), (log_q * m).sum(0), log_weights(batch.traj.log_R, log_pf, log_pb, m)


def _reverse_kl(gfn: GFlowNet, batch: Batch) -> Tensor:
    """:math:`\\mathrm{KL}(P_F \\| P^*)`: path-wise on a reparametrised on-policy batch, score-function with importance weights otherwise."""
    log_pf, log_q, log_w = _path_sums(batch)
    return losses.reverse_kl(log_w) if batch.pathwise else losses.reverse_kl_iw(log_pf, log_q, log_w)


def _forward_kl(gfn: GFlowNet, batch: Batch) -> Tensor:
    """:math:`\\mathrm{KL}(P^* \\| P_F)` by self-normalised importance weights of the behaviour policy's trajectories."""
    return losses.forward_kl_iw(*_path_sums(batch))


def _mle(gfn: GFlowNet, batch: Batch) -> Tensor:
    """Maximum likelihood of data through the variational bound (Zhang et al. 2023a, MLE-GFN; Lahlou et al. 2023, section 4.5):

    .. math:: \\mathcal L(\\theta, \\phi) = \\frac1B \\sum_b -\\big(\\log P_F^\\theta(\\tau_b) - \\log P_B^\\phi(\\tau_b | x_b)\\big),
       \\qquad x_b \\sim \\text{data},\\ \\tau_b \\sim P_B^\\phi(\\cdot | x_b)

    on trajectories walked back from data points (:func:`~gflownet_measure.rollout.sample_backward`, or
    :func:`~gflownet_measure.rollout.rsample_backward` when :math:`P_B` is learned), with :math:`\\log R` unused: the
    terminal states are data, not rewards. Its expectation is an upper bound on :math:`-\\log P_T(x)` for every
    :math:`\\phi` (:func:`~gflownet_measure.losses.neg_elbo`). The denoiser :math:`\\theta` descends it as maximum
    likelihood of trajectories; the backward policy :math:`\\phi` descends the same bound, whose gap is
    :math:`\\mathrm{KL}(P_B^\\phi(\\tau|x) \\| P_F^\\theta(\\tau|x))`, path-wise through the reparametrised trajectories.
    With a fixed :math:`P_B` (``batch.pathwise`` False) the :math:`\\log P_B` term is a constant and this is the
    diffusion-model loss of Ho et al. 2020 (eq. 3) before its closed-form Gaussian KL terms.
    """
    log_pf, log_pb = _densities(gfn, batch)
    return losses.neg_elbo(log_pf, log_pb, batch.traj.mask).mean()


def _mle_tbc(gfn: GFlowNet, batch: Batch, tbc_weight: float, tbc_samples: int) -> Tensor:
    """MLE-GFN as Zhang et al. 2023a define it (Algorithm 1; eq. 28 and 33): :math:`P_F` by maximum likelihood through the
    bound with :math:`P_B` held fixed, and :math:`P_B` by trajectory-balance consistency,

    .. math:: \\mathcal L = \\frac{1}{KB} \\sum_{k, b} -\\big(\\log P_F(\\tau_{kb}) - \\mathrm{sg}[\\log P_B(\\tau_{kb} | x_b)]\\big)
       \\;+\\; \\alpha\\, \\frac1B \\sum_b \\mathcal L_B(x_b)

    with :math:`\\mathcal L_B` of :func:`~gflownet_measure.losses.tb_consistency` on :math:`r_{kb} = \\mathrm{sg}[\\log P_F(\\tau_{kb})]
    - \\log P_B(\\tau_{kb} | x_b)`, :math:`\\alpha` = ``tbc_weight``. The batch holds ``tbc_samples`` = K backward walks of
    each of B points, point-major within each of the K blocks (trajectory ``k B + b`` ends at point ``b``), drawn without
    reparametrisation (:func:`~gflownet_measure.rollout.sample_backward`): :math:`P_B` learns through the log-densities of
    its sampled actions only, and :math:`P_F` only through the first term. No reward, no :math:`\\log Z`: they cancel.
    """
    log_pf, log_pb = _densities(gfn, batch)
    m = batch.traj.mask
    f, b = (log_pf * m).sum(0), (log_pb * m).sum(0)
    mle = -(f - b.detach()).mean()
    return mle + tbc_weight * losses.tb_consistency((f.detach() - b).view(tbc_samples, -1)).mean()


register(Objective("tb", _tb, "trajectory balance with a learned log Z (Malkin et al. 2022; eq. 19)"))
register(Objective("db", _db, "detailed balance with a learned state flow (Bengio et al. 2023; eq. 18)", needs_flow=True))
register(Objective("subtb", _subtb, "sub-trajectory balance, lambda^(j-i)-weighted (Madan et al. 2023)", needs_flow=True, hyper={"subtb_lambda": 0.9}))
register(Objective("fm", _fm, "flow matching and reward matching on log edge flows (Bengio et al. 2021; eq. 17)", atoms_only=True, log_Z=_out_flow_log_Z))
register(Objective("vargrad", _vargrad, "log-variance of the log-weights, TB with log Z the batch mean (Richter et al. 2020)", log_Z=None))
register(
    Objective(
        "reverse_kl",
        _reverse_kl,
        "KL(P_F || P*): path-wise on-policy, importance-weighted score function off-policy (section 4.2)",
        divergence=True,
        needs_scores=True,
        pathwise=True,
        log_Z=None,
    )
)
register(
    Objective("forward_kl", _forward_kl, "KL(P* || P_F) by self-normalised importance weights (section 4.2)", divergence=True, needs_scores=True, log_Z=None)
)
register(
    Objective(
        "mle",
        _mle,
        "maximum likelihood of data through the variational bound, P_B learned or fixed (Zhang et al. 2023a; section 4.5)",
        divergence=True,
        log_Z=None,
        batch="data",
    )
)
register(
    Objective(
        "mle_tbc",
        _mle_tbc,
        "MLE-GFN: P_F by the bound, P_B by trajectory-balance consistency over K backward walks per point (Zhang et al. 2023a, eq. 33)",
        divergence=True,
        log_Z=None,
        batch="data",
        hyper={"tbc_weight": 1.0, "tbc_samples": 2},
    )
)
