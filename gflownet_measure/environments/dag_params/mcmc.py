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
per-call overhead dominates on d x d arrays), and ``model.log_reward`` is called once per step on all chains
and candidate states stacked. About 2,000 steps/s for one chain at d = 5 on one shared core (mostly
``log_reward``); the chains of a batch cost little more.

Samples: after ``burn_in`` steps, every ``thin``-th state of each chain, ``n_samples`` per chain;
``graphs[c * n_samples + t]`` is chain c's t-th kept state. Parameters are flat, ``theta [..., d * d]`` with
``theta[i * d + j]`` = :math:`\\theta_{ij}` (:class:`~.bayesnet.LinearGaussian`'s layout); the chains keep them as
``[d, d]`` matrices inside.
"""
from __future__ import annotations

import math
import time
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from gflownet_measure.gaussian import LOG_2PI

from .dags import valid_edges

__all__ = ["MOVES", "MCMCSamples", "StructureProposal", "legal_moves", "propose_structure", "mh_mc3", "gibbs_mc3"]

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


def _log_q(w: float, s: float) -> float:
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
    """The active coordinates of :class:`~.bayesnet.LinearGaussian`: ``adj`` flattened, ``[B, d * d]``."""
    return adj.reshape(len(adj), -1)


def _propose(adj: np.ndarray, theta: np.ndarray, s: float, u_pick: np.ndarray, z: np.ndarray, table: _MoveTable, active=_linear_active):
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


def propose_structure(adj: Tensor, theta: Tensor, jump_std: float = 1.0, generator: torch.Generator | None = None, max_parents: int | None = None) -> StructureProposal:
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


def _run(fn: str, model, n_samples: int, burn_in: int, thin: int, n_chains: int, seed: int, jump_std: float, theta_step: float, gibbs: bool, progress: bool, max_parents: int | None) -> MCMCSamples:
    """The shared loop: a structure move, then a random-walk (``gibbs=False``) or Gibbs (``gibbs=True``) weight move.

    One ``model.log_reward`` call per step on a stacked batch: MH evaluates :math:`(G', \\theta')`,
    :math:`(G', \\theta' + \\epsilon\\xi)` and :math:`(G, \\theta + \\epsilon\\xi)` (the random walk starts from
    whichever state the structure move leaves); Gibbs evaluates the fresh :math:`(G, \\theta)` with :math:`(G', \\theta')`.
    """
    _check(fn, model, n_samples, burn_in, thin, n_chains, jump_std, theta_step)
    t0 = time.perf_counter()
    C, d, s, eps = int(n_chains), model.d, float(jump_std), float(theta_step)
    rng = np.random.default_rng(int(seed))
    draw_theta = _GibbsDraws(model) if gibbs else None
    P = model.n_params
    adj = np.zeros((C, d, d), dtype=bool)  # every chain starts at the empty graph
    theta = np.zeros((C, P))
    table = _MoveTable(d, max_parents)
    graphs = np.zeros((C, n_samples, d, d), dtype=bool)
    thetas = np.zeros((C, n_samples, P))
    total = int(burn_in) + int(n_samples) * int(thin)
    n_struct = n_theta = 0

    def active(a: np.ndarray) -> np.ndarray:
        return model.active(_on(model, a)).cpu().numpy()

    def log_R(a: np.ndarray, t: np.ndarray) -> np.ndarray:
        return model.log_reward(_on(model, a), _on(model, t)).double().cpu().numpy()

    with torch.no_grad():
        cur = log_R(adj, theta)  # [C]
        bar = tqdm(range(total), desc=fn, mininterval=2.0, dynamic_ncols=True, disable=not progress)
        for step in bar:
            p_adj, p_theta, *_, log_h = _propose(adj, theta, s, rng.random(C), rng.standard_normal((C, P)), table, active)
            if gibbs:
                both = log_R(np.concatenate([adj, p_adj]), np.concatenate([theta, p_theta]))  # [2C]
                cur, new = both[:C], both[C:]
            else:
                xi = eps * rng.standard_normal((2, C, P))
                walk_new, walk_old = p_theta + xi[0] * active(p_adj), theta + xi[1] * active(adj)  # active entries only
                three = log_R(np.concatenate([p_adj, p_adj, adj]), np.concatenate([p_theta, walk_new, walk_old]))  # [3C]
                new, walk_R_new, walk_R_old = three[:C], three[C:2 * C], three[2 * C:]
            ok = np.log(rng.random(C)) < new - cur + log_h  # [C]; NaN is rejected
            okm, okt = ok[:, None, None], ok[:, None]
            adj, theta = np.where(okm, p_adj, adj), np.where(okt, p_theta, theta)
            cur = np.where(ok, new, cur)
            n_struct += int(ok.sum())
            if gibbs:
                theta = draw_theta(adj, rng).reshape(C, P)  # cur is refreshed next step
            else:
                walk, walk_R = np.where(okt, walk_new, walk_old), np.where(ok, walk_R_new, walk_R_old)
                ok = np.log(rng.random(C)) < walk_R - cur
                theta, cur = np.where(ok[:, None], walk, theta), np.where(ok, walk_R, cur)
                n_theta += int(ok.sum())
            kept = step + 1 - burn_in
            if kept > 0 and kept % thin == 0:
                graphs[:, kept // thin - 1], thetas[:, kept // thin - 1] = adj, theta
            if progress and (step + 1) % 1000 == 0:
                post = {"acc_G": f"{n_struct / ((step + 1) * C):.3f}"}
                if not gibbs:
                    post["acc_theta"] = f"{n_theta / ((step + 1) * C):.3f}"
                bar.set_postfix(post, refresh=False)
        bar.close()
    return MCMCSamples(torch.from_numpy(graphs.reshape(-1, d, d)), torch.from_numpy(thetas.reshape(-1, P)), n_struct / (total * C) if total else math.nan, time.perf_counter() - t0)


def mh_mc3(model, n_samples: int = 1000, burn_in: int = 1000, thin: int = 10, n_chains: int = 4, seed: int = 0, *, jump_std: float = 1.0, theta_step: float = 0.05, progress: bool = False, max_parents: int | None = None) -> MCMCSamples:
    """MH-MC3 with joint :math:`\\theta` moves on :math:`\\pi(G, \\theta) \\propto R(G, \\theta)` (Deleu et al. 2023, Table D.1).

    Per step and chain: one reversible-jump MC3 structure move (module docstring), accepted with

    .. math:: \\log \\alpha = \\Delta \\log R + \\log n(G) - \\log n(G') - \\log q_w(u)\\,[\\text{add, reverse}] + \\log q_w(\\theta_{ij})\\,[\\text{remove, reverse}],

    then one Gaussian random-walk move of all active weights, :math:`\\log \\alpha = \\Delta \\log R`.

    Args:
        model: a CPD model (:mod:`~.cpds`: ``d``, ``n_params``, ``active`` and ``log_reward(adj [B, d, d], theta [B, P]) -> [B]``).
        n_samples: states kept per chain.
        burn_in: steps discarded before the first kept state.
        thin: steps between kept states.
        n_chains: independent chains, run batched.
        seed: seed of the random generators; a run is a deterministic function of its arguments.
        jump_std: s of the proposal :math:`\\mathcal N(0, s^2)` for new weights (1 = the N(0, 1) prior of JSP).
        theta_step: step size :math:`\\epsilon` of the random walk on active weights.
        progress: show a tqdm bar with the acceptance rates.
        max_parents: at most this many parents per node (``None``: no limit); the target is then restricted to
            those DAGs, as :class:`~.exact.ExactPosterior` with the same ``max_parents``.

    Returns:
        :class:`MCMCSamples`, ``acceptance`` of the structure moves.
    """
    return _run("mh_mc3", model, n_samples, burn_in, thin, n_chains, seed, jump_std, theta_step, False, progress, max_parents)


def gibbs_mc3(model, n_samples: int = 1000, burn_in: int = 1000, thin: int = 10, n_chains: int = 4, seed: int = 0, *, jump_std: float = 1.0, progress: bool = False, max_parents: int | None = None) -> MCMCSamples:
    """Gibbs-MC3 on :math:`\\pi(G, \\theta) \\propto R(G, \\theta)`: an MC3 move on G given :math:`\\theta`, then :math:`\\theta \\sim P(\\theta | G, D)` (Deleu et al. 2023, Table D.1).

    The structure move is that of :func:`mh_mc3` (the same reversible-jump Hastings ratio, the weights of
    the untouched edges held fixed); the weight update is the exact conjugate draw from ``model.theta_posterior``
    (its means and covariances, cached per graph).

    Args:
        model: a ``LinearGaussian`` (``d``, ``log_reward`` and ``theta_posterior(adj)``).
        n_samples, burn_in, thin, n_chains, seed, jump_std, progress, max_parents: as in :func:`mh_mc3`.

    Returns:
        :class:`MCMCSamples`; each kept ``theta`` is an exact posterior draw given its graph.
    """
    return _run("gibbs_mc3", model, n_samples, burn_in, thin, n_chains, seed, jump_std, 1.0, True, progress, max_parents)
