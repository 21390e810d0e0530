"""Structure MCMC on :math:`P(G, \\theta | D) \\propto R(G, \\theta)`: the MH-MC3 and Gibbs-MC3 baselines of Deleu et al. 2023, Table D.1.

Target: :math:`\\pi(G, \\theta) \\propto R(G, \\theta) = P(D | G, \\theta) P(\\theta | G) P(G)` (``model.log_reward``),
a density w.r.t. counting measure on DAGs times Lebesgue measure on the :math:`|E(G)|` active weights.
Each step applies two kernels that both leave :math:`\\pi` invariant, to ``n_chains`` independent chains
at once (batched), started from the empty graph:

1. **Structure move (MC3**, Madigan & York 1995, with reversible-jump dimension matching, Green 1995).
   The legal moves of a DAG G (:func:`legal_moves`) are

   - add :math:`i \\to j`: :math:`i \\ne j`, :math:`A_{ij} = 0` and no path :math:`j \\leadsto i`
     (``dags.valid_edges``); :math:`n_{add}(G)` of them;
   - remove :math:`i \\to j`: :math:`A_{ij} = 1`; :math:`n_{rm}(G) = |E(G)|`;
   - reverse :math:`i \\to j`: :math:`A_{ij} = 1` and no other path :math:`i \\leadsto j` (no child
     :math:`k \\ne j` of i with :math:`k \\leadsto j`); :math:`n_{rev}(G)`.

   One of the :math:`n(G) = n_{add} + n_{rm} + n_{rev}` is drawn uniformly, :math:`q(G' | G) = 1/n(G)`.
   Every move's inverse is legal in :math:`G'` (add and remove are inverse, a reversal undoes itself),
   so :math:`q(G | G') = 1/n(G')`. Dimension matching, with :math:`q_w = \\mathcal N(0, s^2)`
   (``jump_std`` = s): an added edge takes a fresh weight :math:`u \\sim q_w`; a removed edge drops its
   weight :math:`w = \\theta_{ij}`, which is the :math:`u` the inverse move would draw; a reversal does
   both (drops :math:`\\theta_{ij}`, draws :math:`\\theta'_{ji} = u`). The map
   :math:`(\\theta, u) \\mapsto (\\theta', w)` only relabels coordinates, so its Jacobian is 1 and

   .. math:: \\log \\alpha = \\log R(G', \\theta') - \\log R(G, \\theta) + \\log n(G) - \\log n(G')
             + \\sum_{\\text{dropped}} \\log q_w(w) - \\sum_{\\text{drawn}} \\log q_w(u),

   i.e. :math:`-\\log q_w(u)` for an add, :math:`+\\log q_w(w)` for a remove, both for a reverse.
   The other weights are kept.

2. **Weight move.**

   - :func:`mh_mc3` ("MH-MC3 with joint theta moves"): a Gaussian random walk on the active weights,
     :math:`\\theta'_E = \\theta_E + \\epsilon \\xi`, :math:`\\xi \\sim \\mathcal N(0, I_{|E|})` (``theta_step`` =
     :math:`\\epsilon`), symmetric: :math:`\\log \\alpha = \\log R(G, \\theta') - \\log R(G, \\theta)`.
   - :func:`gibbs_mc3`: an exact draw :math:`\\theta \\sim P(\\theta | G, D)` (the conjugate Normal of
     ``model.theta_posterior``; the law of ``model.sample_theta_posterior``), always accepted.

Mixing: the conditional :math:`P(\\theta_{ij} | G, \\theta_{-ij}, D)` has width about
:math:`\\sigma / (\\sqrt N \\,\\mathrm{sd}(X_i))`, so where the data are informative a fresh weight from
:math:`q_w` rarely lands in it and the random walk of MH-MC3 needs many steps per unit of posterior width;
Gibbs-MC3 refreshes all weights exactly every step. Table D.1 reports both near edge RMSE 0.36; with these
kernels on the JSP-GFN setting (d = 5, N = 100, :math:`\\sigma^2 = 0.01`, 15,000 steps x 4 chains) we measured
edge RMSE 0.01 (Gibbs-MC3) and 0.015-0.14 (MH-MC3, dataset seeds 0-1). Both mix on broad posteriors
(small N). A proposal whose log-ratio is NaN is rejected.

Implementation: the legal moves of each graph met are cached (:class:`_MoveTable`), and so are the
conjugate factors of :math:`P(\\theta | G, D)` (:class:`_GibbsDraws`); the chains' state is numpy (torch's
per-call overhead dominates on d x d arrays), and ``model.log_reward`` is called once per move on all chains
batched. The samplers are written as kernels, :func:`init` and a step per move (:func:`mc3_step`,
:func:`random_walk_step`, :func:`gibbs_step`) composed by :func:`mh_mc3` and :func:`gibbs_mc3` and run by
:func:`sample_chains`, in the style of BlackJAX (Cabezas et al. 2024): a new sampler composes the steps.

Samples: after ``burn_in`` steps, every ``thin``-th state of each chain, ``n_samples`` per chain;
``graphs[c * n_samples + t]`` is chain c's t-th kept state. Parameters are flat, ``theta [..., d * d]`` with
``theta[i * d + j]`` = :math:`\\theta_{ij}` (:class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian`'s layout); the chains keep them as
``[d, d]`` matrices inside.
"""

from __future__ import annotations

import math
import time
from typing import Callable, NamedTuple

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from gflownet_measure.baselines.smc import TARGET_ACCEPTANCE
from gflownet_measure.gaussian import LOG_2PI
from gflownet_measure.jsp_gfn.bayesnets.dags import valid_edges

from .samples import Clock, clock

__all__ = [
    "MOVES",
    "MCMCSamples",
    "StructureProposal",
    "legal_moves",
    "propose_structure",
    "ChainState",
    "Target",
    "init",
    "mc3_step",
    "random_walk_step",
    "gibbs_step",
    "sample_chains",
    "mh_mc3",
    "gibbs_mc3",
]

MOVES = ("add", "remove", "reverse")


class MCMCSamples(NamedTuple):
    """Output of :func:`mh_mc3` and :func:`gibbs_mc3`.

    ``graphs [K, d, d]`` bool and flat ``thetas [K, P]`` float64 (0 at inactive coordinates), ``K = n_chains * n_samples``,
    chain-major (``graphs.view(n_chains, n_samples, d, d)``); ``acceptance`` is the fraction of accepted
    structure moves over all steps (burn-in included) and chains; ``seconds`` the wall time of the run.
    """

    graphs: Tensor
    thetas: Tensor
    acceptance: float
    seconds: float


class StructureProposal(NamedTuple):
    """One reversible-jump MC3 proposal per graph (:func:`propose_structure`), all ``[B, ...]``.

    ``log_hastings`` is :math:`\\log q(G, \\theta | G', \\theta') - \\log q(G', \\theta' | G, \\theta)`
    (module docstring): :math:`\\log n(G) - \\log n(G') + \\sum_{\\text{dropped}} \\log q_w - \\sum_{\\text{drawn}} \\log q_w`.
    """

    adj: Tensor  # [B, d, d] bool: G'
    theta: Tensor  # [B, d * d] float64, flat: theta'
    kind: Tensor  # [B] long: index into MOVES
    edge: Tensor  # [B, 2] long: (i, j) of the edge i -> j the move acts on (a reversal's new edge is j -> i)
    n_moves: Tensor  # [B] long: n(G)
    n_moves_new: Tensor  # [B] long: n(G')
    log_hastings: Tensor  # [B] float64


def legal_moves(adj: Tensor, reach: Tensor, max_parents: int | None = None) -> Tensor:
    """The MC3 moves that keep ``adj`` acyclic: ``[..., 3, d, d]`` bool, ``[..., k, i, j]`` = move ``MOVES[k]`` on ``i -> j``.

    add: ``dags.valid_edges`` (:math:`A_{ij} = 0`, :math:`j \\not\\leadsto i`, :math:`i \\ne j`); remove:
    :math:`A_{ij} = 1`; reverse: :math:`A_{ij} = 1` and no child :math:`k \\ne j` of i with :math:`k \\leadsto j`
    (else :math:`i \\to k \\leadsto j \\to i` would be a cycle), i.e. :math:`(A (R \\wedge \\neg I))_{ij} = 0`.
    With ``max_parents``, add and reverse must not give a node more parents (add ``i -> j``: j not full; reverse:
    i not full): the chain then stays on, and is reversible on, the DAGs within the limit.

    Args:
        adj: ``[..., d, d]`` DAGs.
        reach: ``[..., d, d]`` their reflexive transitive closures (``dags.transitive_closure``).
        max_parents: at most this many parents per node (``None``: no limit).
    """
    adj, reach = adj.bool(), reach.bool()
    off_diagonal = ~torch.eye(adj.shape[-1], dtype=torch.bool, device=adj.device)
    other_path = (adj.to(torch.float32) @ (reach & off_diagonal).to(torch.float32)) > 0  # counts <= d: exact in float32
    reverse = adj & ~other_path
    if max_parents is not None:
        reverse = reverse & ~(adj.sum(-2) >= max_parents)[..., :, None]  # i -> j becomes j -> i: row i's node gains a parent
    return torch.stack([valid_edges(adj, reach, max_parents), adj, reverse], dim=-3)


class _MoveTable:
    """The legal moves of each graph met, as flat indices into ``[3, d, d]`` (``n(G)`` = their number), cached by graph.

    A chain proposes from and to few distinct graphs, so almost every lookup is a hit; the table is cleared
    when it holds ``2**22 / (3 d^2)`` graphs (at most 32 MiB of int64).
    """

    def __init__(self, d: int, max_parents: int | None = None):
        self.cache: dict[bytes, np.ndarray] = {}
        self.max_size = max(1, 2**22 // (3 * d * d))
        self.max_parents = max_parents

    def __call__(self, adj: np.ndarray) -> np.ndarray:
        key = adj.tobytes()
        moves = self.cache.get(key)
        if moves is None:
            if len(self.cache) >= self.max_size:
                self.cache.clear()
            moves = self.cache[key] = np.flatnonzero(_legal_np(adj, self.max_parents))
        return moves


def _legal_np(adj: np.ndarray, max_parents: int | None = None) -> np.ndarray:
    """:func:`legal_moves` of one graph ``[d, d]`` from scratch, in numpy: ``[3, d, d]`` bool.

    The same masks as ``legal_moves(adj, dags.transitive_closure(adj), max_parents)`` (tested on every DAG with d <= 4), with
    the closure by boolean squaring; numpy's per-call overhead on a 5 x 5 matrix is a tenth of torch's, and
    this runs on every cache miss.
    """
    d = adj.shape[-1]
    eye = np.eye(d, dtype=bool)
    reach = adj | eye
    for _ in range(math.ceil(math.log2(d))):
        reach = reach @ reach  # boolean matmul: OR of ANDs, doubles the path length covered
    other_path = adj @ (reach & ~eye)  # a child k != j of i reaches j
    add, reverse = ~(adj | reach.T), adj & ~other_path
    if max_parents is not None:
        full = adj.sum(0) >= max_parents  # [d]: node j has max_parents parents
        add, reverse = add & ~full[None, :], reverse & ~full[:, None]
    return np.stack([add, adj, reverse])


def _log_q(w: np.ndarray, s: float) -> np.ndarray:
    """:math:`\\log \\mathcal N(w; 0, s^2)`."""
    return -0.5 * (w / s) ** 2 - math.log(s) - 0.5 * LOG_2PI


def _propose_one(adj: np.ndarray, u_pick: float, table: _MoveTable):
    """The MC3 graph move from one graph ``adj [d, d]``: ``u_pick`` in [0, 1) picks one of its legal moves uniformly.

    Returns ``(adj', kind, i, j, n(G), n(G'))``.
    """
    d = adj.shape[-1]
    moves = table(adj)
    n = len(moves)  # >= 1 when d >= 2: the empty graph can add, any other graph can remove
    kind, ij = divmod(int(moves[int(u_pick * n)]), d * d)  # uniform over the legal moves
    i, j = divmod(ij, d)
    new_adj = adj.copy()
    if kind != 0:  # remove, reverse
        new_adj[i, j] = False
    if kind != 1:  # add, reverse
        a, b = (i, j) if kind == 0 else (j, i)
        new_adj[a, b] = True
    return new_adj, kind, i, j, n, len(table(new_adj))


def _linear_active(adj: np.ndarray) -> np.ndarray:
    """The active coordinates of :class:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian`: ``adj`` flattened, ``[B, d * d]``."""
    return adj.reshape(len(adj), -1)


def _propose(
    adj: np.ndarray,
    theta: np.ndarray,
    s: float,
    u_pick: np.ndarray,
    z: np.ndarray,
    table: _MoveTable,
    active: Callable[[np.ndarray], np.ndarray] = _linear_active,
):
    """:func:`_propose_one` on every graph of ``adj [B, d, d]``, with reversible-jump parameters for flat ``theta [B, P]``:
    the coordinates that become active take :math:`u = s z` (``z [B, P]`` standard normal), those that become inactive
    are dropped (set to 0), the others kept. ``active``: ``adj [B, d, d] -> [B, P]`` bool (the model's :math:`\\Theta_G`).

    Returns ``(adj', theta', kind, edge, n, n', log_h)`` arrays, :math:`\\log h = \\log n - \\log n' + \\sum_{\\text{dropped}} \\log q_w - \\sum_{\\text{drawn}} \\log q_w`.
    """
    out = [_propose_one(adj[b], float(u_pick[b]), table) for b in range(len(adj))]
    new_adj, kind, i, j, n, n_new = (np.array(v) for v in zip(*out))
    old_active, new_active = active(adj), active(new_adj)
    drawn, dropped = new_active & ~old_active, old_active & ~new_active
    u = s * z
    new_theta = np.where(drawn, u, np.where(new_active, theta, 0.0))
    log_h = np.where(dropped, _log_q(theta, s), 0.0).sum(-1) - np.where(drawn, _log_q(u, s), 0.0).sum(-1) + np.log(n) - np.log(n_new)
    return new_adj, new_theta, kind, np.stack([i, j], -1), n, n_new, log_h


def propose_structure(
    adj: Tensor, theta: Tensor, jump_std: float = 1.0, generator: torch.Generator | None = None, max_parents: int | None = None
) -> StructureProposal:
    """A uniform legal MC3 move on each graph, with reversible-jump weights :math:`u \\sim \\mathcal N(0,` ``jump_std`` :math:`^2)`.

    Args:
        adj: ``[B, d, d]`` bool DAGs, ``d >= 2`` (so that every graph has a legal move).
        theta: flat ``[B, d * d]`` weights, 0 at non-edges.
        jump_std: s of the weight proposal :math:`q_w`.
        generator: torch RNG.
        max_parents: at most this many parents per node (:func:`legal_moves`).

    Returns:
        :class:`StructureProposal`; :math:`\\log \\alpha = \\log R(G', \\theta') - \\log R(G, \\theta)` + ``log_hastings``.
    """
    B, d = adj.shape[0], adj.shape[-1]
    u_pick = torch.rand(B, dtype=torch.float64, generator=generator).cpu().numpy()
    z = torch.randn(B, d * d, dtype=torch.float64, generator=generator).cpu().numpy()
    flat = theta.detach().cpu().double().numpy().reshape(B, d * d)
    result = _propose(adj.bool().cpu().numpy(), flat, float(jump_std), u_pick, z, _MoveTable(d, max_parents))
    return StructureProposal(*(torch.from_numpy(np.ascontiguousarray(x)) for x in result))


def _on(model, a: np.ndarray) -> Tensor:
    """The chains' numpy array ``a`` as a tensor where ``model`` holds its data (the run's device)."""
    return torch.from_numpy(a).to(model.data.device)


class _GibbsDraws:
    """Exact draws :math:`\\theta \\sim P(\\theta | G, D)`, per column :math:`\\theta_{P_j, j} = m_j + L_j z_j`,
    :math:`L_j L_j^\\top = V_j`, from ``model.theta_posterior`` cached per graph.

    ``model.sample_theta_posterior`` gives the same law, but regroups the batch by (node, parent set) on every
    call (~1 ms at d = 5); a chain revisits few graphs, so the cached draw is two array operations. The cache is
    cleared when it holds ``2**23 / (d^3 + d^2)`` graphs (64 MiB of float64).
    """

    def __init__(self, model):
        self.model, self.d = model, model.d
        self.cache: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
        self.max_size = max(1, 2**23 // (self.d**3 + self.d**2))

    def _entry(self, adj: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        key = adj.tobytes()
        hit = self.cache.get(key)
        if hit is None:
            if len(self.cache) >= self.max_size:
                self.cache.clear()
            mean, cov = (x.double().cpu().numpy() for x in self.model.theta_posterior(_on(self.model, adj)))  # [d * d], [d, d, d]
            mean = mean.reshape(self.d, self.d)
            scale = np.zeros((self.d, self.d, self.d))  # [j, i, k]: column j's noise is scale[j] @ z_j
            for j in range(self.d):
                parents = np.flatnonzero(adj[:, j])
                if len(parents):
                    scale[j][np.ix_(parents, parents)] = np.linalg.cholesky(cov[j][np.ix_(parents, parents)])
            hit = self.cache[key] = (mean, scale)
        return hit

    def __call__(self, adj: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """``[C, d, d]`` float64 draws given ``adj [C, d, d]``."""
        entries = [self._entry(a) for a in adj]
        mean, scale = np.stack([e[0] for e in entries]), np.stack([e[1] for e in entries])  # [C, d, d], [C, d, d, d]
        z = rng.standard_normal((len(adj), self.d, self.d))  # [C, j, k]
        return mean + np.einsum("cjik,cjk->cij", scale, z)


# ---------------------------------------------------------------- kernels: init and step (as BlackJAX writes samplers)


class ChainState(NamedTuple):
    """The state of ``C`` chains: graphs ``adj [C, d, d]`` bool, flat weights ``theta [C, P]`` float64, ``log_R [C]``."""

    adj: np.ndarray
    theta: np.ndarray
    log_R: np.ndarray


class Target:
    """:math:`\\log R(G, \\theta)` and :math:`\\Theta_G` of a CPD model on the chains' numpy arrays (its device handled here)."""

    def __init__(self, model):
        self.model = model

    def active(self, adj: np.ndarray) -> np.ndarray:
        """``[C, P]`` bool: the active coordinates of each graph."""
        return self.model.active(_on(self.model, adj)).cpu().numpy()

    def log_R(self, adj: np.ndarray, theta: np.ndarray) -> np.ndarray:
        """``[C]`` float64: ``model.log_reward`` without gradients."""
        with torch.no_grad():
            return self.model.log_reward(_on(self.model, adj), _on(self.model, theta)).double().cpu().numpy()

    def log_R_and_grad(self, adj: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``([C], [C, P])`` float64: :math:`\\log R` and its gradient in :math:`\\theta` (``model.log_reward_and_grad``; 0 off :math:`\\Theta_G`)."""
        value, grad = self.model.log_reward_and_grad(_on(self.model, adj), _on(self.model, theta))
        return value.cpu().numpy(), grad.cpu().numpy()


def init(target: Target, n_chains: int) -> ChainState:
    """Every chain at the empty graph with zero weights."""
    d, P = target.model.d, target.model.n_params
    adj, theta = np.zeros((n_chains, d, d), dtype=bool), np.zeros((n_chains, P))
    return ChainState(adj, theta, target.log_R(adj, theta))


def _select(ok: np.ndarray, new: ChainState, old: ChainState) -> ChainState:
    """Per chain, ``new`` where ``ok [C]`` and ``old`` elsewhere."""
    return ChainState(*(np.where(ok.reshape(-1, *[1] * (a.ndim - 1)), a, b) for a, b in zip(new, old)))


def mc3_step(state: ChainState, target: Target, rng: np.random.Generator, table: _MoveTable, jump_std: float) -> tuple[ChainState, np.ndarray]:
    """One reversible-jump MC3 structure move per chain (module docstring, 1.), accepted with
    :math:`\\log \\alpha = \\log R(G', \\theta') - \\log R(G, \\theta) + \\log h`; a NaN ratio is rejected.
    Returns the new state and the accepted chains ``[C]``."""
    C, P = (int(n) for n in state.theta.shape)
    p_adj, p_theta, *_, log_h = _propose(state.adj, state.theta, jump_std, rng.random(C), rng.standard_normal((C, P)), table, target.active)
    proposal = ChainState(p_adj, p_theta, target.log_R(p_adj, p_theta))
    ok = np.log(rng.random(C)) < proposal.log_R - state.log_R + log_h
    return _select(ok, proposal, state), ok


def random_walk_step(state: ChainState, target: Target, rng: np.random.Generator, step: float) -> tuple[ChainState, np.ndarray]:
    """One Gaussian random-walk move of the active weights, :math:`\\theta'_E = \\theta_E + \\epsilon \\xi` (module
    docstring, 2.), symmetric: :math:`\\log \\alpha = \\log R(G, \\theta') - \\log R(G, \\theta)`. Returns the new state
    and the accepted chains ``[C]``."""
    walk = state.theta + step * rng.standard_normal(state.theta.shape) * target.active(state.adj)
    proposal = ChainState(state.adj, walk, target.log_R(state.adj, walk))
    ok = np.log(rng.random(len(walk))) < proposal.log_R - state.log_R
    return _select(ok, proposal, state), ok


def mala_step(state: ChainState, target: Target, rng: np.random.Generator, step: np.ndarray) -> tuple[ChainState, np.ndarray]:
    """One Metropolis-adjusted Langevin move of the active weights of every chain (Roberts & Tweedie 1996), step
    :math:`\\epsilon_c` = ``step [C]``: with :math:`g(\\theta) = \\nabla_\\theta \\log R(G, \\theta)` on :math:`\\Theta_G`,

    .. math:: \\theta' = \\theta + \\tfrac{\\epsilon^2}{2} g(\\theta) + \\epsilon \\xi, \\quad
              \\log \\alpha = \\log R(G, \\theta') - \\log R(G, \\theta) + \\log q(\\theta \\mid \\theta') - \\log q(\\theta' \\mid \\theta),

    :math:`\\log q(y \\mid x) = -\\lVert y - x - \\tfrac{\\epsilon^2}{2} g(x) \\rVert^2 / (2 \\epsilon^2)` + const, with
    :math:`\\xi \\sim \\mathcal N(0, I)` on the active coordinates only. For any fixed steps it leaves
    :math:`\\pi(\\theta \\mid G)` invariant; a NaN ratio is rejected. Returns the new state and the accepted chains ``[C]``."""
    mask = target.active(state.adj)
    half = 0.5 * step[:, None] ** 2  # eps^2 / 2, [C, 1]
    log_R, grad = target.log_R_and_grad(state.adj, state.theta)
    proposal = state.theta + mask * (half * grad + step[:, None] * rng.standard_normal(state.theta.shape))
    log_R_new, grad_new = target.log_R_and_grad(state.adj, proposal)
    forward = ((proposal - state.theta - half * grad) ** 2).sum(-1) / (4 * half[:, 0])
    backward = ((state.theta - proposal - half * grad_new) ** 2).sum(-1) / (4 * half[:, 0])
    ok = np.log(rng.random(len(proposal))) < log_R_new - log_R + forward - backward
    return _select(ok, ChainState(state.adj, proposal, log_R_new), state._replace(log_R=log_R)), ok


def adapt_step(step: np.ndarray, ok: np.ndarray, moved: np.ndarray, t: int) -> np.ndarray:
    """Robbins-Monro on :math:`\\log \\epsilon_c`: :math:`+ (t + 1)^{-0.6} (\\mathbb 1[\\text{accepted}] - 0.574)` for the
    chains with active weights (``moved``), towards MALA's optimal acceptance rate (Roberts & Rosenthal 1998;
    :data:`~gflownet_measure.baselines.smc.TARGET_ACCEPTANCE`, which the SMC moves adapt to). Used during the burn-in
    only, so the kept states come from a fixed kernel."""
    return step * np.exp(np.where(moved, (ok - TARGET_ACCEPTANCE["mala"]) / (t + 1) ** 0.6, 0.0))


def gibbs_step(state: ChainState, target: Target, rng: np.random.Generator, draws: _GibbsDraws) -> ChainState:
    """The exact weight move :math:`\\theta \\sim P(\\theta | G, D)` of every chain (always accepted)."""
    theta = draws(state.adj, rng).reshape(state.theta.shape)
    return ChainState(state.adj, theta, target.log_R(state.adj, theta))


# ---------------------------------------------------------------- samplers


def _check(fn: str, model, n_samples, burn_in, thin, n_chains, jump_std, theta_step) -> None:
    for name, value, low in (("n_samples", n_samples, 1), ("burn_in", burn_in, 0), ("thin", thin, 1), ("n_chains", n_chains, 1)):
        if int(value) != value or value < low:
            raise ValueError(f"{fn}: {name} must be an integer >= {low}, got {value!r}")
    for name, value in (("jump_std", jump_std), ("theta_step", theta_step)):
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"{fn}: {name} must be finite and > 0, got {value!r}")
    if model.d < 2:
        raise ValueError(f"{fn}: structure moves need d >= 2 nodes, got d = {model.d}")


Kernel = Callable[[ChainState, np.random.Generator], tuple[ChainState, dict[str, np.ndarray]]]
"""One step of every chain: the new state and, per move, its accepted chains (the first: the structure move)."""


def sample_chains(
    fn: str, kernel: Kernel, state: ChainState, n_samples: int, burn_in: int, thin: int, rng: np.random.Generator, progress: bool, budget: Clock | None = None
) -> MCMCSamples:
    """``burn_in + n_samples * thin`` steps of ``kernel`` from ``state``, keeping every ``thin``-th state after the burn-in;
    or, with a wall-clock ``budget``, steps until ``budget.seconds`` have passed, ``n_samples`` states per chain kept
    evenly spaced after the first ``budget.burn_in_fraction`` of the steps (:class:`~gflownet_measure.jsp_gfn.baselines.samples.EvenThinning`;
    it stops at a kept state after at least :meth:`~gflownet_measure.jsp_gfn.baselines.samples.Clock.least` steps).
    A tqdm bar (``progress``) shows each move's acceptance rate."""
    t0 = time.perf_counter()
    C, d = state.adj.shape[:2]
    graphs, thetas = np.zeros((C, n_samples, d, d), dtype=bool), np.zeros((C, n_samples, state.theta.shape[1]))
    total = int(burn_in) + int(n_samples) * int(thin)
    timed = (budget, budget.thinning(n_samples)) if budget is not None else None
    accepted: dict[str, int] = {}
    bar = tqdm(
        total=round(budget.seconds) if budget else total, unit="s" if budget else "it", desc=fn, mininterval=2.0, dynamic_ncols=True, disable=not progress
    )
    step = 0
    while timed is not None or step < total:
        state, ok = kernel(state, rng)
        step += 1
        for name, mask in ok.items():
            accepted[name] = accepted.get(name, 0) + int(mask.sum())
        if progress and step % 1000 == 0:
            bar.set_postfix({name: f"{n / (step * C):.3f}" for name, n in accepted.items()}, refresh=False)
        if timed is None:
            bar.update()
            kept = step - burn_in
            if kept > 0 and kept % thin == 0:
                graphs[:, kept // thin - 1], thetas[:, kept // thin - 1] = state.adj, state.theta
        elif timed[1].due(step):
            timed[1].keep(step, (state.adj.copy(), state.theta.copy()))
            bar.n = round(min(time.perf_counter() - t0, timed[0].seconds))
            if time.perf_counter() - t0 >= timed[0].seconds and step >= timed[0].least(n_samples):
                break
    bar.close()
    if timed is not None:
        states = timed[1].take(n_samples, int(timed[0].burn_in_fraction * step))
        graphs, thetas = np.stack([s[0] for s in states], 1), np.stack([s[1] for s in states], 1)
    acceptance = next(iter(accepted.values())) / (step * C) if step else math.nan
    return MCMCSamples(torch.from_numpy(graphs.reshape(-1, d, d)), torch.from_numpy(thetas.reshape(-1, thetas.shape[-1])), acceptance, time.perf_counter() - t0)


def mh_mc3(
    model,
    n_samples: int = 1000,
    burn_in: int = 1000,
    thin: int = 10,
    n_chains: int = 4,
    seed: int = 0,
    *,
    jump_std: float = 1.0,
    theta_step: float = 0.05,
    progress: bool = False,
    max_parents: int | None = None,
    seconds: float | None = None,
    burn_in_fraction: float = 0.25,
) -> MCMCSamples:
    """MH-MC3 with joint :math:`\\theta` moves on :math:`\\pi(G, \\theta) \\propto R(G, \\theta)` (Deleu et al. 2023, Table D.1).

    Per step and chain: one reversible-jump MC3 structure move (module docstring), accepted with

    .. math:: \\log \\alpha = \\Delta \\log R + \\log n(G) - \\log n(G') - \\log q_w(u)\\,[\\text{add, reverse}] + \\log q_w(\\theta_{ij})\\,[\\text{remove, reverse}],

    then one Gaussian random-walk move of all active weights, :math:`\\log \\alpha = \\Delta \\log R`.

    Args:
        model: a CPD model (:mod:`~gflownet_measure.jsp_gfn.bayesnets.cpds`: ``d``, ``n_params``, ``active`` and ``log_reward(adj [B, d, d], theta [B, P]) -> [B]``).
        n_samples: states kept per chain.
        burn_in: steps discarded before the first kept state.
        thin: steps between kept states.
        n_chains: independent chains, run batched.
        seed: seed of the random generators; a run is a deterministic function of its arguments.
        jump_std: s of the proposal :math:`\\mathcal N(0, s^2)` for new weights (1 = the N(0, 1) prior of JSP).
        theta_step: step size :math:`\\epsilon` of the random walk on active weights.
        progress: show a tqdm bar with the acceptance rates.
        max_parents: at most this many parents per node (``None``: no limit); the target is then restricted to
            those DAGs, as :class:`~gflownet_measure.jsp_gfn.bayesnets.exact_posterior.ExactPosterior` with the same ``max_parents``.
        seconds: a wall-clock budget in place of ``burn_in`` and ``thin`` (a baseline at matched wall clock): the chains
            run for ``seconds``, the first ``burn_in_fraction`` of their steps discarded and ``n_samples`` states per
            chain kept evenly spaced over the rest (:func:`sample_chains`); the run is then not a deterministic function
            of its arguments.
        burn_in_fraction: with ``seconds``, the share of the steps discarded.

    Returns:
        :class:`MCMCSamples`, ``acceptance`` of the structure moves.
    """
    _check("mh_mc3", model, n_samples, burn_in, thin, n_chains, jump_std, theta_step)
    budget = clock(seconds, burn_in_fraction, "mh_mc3")
    target, table = Target(model), _MoveTable(model.d, max_parents)

    def kernel(state: ChainState, rng: np.random.Generator) -> tuple[ChainState, dict[str, np.ndarray]]:
        state, acc_G = mc3_step(state, target, rng, table, float(jump_std))
        state, acc_theta = random_walk_step(state, target, rng, float(theta_step))
        return state, {"acc_G": acc_G, "acc_theta": acc_theta}

    return sample_chains(
        "mh_mc3", kernel, init(target, int(n_chains)), int(n_samples), int(burn_in), int(thin), np.random.default_rng(int(seed)), progress, budget
    )


THETA_UPDATES = ("auto", "exact", "mala")
"""The weight update of :func:`gibbs_mc3`: ``exact`` conjugate draws (linear-Gaussian models), ``mala`` moves (any
differentiable model), ``auto``: exact where the model has ``theta_posterior``, MALA elsewhere."""


def gibbs_mc3(
    model,
    n_samples: int = 1000,
    burn_in: int = 1000,
    thin: int = 10,
    n_chains: int = 4,
    seed: int = 0,
    *,
    jump_std: float = 1.0,
    theta_update: str = "auto",
    theta_step: float = 0.05,
    theta_moves: int = 1,
    progress: bool = False,
    max_parents: int | None = None,
    seconds: float | None = None,
    burn_in_fraction: float = 0.25,
) -> MCMCSamples:
    """Gibbs-MC3 on :math:`\\pi(G, \\theta) \\propto R(G, \\theta)`: an MC3 move on G given :math:`\\theta`, then a
    :math:`\\theta` update given G (Deleu et al. 2023, Table D.1 and section 5.2).

    The structure move is that of :func:`mh_mc3` (the same reversible-jump Hastings ratio, the weights of
    the untouched edges held fixed). The weight update, by ``theta_update``: ``exact``, the conjugate draw
    :math:`\\theta \\sim P(\\theta | G, D)` from ``model.theta_posterior`` (means and covariances cached per graph);
    ``mala``, for CPDs with no closed form (MLP, categorical, zero-inflated; section 5.2 runs Gibbs-MC3 on MLP CPDs),
    ``theta_moves`` Metropolis-adjusted Langevin moves on :math:`\\theta \\mid G` (:func:`mala_step`, a
    Metropolis-within-Gibbs update), each chain's step started at ``theta_step`` and adapted during the burn-in
    (:func:`adapt_step`), then fixed; ``auto``: ``exact`` when the model has ``theta_posterior``, else ``mala``.

    Args:
        model: a CPD model; ``theta_update="exact"`` needs ``theta_posterior(adj)`` (``LinearGaussian``).
        n_samples, burn_in, thin, n_chains, seed, jump_std, progress, max_parents, seconds, burn_in_fraction: as in
            :func:`mh_mc3` (with ``seconds``, MALA adapts its step during the first ``burn_in_fraction`` of the time).
        theta_update: one of :data:`THETA_UPDATES`.
        theta_step, theta_moves: MALA's initial step and moves per step (``mala`` only).

    Returns:
        :class:`MCMCSamples`; with ``exact``, each kept ``theta`` is an exact posterior draw given its graph.
    """
    _check("gibbs_mc3", model, n_samples, burn_in, thin, n_chains, jump_std, theta_step)
    budget = clock(seconds, burn_in_fraction, "gibbs_mc3")
    if theta_update not in THETA_UPDATES:
        raise ValueError(f"gibbs_mc3: theta_update must be one of {THETA_UPDATES}, got {theta_update!r}")
    if int(theta_moves) != theta_moves or theta_moves < 1:
        raise ValueError(f"gibbs_mc3: theta_moves must be an integer >= 1, got {theta_moves!r}")
    exact = hasattr(model, "theta_posterior") if theta_update == "auto" else theta_update == "exact"
    if exact and not hasattr(model, "theta_posterior"):
        raise ValueError(
            f"gibbs_mc3: theta_update='exact' needs the conjugate posterior of a linear-Gaussian model; {type(model).__name__} has none: use 'mala' or 'auto'"
        )
    target, table = Target(model), _MoveTable(model.d, max_parents)
    if exact:
        draws = _GibbsDraws(model)

        def kernel(state: ChainState, rng: np.random.Generator) -> tuple[ChainState, dict[str, np.ndarray]]:
            state, acc_G = mc3_step(state, target, rng, table, float(jump_std))
            return gibbs_step(state, target, rng, draws), {"acc_G": acc_G}

    else:
        step, t = np.full(int(n_chains), float(theta_step)), 0  # per-chain MALA step; steps taken
        adapt_until = None if budget is None else time.perf_counter() + budget.burn_in_fraction * budget.seconds  # with a wall-clock budget

        def kernel(state: ChainState, rng: np.random.Generator) -> tuple[ChainState, dict[str, np.ndarray]]:
            nonlocal step, t
            state, acc_G = mc3_step(state, target, rng, table, float(jump_std))
            moved = np.asarray(state.adj.any(axis=(1, 2)))  # chains with weights to move
            for _ in range(int(theta_moves)):
                state, acc_theta = mala_step(state, target, rng, step)
                if (t < burn_in) if adapt_until is None else (time.perf_counter() < adapt_until):
                    step = adapt_step(step, acc_theta, moved, t)
            t += 1
            return state, {"acc_G": acc_G, "acc_theta": acc_theta}

    return sample_chains(
        "gibbs_mc3", kernel, init(target, int(n_chains)), int(n_samples), int(burn_in), int(thin), np.random.default_rng(int(seed)), progress, budget
    )
