"""Collapsed structure MC3 on :math:`P(G | D) \\propto P(G) \\prod_j P(x_j | X_{\\mathrm{Pa}(j)})`: the gold-standard DAG posterior beyond enumeration.

Target (Madigan & York 1995): the parameters integrated out in closed form, a distribution over DAGs only,

.. math:: \\log \\pi(G) = \\sum_j s(j, \\mathrm{Pa}_G(j)) + |E(G)| \\log\\tfrac{p}{1-p} + \\text{const},

with :math:`s` the local score of a :class:`~gflownet_measure.jsp_gfn.bayesnets.scores.LocalScores` (the linear-Gaussian marginal,
JSP-GFN eq. D.24, or BDeu for categorical data; :func:`no_closed_form` says which models have one) and :math:`\\log\\frac{p}{1-p}` its
``log_edge_odds`` (0 for the uniform prior). With ``max_parents`` the target is restricted to the DAGs within the limit.

**Moves** (add, remove and the reversal of Giudici & Castelo 2003), by a symmetric pair-based proposal: draw one of the
:math:`P = d(d-1)/2` unordered pairs :math:`\\{a, b\\}` and a fair coin, :math:`q = 1/(2P)` each. If the pair has no
edge, the coin picks which of :math:`a \\to b`, :math:`b \\to a` to add; if it has an edge :math:`i \\to j`, the coin
picks its removal or its reversal :math:`j \\to i`. Each move is undone by the same pair with the other state's coin
(add :math:`i \\to j` :math:`\\leftrightarrow` remove :math:`i \\to j`; reverse :math:`\\leftrightarrow` reverse), so
:math:`q(G' | G) = q(G | G') = 1/(2P)` on the digraphs without 2-cycles, and the Metropolis-Hastings ratio is the
target's alone,

.. math:: \\alpha = \\min\\Big(1, \\frac{\\pi(G')}{\\pi(G)}\\Big),\\qquad
          \\log\\frac{\\pi(G')}{\\pi(G)} = \\sum_{j \\in \\text{changed}} \\big[s(j, \\mathrm{Pa}_{G'}(j)) - s(j, \\mathrm{Pa}_G(j))\\big] + (|E'| - |E|) \\log\\tfrac{p}{1-p},

where only the child of the edge (add, remove) or both its ends (reverse) change. A proposal outside the support (a
cycle: :math:`j \\leadsto i` for an added :math:`i \\to j`, another path :math:`i \\leadsto j` for a reversed one; more
than ``max_parents`` parents) has :math:`\\pi(G') = 0` and is rejected. The chain is irreducible (remove down to the
empty graph, add up to any DAG) and aperiodic (it rejects), so its law converges to :math:`\\pi`. The acyclicity
check (a breadth-first walk over ancestor bitmasks) runs only for the proposals the score would accept.

**Speed**: the state is one parent bitmask per node (Python ints) and the current local score of each node; a step
is one or two dict look-ups of :math:`s` keyed ``code * d + j``. A parent set accepted for the first time is
expanded: it and its one-parent neighbours (every set a move proposes from it) are scored in one batched call of
``LocalScores.score``, so a proposal never waits for a score.

**Starts**: chain 0 the empty graph, chain :math:`c \\ge 1` an Erdos-Renyi DAG with edge probability 1/2 in a random
order (:func:`~gflownet_measure.jsp_gfn.bayesnets.datasets.simulated.random_er_dag`, about :math:`d(d-1)/4` edges; ``max_parents``
enforced by dropping random parents): over-dispersed against a sparse posterior, as the R-hat diagnostic asks.

**Diagnostics** over the edge indicators :math:`f_{ij}(G) = 1[i \\to j]`, from the kept states: the split-:math:`\\hat R`
(Gelman et al. 2013, BDA3 eqs. 11.3-11.4, each chain cut in halves: :math:`M = 2C` sequences of :math:`n` draws,
:math:`W` the mean within-half variance, :math:`B/n` the variance of the half means,
:math:`\\hat R = \\sqrt{((n - 1)/n\\, W + B/n) / W}`), its maximum over the pairs :math:`i \\ne j` (:func:`split_rhat`);
on 0/1 indicators rank normalisation and folding are affine maps, so this is also the rank-normalised
:math:`\\hat R` of Vehtari et al. 2021, whose threshold 1.01 we use; and the chain spread
:math:`\\max_{ij} (\\max_c \\hat p^{(c)}_{ij} - \\min_c \\hat p^{(c)}_{ij})`, the largest disagreement of two chains' edge
marginals.

**Measured** (one thread, ``nice``, on a 2-core machine shared with other jobs; ``simulate_er`` with the settings of
``make_problem``: N = 100, noise std 0.1, :math:`\\sigma^2 = 0.01`, :math:`\\sigma_0^2 = 1`, uniform graph prior; seed 0 of
the chains):

- d = 20, ER2, data seeds 0 / 1 (42 / 41 true edges): the posterior expects :math:`E|E| = 61.1` / 63.9 edges;
  acceptance 0.16 / 0.17. 8 chains x 1M steps: :math:`\\hat R` 1.018 / 1.003, chain spread 0.070 / 0.110
  (29 s / 44 s, 350k / 225k steps/s while the score cache fills); x 4M: 1.011 / 1.002, 0.047 / 0.034 (106 s / 115 s);
  x 16M (the defaults of :func:`gold_standard`): 1.0016 / 1.0003, 0.021 / 0.024 (223 s / 220 s, 610k / 620k steps/s,
  about 0.5 GB); x 32M (the two data seeds run side by side, 400k steps/s each): 1.0006 / 1.0001, 0.023 / 0.017. :math:`\\hat R < 1.01` from 4M steps per chain on; the spread,
  a maximum over 380 edges of the range over 8 chains, stays near 0.02 from 16M on, while the pooled marginals of the
  16M and the 32M runs agree to 0.003 (edges) and 0.004 (paths) at most, 0.0007 RMS.
- d = 5 against :class:`~gflownet_measure.jsp_gfn.bayesnets.exact_posterior.ExactPosterior`, 8 chains x 1M steps (5 s each):
  edge RMSE 0.0007 / 0.0008 (ER1, data seeds 0 / 1) and 0.0010 / 0.0009 (ER2), largest edge error 0.0024, path RMSE
  at most 0.0012, :math:`\\hat R \\le 1.0007`.

Commands: ``OMP_NUM_THREADS=1 nice python -c`` running, per data seed, ``sim = simulate_er(20, 2.0, 100, 100,
seed=data_seed, obs_std=0.1)``, ``model = make_model("lingauss", sim.train, obs_var=0.01, prior_var=1.0,
edges_per_node=2.0)``, ``gold_standard(model, n_chains=8, n_steps=S, seed=0, burn_in=1_000_000)`` (``burn_in = S // 4``
for S = 1M and 4M); at d = 5, ``simulate_er(5, k, 100, 100, seed=data_seed)`` and
``gold_standard(model, n_chains=8, n_steps=1_000_000)`` against ``ExactPosterior(model).features()``.

A tight ``max_parents`` can trap single-edge moves: at d = 4 with ``max_parents = 1`` and a node whose true parents are
three, moving between its one-parent modes passes through graphs of far lower posterior mass; the chains stay apart
and the diagnostics say so (:math:`\\hat R = \\infty`, spread 1; tested).
"""

from __future__ import annotations

import math
import random
import time
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor
from tqdm import tqdm

from gflownet_measure.gaussian import LOG_2PI
from gflownet_measure.jsp_gfn.bayesnets.dags import path_features
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import random_er_dag
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.scores import LocalScores, lookahead_scores
from gflownet_measure.jsp_gfn.bayesnets.structure_metrics import sample_features

from .samples import Clock, clock

__all__ = ["MAX_D", "CollapsedSamples", "GoldStandard", "no_closed_form", "split_rhat", "collapsed_mc3", "gold_standard"]

MAX_D = 62
"""The largest ``d``: a parent set is a bitmask kept in an int64."""


def no_closed_form(model) -> str:
    """Why ``model`` has no closed-form local score for the collapsed chain ("" when it has one: linear-Gaussian, or categorical with BDeu)."""
    if isinstance(model, LinearGaussian) or getattr(model, "kind", None) == "categorical":
        return ""
    return f"collapsed MC3 needs a closed-form local score (linear-Gaussian, or BDeu of categorical data); {type(model).__name__} has none"


class _BatchedScores:
    """``LocalScores.score`` on the missing codes of one child: ``(j, code, missing) -> [len(missing)]`` floats (any closed-form score; BDeu)."""

    def __init__(self, scores: LocalScores):
        self.score = scores.score

    def __call__(self, j: int, code: int, missing: list[int]) -> list[float]:
        codes = torch.tensor(missing, dtype=torch.long)
        return self.score(torch.full_like(codes, j), codes).tolist()


class _GaussianNeighbours:
    """The linear-Gaussian marginal (JSP-GFN eq. D.24) of a parent set and all its one-parent neighbours from one inverse.

    With :math:`A = C^{(j)} / \\sigma^2`, :math:`\\Lambda_P = I / \\sigma_0^2 + A_{PP}`, :math:`b = A_{\\cdot j}`,
    :math:`q_P = b_P^\\top \\Lambda_P^{-1} b_P` and :math:`H = \\Lambda_P^{-1}`,

    .. math:: s(j, P) = -\\tfrac12 \\big[N_j \\log 2\\pi\\sigma^2 + |P| \\log\\sigma_0^2 + \\log\\det\\Lambda_P + A_{jj} - q_P\\big];

    removing :math:`i \\in P` (Schur complement of :math:`H`): :math:`\\log\\det\\Lambda_{P - i} = \\log\\det\\Lambda_P + \\log H_{ii}`,
    :math:`q_{P - i} = q_P - (H b_P)_i^2 / H_{ii}`; adding :math:`i \\notin P` with :math:`u = H A_{Pi}`,
    :math:`t = 1/\\sigma_0^2 + A_{ii} - A_{iP} u` (:math:`\\ge 1/\\sigma_0^2`) and :math:`r = b_i - u^\\top b_P`:
    :math:`\\log\\det\\Lambda_{P + i} = \\log\\det\\Lambda_P + \\log t`, :math:`q_{P + i} = q_P + r^2 / t`. An expansion
    takes about a third of the batched torch call's time (measured at d = 20 on a shared core: 130 us against 320 us for
    a set and its 19 neighbours); equal to :meth:`~gflownet_measure.jsp_gfn.bayesnets.linear_gaussian.LinearGaussian.local_log_marginal`
    to 1e-8 (tested; measured 5e-10 at d = 20).
    """

    def __init__(self, model: LinearGaussian):
        d, self.prior_prec, self.log_prior_var = model.d, 1.0 / model.prior_var, math.log(model.prior_var)
        self.A = model.grams.double().cpu().numpy() / model.obs_var  # [d(j), d, d]
        self.diag = np.diagonal(self.A, axis1=1, axis2=2)  # [d(j), d]
        counts = model.counts.double().cpu().numpy()
        self.base = -0.5 * (counts * (LOG_2PI + math.log(model.obs_var)) + self.diag[np.arange(d), np.arange(d)])  # [d]
        self.others = [np.delete(np.arange(d), j) for j in range(d)]  # the candidate parents of j, ascending

    def __call__(self, j: int, code: int, missing: list[int]) -> list[float]:
        others, A = self.others[j], self.A[j]
        in_P = (code >> others) & 1 > 0
        order = np.concatenate([others[in_P], others[~in_P]])
        k = int(in_P.sum())
        M = A[order][:, order]
        lam = M[:k, :k] + self.prior_prec * np.eye(k)
        H, log_det = np.linalg.inv(lam), np.linalg.slogdet(lam)[1]
        b = A[order, j]
        h = H @ b[:k]
        q = float(b[:k] @ h)
        u = H @ M[:k, k:]  # [k, m]
        t = self.prior_prec + self.diag[j][order[k:]] - (M[:k, k:] * u).sum(0)
        r = b[k:] - u.T @ b[:k]
        H_diag = np.diag(H)
        flips = np.empty(len(others))
        flips[in_P] = -0.5 * ((k - 1) * self.log_prior_var + log_det + np.log(H_diag) - q + h**2 / H_diag)
        flips[~in_P] = -0.5 * ((k + 1) * self.log_prior_var + log_det + np.log(t) - q - r**2 / t)
        values = [-0.5 * (k * self.log_prior_var + log_det - q)] + flips.tolist()  # [code] + the flip of each candidate, ascending
        return [self.base[j] + values[0 if c == code else (c ^ code).bit_length() - ((c ^ code).bit_length() > j)] for c in missing]


class _ScoreCache:
    """:math:`s(j, P)` by key ``code * d + j`` in a dict, filled around the parent sets the chains hold.

    :meth:`expand` scores a parent set and its one-parent neighbours within ``cap`` parents (every set a move of the
    module docstring proposes from it) in one call of ``scorer(j, code, missing codes)``; a chain expands each parent
    set it accepts, so every proposal's score is already in the dict.
    """

    def __init__(self, scorer, d: int, cap: int):
        self.scorer, self.d, self.cap = scorer, d, cap
        self.values: dict[int, float] = {}
        self.expanded: set[int] = set()

    def expand(self, j: int, code: int) -> None:
        d, values = self.d, self.values
        missing = [c for c in [code] + [code ^ 1 << i for i in range(d) if i != j] if c.bit_count() <= self.cap and c * d + j not in values]
        if missing:
            values.update(zip((c * d + j for c in missing), self.scorer(j, code, missing)))
        self.expanded.add(code * d + j)


class _Target:
    """:math:`\\log\\pi` of a model, collapsed: ``scorer(j, code, missing)`` (:class:`_ScoreCache`), ``d`` and the per-edge log-odds of the graph prior."""

    def __init__(self, fn: str, model):
        if not 2 <= model.d <= MAX_D:
            raise ValueError(f"{fn}: structure moves need 2 <= d <= {MAX_D} nodes, got d = {model.d}")
        reason = no_closed_form(model)
        if reason:
            raise ValueError(f"{fn}: {reason}")
        self.d, self.log_edge_odds = model.d, model.log_edge_odds
        self.scorer = _GaussianNeighbours(model) if isinstance(model, LinearGaussian) else _BatchedScores(lookahead_scores(model))


class _Chain:
    """One chain's state: ``parents[j]`` the bitmask of :math:`\\mathrm{Pa}(j)`, ``local[j]`` = :math:`s(j, \\mathrm{Pa}(j))`; ``rng.random()`` its uniforms."""

    def __init__(self, parents: list[int], cache: _ScoreCache, log_edge_odds: float, rng):
        self.d = len(parents)
        self.parents, self.cache, self.log_edge_odds, self.rng = list(parents), cache, float(log_edge_odds), rng
        for j, code in enumerate(self.parents):
            cache.expand(j, code)
        self.local = [cache.values[code * self.d + j] for j, code in enumerate(self.parents)]
        self.pairs = [(a, b) for a in range(self.d) for b in range(a + 1, self.d)]


def _reaches(parents: list[int], src: int, dst: int) -> bool:
    """Whether a directed path :math:`src \\leadsto dst` (``src != dst``) exists: breadth-first over the ancestors of ``dst``."""
    target = 1 << src
    seen = frontier = parents[dst]
    while frontier:
        if frontier & target:
            return True
        grown = 0
        while frontier:
            low = frontier & -frontier
            grown |= parents[low.bit_length() - 1]
            frontier ^= low
        frontier = grown & ~seen
        seen |= frontier
    return False


def _advance(chain: _Chain, n_steps: int) -> int:
    """``n_steps`` MH steps of the module docstring on ``chain`` (in place); returns the number accepted.

    Uniforms: one picks the pair and the coin (``k = floor(2 P u)``, pair ``k // 2``, coin ``k % 2``), a second, drawn
    only when :math:`\\log\\pi(G') < \\log\\pi(G)`, accepts with probability :math:`\\pi(G')/\\pi(G)`.
    """
    parents, local, pairs, d = chain.parents, chain.local, chain.pairs, chain.d
    values, expanded, expand, cap, lo = chain.cache.values, chain.cache.expanded, chain.cache.expand, chain.cache.cap, chain.log_edge_odds
    rand, exp, n2 = chain.rng.random, math.exp, 2 * len(pairs)
    accepted = 0
    for _ in range(n_steps):
        k = int(rand() * n2)
        a, b = pairs[k >> 1]
        coin = k & 1
        if parents[b] >> a & 1:
            i, j = a, b
        elif parents[a] >> b & 1:
            i, j = b, a
        else:  # no edge: add a -> b (coin 1) or b -> a (coin 0)
            i, j = (a, b) if coin else (b, a)
            new_j = parents[j] | 1 << i
            if new_j.bit_count() > cap:
                continue
            s_j = values[new_j * d + j]
            delta = s_j - local[j] + lo
            if (delta < 0 and rand() >= exp(delta)) or _reaches(parents, j, i):
                continue
            parents[j], local[j] = new_j, s_j
            if new_j * d + j not in expanded:
                expand(j, new_j)
            accepted += 1
            continue
        new_j = parents[j] & ~(1 << i)
        s_j = values[new_j * d + j]
        if coin:  # remove i -> j
            delta = s_j - local[j] - lo
            if delta < 0 and rand() >= exp(delta):
                continue
        else:  # reverse i -> j into j -> i
            new_i = parents[i] | 1 << j
            if new_i.bit_count() > cap:
                continue
            s_i = values[new_i * d + i]
            delta = s_i + s_j - local[i] - local[j]
            if delta < 0 and rand() >= exp(delta):
                continue
            old_j, parents[j] = parents[j], new_j
            if _reaches(parents, i, j):  # another path i ~> j: j -> i would close a cycle
                parents[j] = old_j
                continue
            parents[i], local[i] = new_i, s_i
            if new_i * d + i not in expanded:
                expand(i, new_i)
        parents[j], local[j] = new_j, s_j
        if new_j * d + j not in expanded:
            expand(j, new_j)
        accepted += 1
    return accepted


def _start(d: int, chain: int, rng: np.random.Generator, cap: int) -> list[int]:
    """Parent bitmasks of chain ``chain``'s first state (module docstring, Starts)."""
    if chain == 0:
        return [0] * d
    adj, _ = random_er_dag(d, (d - 1) / 4, rng)  # p = 2k / (d - 1) = 1/2
    for j in range(d):
        parents = np.flatnonzero(adj[:, j])
        if len(parents) > cap:
            adj[rng.choice(parents, len(parents) - cap, replace=False), j] = False
    return [int(c) for c in (adj.astype(np.int64) << np.arange(d)[:, None]).sum(0)]


class _Run(NamedTuple):
    """The kept states of every chain, ``codes [C, S, d]`` int64 parent bitmasks; the acceptance rate over all steps; the wall time."""

    codes: np.ndarray
    acceptance: float
    seconds: float


def _run_chains(
    target: _Target, n_chains: int, n_samples: int, burn_in: int, thin: int, seed: int, max_parents: int | None, progress: bool, budget: Clock | None = None
) -> _Run:
    """``burn_in + n_samples * thin`` steps of each chain, one after the other (one score cache shared), keeping every
    ``thin``-th state after the burn-in; or, with a wall-clock ``budget``, each chain run for ``budget.seconds / n_chains`` (:func:`_timed`)."""
    t0 = time.perf_counter()
    d = target.d
    cap = d if max_parents is None else int(max_parents)
    cache = _ScoreCache(target.scorer, d, cap)
    codes = np.zeros((n_chains, n_samples, d), dtype=np.int64)
    block = max(1, 100_000 // thin)  # kept states between progress updates
    accepted, total = 0, n_chains * (burn_in + n_samples * thin)
    with tqdm(
        total=round(budget.seconds) if budget else total,
        desc="collapsed MC3",
        unit="s" if budget else "step",
        unit_scale=not budget,
        mininterval=2.0,
        disable=not progress,
    ) as bar:
        for c, child in enumerate(np.random.SeedSequence(seed).spawn(n_chains)):
            start_rng, step_seed = np.random.default_rng(child), int(child.generate_state(1)[0])
            chain = _Chain(_start(d, c, start_rng, cap), cache, target.log_edge_odds, random.Random(step_seed))
            if budget is not None:
                kept, n_accepted, n_steps = _timed(chain, n_samples, budget._replace(seconds=budget.seconds / n_chains), bar)
                codes[c] = np.asarray(kept)
                accepted, total = accepted + n_accepted, total + n_steps
                continue
            for done in range(0, burn_in, block * thin):
                accepted += _advance(chain, min(block * thin, burn_in - done))
                bar.update(min(block * thin, burn_in - done))
            for s in range(n_samples):
                accepted += _advance(chain, thin)
                codes[c, s] = chain.parents
                if (s + 1) % block == 0 or s + 1 == n_samples:
                    bar.update((s % block + 1) * thin)
    return _Run(codes, accepted / total if total else math.nan, time.perf_counter() - t0)


def _timed(chain: _Chain, n_samples: int, budget: Clock, bar) -> tuple[list[list[int]], int, int]:
    """Steps of ``chain`` until ``budget.seconds`` have passed and at least ``n_samples`` states follow the burn-in
    (checked at each kept state, so it overruns by at most one thinning interval); returns ``n_samples`` states evenly
    spaced after the first ``budget.burn_in_fraction`` of the steps (:meth:`~gflownet_measure.jsp_gfn.baselines.samples.Clock.thinning`:
    room for :math:`2n / (1 - f)`, so that at least :math:`n` of its states follow the burn-in), the accepted steps and the steps."""
    least, kept = budget.least(n_samples), budget.thinning(n_samples)
    t0 = last = time.perf_counter()
    steps = accepted = 0
    while True:
        block = kept.thin - steps % kept.thin  # steps to the next kept state
        accepted += _advance(chain, block)
        steps += block
        kept.keep(steps, list(chain.parents))
        now = time.perf_counter()
        if now - last >= 1.0:
            bar.update(round(now - t0) - round(last - t0))
            last = now
        if now - t0 >= budget.seconds and steps > least:
            return kept.take(n_samples, int(budget.burn_in_fraction * steps)), accepted, steps


def _adjacency(codes: np.ndarray) -> np.ndarray:
    """``codes [..., d]`` parent bitmasks as ``adj [..., d, d]`` bool, ``adj[..., i, j]`` = bit ``i`` of ``codes[..., j]``."""
    d = codes.shape[-1]
    return (codes[..., None, :] >> np.arange(d)[:, None]) & 1 > 0


def _edge_means(codes: np.ndarray) -> np.ndarray:
    """``[..., d, d]``: the edge frequencies of the states ``codes [..., S, d]`` (mean over ``S``)."""
    d = codes.shape[-1]
    return np.stack([(codes >> i & 1).mean(-2) for i in range(d)], -2)


def split_rhat(codes: np.ndarray) -> float:
    """:math:`\\max_{i \\ne j} \\hat R_{ij}`, the split-:math:`\\hat R` of the edge indicators of ``codes [C, S, d]`` (module docstring).

    For a 0/1 indicator with half means :math:`m_h` the within-half variance is :math:`\\frac{n}{n-1} m_h (1 - m_h)`; an edge
    constant within every half has :math:`\\hat R = 1` if all halves agree, :math:`\\infty` if not. ``nan`` below 4 draws per chain.
    """
    C, S, d = codes.shape
    n = S // 2
    if n < 2:
        return math.nan
    means = _edge_means(np.concatenate([codes[:, :n], codes[:, S - n :]]))  # [2C, d, d], the first and last n draws
    W = (n / (n - 1) * means * (1 - means)).mean(0)
    B_n = means.var(0, ddof=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rhat = np.sqrt(((n - 1) / n * W + B_n) / W)
    rhat = np.where(W > 0, rhat, np.where(B_n > 0, math.inf, 1.0))
    return float(rhat[~np.eye(d, dtype=bool)].max())


def _chain_spread(codes: np.ndarray) -> float:
    """:math:`\\max_{ij} (\\max_c \\hat p^{(c)}_{ij} - \\min_c \\hat p^{(c)}_{ij})` over the chains of ``codes [C, S, d]``."""
    means = _edge_means(codes)
    return float((means.max(0) - means.min(0)).max())


def _check(fn: str, **values) -> None:
    """A one-line ``ValueError`` for any value out of range (``max_parents``: ``None`` or >= 1; the others integers >= their minimum)."""
    lows = {"n_samples": 1, "burn_in": 0, "thin": 1, "n_chains": 1, "n_steps": 1}
    for name, value in values.items():
        if name == "max_parents":
            if value is not None and (isinstance(value, bool) or int(value) != value or value < 1):
                raise ValueError(f"{fn}: max_parents must be None or an integer >= 1, got {value!r}")
        elif isinstance(value, bool) or int(value) != value or value < lows[name]:
            raise ValueError(f"{fn}: {name} must be an integer >= {lows[name]}, got {value!r}")


class CollapsedSamples(NamedTuple):
    """Output of :func:`collapsed_mc3`: ``graphs [K, d, d]`` bool, ``K = n_chains * n_samples`` chain-major; ``thetas [K, d * d]``
    float64 drawn from :math:`P(\\theta | G, D)` (linear-Gaussian models) or ``None``; ``acceptance`` over all steps and
    chains; ``seconds``; ``rhat`` the largest split-:math:`\\hat R` of the edge indicators and ``chain_spread`` the
    largest difference between two chains' edge marginals (module docstring)."""

    graphs: Tensor
    thetas: Tensor | None
    acceptance: float
    seconds: float
    rhat: float
    chain_spread: float

    def marginals(self) -> dict[str, Tensor]:
        """The edge, path and Markov-blanket marginals ``[d, d]`` float64 over all chains' samples (:func:`~gflownet_measure.jsp_gfn.bayesnets.structure_metrics.sample_features`)."""
        return sample_features(self.graphs)


def collapsed_mc3(
    model,
    n_samples: int = 1000,
    burn_in: int = 1000,
    thin: int = 10,
    n_chains: int = 4,
    seed: int = 0,
    *,
    max_parents: int | None = None,
    progress: bool = False,
    seconds: float | None = None,
    burn_in_fraction: float = 0.25,
) -> CollapsedSamples:
    """Collapsed structure MC3 on :math:`P(G | D)` (Madigan & York 1995; module docstring), :math:`\\theta` drawn afterwards.

    Per step and chain: one add / remove / reverse proposal from a random pair of nodes, accepted with
    :math:`\\min(1, \\pi(G') / \\pi(G))`, :math:`\\log \\pi(G) = \\sum_j s(j, \\mathrm{Pa}(j)) + |E| \\log\\frac{p}{1-p}`.

    Args:
        model: :class:`LinearGaussian` (its marginal, JSP-GFN eq. D.24) or a categorical model (BDeu; its MLP's
            :math:`\\theta` is not sampled); any other model is refused (:func:`no_closed_form`).
        n_samples: states kept per chain.
        burn_in: steps discarded before the first kept state.
        thin: steps between kept states.
        n_chains: chains, from different starts (module docstring), run one after the other.
        seed: a run is a deterministic function of its arguments.
        max_parents: at most this many parents per node (``None``: no limit).
        progress: show a tqdm bar.
        seconds: a wall-clock budget in place of ``burn_in`` and ``thin`` (a baseline at matched wall clock): each
            chain runs for ``seconds / n_chains``, its first ``burn_in_fraction`` of steps discarded and ``n_samples``
            states kept evenly spaced over the rest (the run is then not a deterministic function of its arguments).
        burn_in_fraction: with ``seconds``, the share of each chain's steps discarded.

    Returns:
        :class:`CollapsedSamples`.
    """
    _check("collapsed_mc3", n_samples=n_samples, burn_in=burn_in, thin=thin, n_chains=n_chains, max_parents=max_parents)
    budget = clock(seconds, burn_in_fraction, "collapsed_mc3")
    target = _Target("collapsed_mc3", model)
    run = _run_chains(target, int(n_chains), int(n_samples), int(burn_in), int(thin), int(seed), max_parents, progress, budget)
    graphs = torch.from_numpy(_adjacency(run.codes.reshape(-1, model.d)))
    thetas = model.sample_theta_posterior(graphs, torch.Generator().manual_seed(int(seed))) if isinstance(model, LinearGaussian) else None
    return CollapsedSamples(graphs, thetas, run.acceptance, run.seconds, split_rhat(run.codes), _chain_spread(run.codes))


class GoldStandard(NamedTuple):
    """Output of :func:`gold_standard`: the posterior's ``edge`` :math:`P(i \\to j | D)` and ``path`` :math:`P(i \\leadsto j | D)`
    marginals ``[d, d]`` float64 over all chains; ``rhat`` and ``chain_spread`` (module docstring); ``n_chains`` x
    ``n_steps`` steps after the burn-in; ``acceptance``; ``seconds``."""

    edge: Tensor
    path: Tensor
    rhat: float
    chain_spread: float
    n_chains: int
    n_steps: int
    acceptance: float
    seconds: float

    @property
    def expected_edges(self) -> float:
        """:math:`E[|E(G)| \\mid D] = \\sum_{ij} P(i \\to j | D)`."""
        return float(self.edge.sum())


def gold_standard(
    model,
    n_chains: int = 8,
    n_steps: int = 16_000_000,
    seed: int = 0,
    *,
    burn_in: int | None = None,
    thin: int | None = None,
    max_parents: int | None = None,
    progress: bool = True,
) -> GoldStandard:
    """The reference marginals :math:`P(i \\to j | D)`, :math:`P(i \\leadsto j | D)` by :func:`collapsed_mc3`, with its convergence diagnostics.

    The defaults, 8 chains x 16M steps after 1M of burn-in, gave :math:`\\hat R \\le 1.002`, chain spread 0.021-0.024
    and pooled marginals within 0.003 of a run twice as long, in under 4 minutes on one core at d = 20, ER2, N = 100
    (module docstring, Measured).

    Args:
        model: as in :func:`collapsed_mc3`.
        n_chains: chains from different starts (at least 2 for the chain spread).
        n_steps: steps per chain after the burn-in.
        seed: seed of the run.
        burn_in: steps discarded per chain (``None``: ``n_steps // 16``).
        thin: steps between kept states (``None``: ``max(1, n_steps // 20000)``, 20,000 states per chain).
        max_parents: at most this many parents per node (``None``: no limit).
        progress: show a tqdm bar.
    """
    _check("gold_standard", n_chains=n_chains, n_steps=n_steps, max_parents=max_parents)
    burn_in = int(n_steps) // 16 if burn_in is None else burn_in
    thin = max(1, int(n_steps) // 20_000) if thin is None else thin
    _check("gold_standard", burn_in=burn_in, thin=thin)
    target = _Target("gold_standard", model)
    if thin > n_steps:
        raise ValueError(f"gold_standard: thin must be in 1..n_steps = {n_steps}, got {thin!r}")
    run = _run_chains(target, int(n_chains), int(n_steps) // int(thin), int(burn_in), int(thin), int(seed), max_parents, progress)
    codes = run.codes.reshape(-1, model.d)
    path = torch.stack([path_features(torch.from_numpy(_adjacency(codes[k : k + 4096]))).sum(0) for k in range(0, len(codes), 4096)]).sum(0) / len(codes)
    edge = torch.from_numpy(_edge_means(codes))
    return GoldStandard(edge, path, split_rhat(run.codes), _chain_spread(run.codes), int(n_chains), int(n_steps), run.acceptance, run.seconds)
