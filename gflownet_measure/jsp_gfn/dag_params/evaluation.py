"""The learned sampler against the exact posterior: its exact marginal over graphs, and the metrics of Table 3 / D.1.

For :math:`d \\le 5` every DAG is enumerated, so the policy's terminating distribution over graphs is computed
exactly rather than estimated from samples. Summing :math:`P_F` over every edge order of :math:`G` is a forward
pass over the lattice of DAGs by edge count:

.. math:: P^\\top(G') = \\sum_{e \\in E(G')} P^\\top(G' - e)\\, P_F(G' \\mid G' - e),\\qquad P^\\top(\\emptyset) = 1,\\qquad
   P_T(G) = P^\\top(G)\\, P_F(\\text{stop} \\mid G),

(:math:`P^\\top`: the probability of passing through :math:`(G, \\#)`), and :math:`P_T(G, \\theta) = P_T(G) P_\\phi(\\theta | G)`.
This replaces the beam-search estimate of Deleu et al. 2023, D.3.2 where enumeration is possible.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from sklearn.linear_model import RANSACRegressor
from torch import Tensor
from tqdm import tqdm

from gflownet_measure.jsp_gfn.bayesnets.dags import FEATURES, dag_codes, transitive_closure, valid_edges, weighted_features
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.structure_metrics import auroc, expected_shd, feature_metrics, rmse_pearson, sample_features
from gflownet_measure.jsp_gfn.dag_params.policy import JSPPolicy
from gflownet_measure.training import seeded_generator

__all__ = [
    "model_graph_log_marginals",
    "estimate_graph_log_marginal",
    "fit_sample_count",
    "graph_metrics",
    "mean_field_metrics",
    "posterior_metrics",
    "heldout_metrics",
    "sample_metrics",
    "conditional_theta_metrics",
    "fit_metrics",
]


@torch.no_grad()
def model_graph_log_marginals(policy: JSPPolicy, dags: Tensor, chunk: int = 4096) -> Tensor:
    """:math:`\\log P_T(G)` ``[n]`` float64 for every graph of ``dags [n, d, d]`` (all DAGs reachable under the policy's kernel, sorted by code)."""
    n, d = dags.shape[0], dags.shape[-1]
    log_edge = torch.empty(n, d * d, dtype=torch.float64)
    log_stop = torch.empty(n, dtype=torch.float64)
    for i in range(0, n, chunk):
        _, e, s = policy.heads(dags[i : i + chunk])
        log_edge[i : i + chunk], log_stop[i : i + chunk] = e.flatten(1).double(), s.double()
    codes = dag_codes(dags)
    bits = dag_codes(torch.eye(d * d, dtype=torch.bool).reshape(d * d, d, d))  # [d^2]: the code of each single edge
    n_edges = dags.flatten(1).sum(1)
    log_through = torch.full((n,), float("-inf"), dtype=torch.float64)
    log_through[n_edges == 0] = 0.0
    for level in range(1, int(n_edges.max()) + 1):
        rows = (n_edges == level).nonzero()[:, 0]
        has = dags[rows].flatten(1)  # [m, d^2]
        parent = torch.searchsorted(codes, (codes[rows, None] - bits[None]).clamp(min=0)).clamp(max=n - 1)  # [m, d^2]
        terms = log_through[parent] + log_edge[parent, torch.arange(d * d)[None]]
        log_through[rows] = torch.where(has, terms, torch.full_like(terms, float("-inf"))).logsumexp(1)
    return log_through + log_stop


def _structure_log_probs(policy: JSPPolicy, flat: Tensor, rows: int = 2048) -> tuple[Tensor, Tensor]:
    """``(log P_F(G + e | G) [n, d^2], log P_F(stop | G) [n])`` float64 (eq. 9-10, :func:`~.policy.action_log_probs`) at
    the graphs ``flat [n, d^2]`` bool, ``rows`` graphs per network call. The network's trunk alone: the parameter head
    :math:`P_\\phi(\\theta | G)` plays no part in :math:`P_T(G)` (a solver head's Newton step was two thirds of the cost)."""
    d = policy.kernel.d
    log_edge = torch.empty(len(flat), d * d, dtype=torch.float64)
    log_stop = torch.empty(len(flat), dtype=torch.float64)
    for i in range(0, len(flat), rows):
        adj = flat[i : i + rows].view(-1, d, d)
        _, _, edge_logits, stop_logit = policy.network.trunk(adj.to(policy.network_dtype))
        e, s = policy._log_probs(adj, edge_logits, stop_logit, valid_edges(adj, transitive_closure(adj), policy.kernel.max_parents))
        log_edge[i : i + rows], log_stop[i : i + rows] = e.flatten(1), s
    return log_edge, log_stop


def _log_order_sums(policy: JSPPolicy, graphs: Tensor, beam: int, n_orders: int, generator: torch.Generator | None) -> Tensor:
    """The estimate of :math:`\\log \\sum_{\\tau \\in \\mathrm{orders}(E)} P_F(\\tau)` ``[G]`` float64 of
    :func:`estimate_graph_log_marginal` for the distinct graphs ``graphs [G, d^2]`` bool, all in lockstep: at step ``t``
    the beams' prefixes of ``t`` edges and the random orders' prefixes of every graph still growing go through one
    policy call on their distinct partial graphs (prefixes shared by several orders, or by an order and the beam, are
    evaluated once). The orders are drawn graph by graph, ``torch.rand(n_orders, k)`` each for ``k > 1``, from ``generator``."""
    G, dd = graphs.shape
    ninf = float("-inf")
    k = graphs.sum(1)  # [G]
    K = int(k.max())
    slots = torch.arange(K)
    edges = torch.argsort((~graphs).to(torch.int8), dim=1, stable=True)[:, :K]  # [G, K]: the edges in row-major order, then padding
    drawn = [(g, torch.rand(n_orders, int(k[g]), generator=generator).argsort(1)) for g in range(G) if k[g] > 1]  # uniform permutations
    owner = torch.tensor([g for g, _ in drawn], dtype=torch.long).repeat_interleave(n_orders)  # [R]: the graph of each order
    orders = torch.cat([torch.nn.functional.pad(o, (0, K - o.shape[1]), value=-1) for _, o in drawn]) if drawn else torch.zeros(0, K, dtype=torch.long)
    part_is, log_is = torch.zeros(len(owner), dd, dtype=torch.bool), torch.zeros(len(owner), dtype=torch.float64)  # [R]: each order's prefix and its log P_F
    paths, log_p = torch.zeros(G, 1, 0, dtype=torch.long), torch.zeros(G, 1, dtype=torch.float64)  # the beams: positions into edges
    final, final_log_p = torch.full((G, beam, K), -1, dtype=torch.long), torch.full((G, beam), ninf, dtype=torch.float64)
    final_log_p[k == 0, 0] = 0.0  # the empty graph: one empty order
    for t in range(K):
        W = paths.shape[1]
        part = torch.zeros(G, W, dd, dtype=torch.bool)
        part.scatter_(2, edges.gather(1, paths.flatten(1)).view(G, W, t), True)
        at_beam = (k > t)[:, None] & (log_p > ninf)  # [G, W]: the prefixes kept (a row of fewer than W is padded with -inf)
        at_is = (k > t)[owner]
        distinct, where = torch.unique(torch.cat([part[at_beam], part_is[at_is]]), dim=0, return_inverse=True)
        log_edge = _structure_log_probs(policy, distinct)[0]
        n_beam = int(at_beam.sum())
        step = torch.full((G, W, K), ninf, dtype=torch.float64)
        step[at_beam] = log_edge[where[:n_beam]].gather(1, edges[at_beam.nonzero()[:, 0]])
        used = torch.zeros(G, W, K, dtype=torch.bool).scatter_(2, paths, True) | (slots >= k[:, None])[:, None, :]
        top = torch.where(used, ninf, log_p[:, :, None] + step).flatten(1).topk(min(beam, W * K), dim=1)  # extend every prefix by every edge it lacks
        paths = torch.cat([paths.gather(1, (top.indices // K)[:, :, None].expand(-1, -1, t)), (top.indices % K)[:, :, None]], 2)
        log_p = top.values
        done = k == t + 1
        final[done, : paths.shape[1], : t + 1], final_log_p[done, : paths.shape[1]] = paths[done], log_p[done]
        rows = at_is.nonzero()[:, 0]
        nxt = edges[owner[rows], orders[rows, t]]
        log_is[rows] += log_edge[where[n_beam:], nxt]
        part_is[rows, nxt] = True
    log_beam = final_log_p.logsumexp(1)
    kept = (final_log_p > ninf).nonzero()  # [(g, w)]: the orders of the beams, tagged by graph, against the drawn ones
    _, member = torch.unique(
        torch.cat([torch.cat([kept[:, :1], final[kept[:, 0], kept[:, 1]]], 1), torch.cat([owner[:, None], orders], 1)]), dim=0, return_inverse=True
    )
    terms = torch.where(torch.isin(member[len(kept) :], member[: len(kept)]), ninf, log_is)  # the orders outside the beam
    peak = torch.full((G,), ninf, dtype=torch.float64).scatter_reduce(0, owner, terms, "amax")
    peak = torch.where(peak > ninf, peak, torch.zeros_like(peak))
    log_mean = torch.zeros(G, dtype=torch.float64).index_add(0, owner, (terms - peak[owner]).exp()).log() + peak + torch.lgamma(k + 1.0) - math.log(n_orders)
    return torch.logaddexp(log_beam, log_mean)


@torch.no_grad()
def estimate_graph_log_marginal(
    policy: JSPPolicy, adj: Tensor, beam: int = 128, n_orders: int = 1000, generator: torch.Generator | None = None, progress: bool = False, rows: int = 2**16
) -> Tensor:
    """:math:`\\log P_T(G)` ``[B]`` float64 of the graphs ``adj [B, d, d]`` by the estimator of Deleu et al. 2023, D.3.2
    (docs/references.md, 'Beam-search estimate of log P_T (D.3.2)'), for spaces too large for :func:`model_graph_log_marginals`:

    .. math:: P_T(G) = P_F(\\text{stop} \\mid G) \\sum_{\\tau \\in \\mathrm{orders}(E)} P_F(\\tau),\\qquad
              \\sum_\\tau P_F(\\tau) \\approx \\sum_{\\tau \\in \\mathcal B} P_F(\\tau)
              + \\frac{|E|!}{M} \\sum_{m \\le M} P_F(\\tau_m)\\, 1[\\tau_m \\notin \\mathcal B].

    :math:`\\mathcal B`: the ``beam`` most probable orders of the edges of G found by beam search (the ``beam`` best
    prefixes kept at each length); :math:`\\tau_m`: ``n_orders`` orders drawn from the uniform :math:`P_B`, i.e.
    uniformly random permutations of E, :math:`P_B(\\tau) = 1 / |E|!`. The second term is unbiased for the orders
    outside the beam, so the sum is unbiased (its log is not); it is exact when :math:`|E|! \\le` ``beam``.

    Each distinct graph is estimated once, in groups of about ``rows / (beam + n_orders)`` graphs grown in lockstep
    (:func:`_log_order_sums`). The policy evaluations are at most :math:`|E| (\\text{beam} + M)` per graph
    (:func:`fit_sample_count`), fewer where prefixes coincide; their network calls run without the parameter head.
    ``progress`` shows a tqdm bar over the distinct graphs.
    """
    graphs, inverse = torch.unique(adj.bool().flatten(1), dim=0, return_inverse=True)  # samples repeat graphs: estimate each once
    out = _structure_log_probs(policy, graphs)[1]
    per_group = max(1, rows // (beam + n_orders))
    with tqdm(total=len(graphs), desc="log P_T (beam search)", mininterval=2.0, dynamic_ncols=True, disable=not progress) as bar:
        for i in range(0, len(graphs), per_group):
            out[i : i + per_group] += _log_order_sums(policy, graphs[i : i + per_group], beam, n_orders, generator)
            bar.update(len(graphs[i : i + per_group]))
    return out[inverse]


def fit_sample_count(n_edges: Tensor, budget: float, beam: int = 128, n_orders: int = 1000) -> int:
    """How many leading samples of edge counts ``n_edges [K]`` :func:`estimate_graph_log_marginal` estimates within
    ``budget`` policy evaluations: the largest :math:`n \\le K` with :math:`\\sum_{k < n} |E_k| (\\text{beam} + M) \\le`
    ``budget`` (its bound: :math:`|E|` steps of at most ``beam`` prefixes and ``n_orders`` = M orders), at least 2 (a
    line needs two points). Deterministic: the samples' edge counts decide it, not a clock."""
    if budget <= 0:
        raise ValueError(f"budget={budget}: the policy evaluations allowed must be positive")
    cost = n_edges.double().cumsum(0) * (beam + n_orders)
    return min(len(n_edges), max(2, int((cost <= budget).sum())))


def _line_fit(x: np.ndarray, y: np.ndarray) -> tuple[float, float, float]:
    """Least-squares slope of ``y`` on ``x``, the RANSAC slope, and Pearson r.

    Deleu et al. 2023 (section 5.3, Fig. 3c and 4) fit the slope with RANSAC so that a few badly estimated samples do not
    drive it: scikit-learn's ``RANSACRegressor`` (a linear model, its default residual threshold, the median absolute
    deviation of ``y``), seeded, so the fit repeats.
    """
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return float("nan"), float("nan"), float("nan")
    ransac = RANSACRegressor(random_state=0).fit(x[:, None], y)
    return float(np.polyfit(x, y, 1)[0]), float(ransac.estimator_.coef_[0]), float(np.corrcoef(x, y)[0, 1])


@torch.no_grad()
def graph_metrics(policy: JSPPolicy, exact: ExactPosterior) -> tuple[dict, dict, Tensor]:
    """The policy's exact marginals against the exact posterior's: ``(metrics, estimated features, log P_T(G) [n])``.

    ``metrics``: ``{edge,path,markov}_{rmse,r}`` over the ordered pairs ``i != j`` and
    ``graph_kl`` = :math:`\\mathrm{KL}(P(G | D) \\| P_T(G))`.
    """
    log_pt = model_graph_log_marginals(policy, exact.dags)
    p_model = log_pt.exp()
    exact_features = exact.features()
    estimated = weighted_features(exact.dags, p_model)
    out = {}
    for name in FEATURES:
        out[f"{name}_rmse"], out[f"{name}_r"] = rmse_pearson(estimated[name], exact_features[name])
    out["graph_kl"] = float((exact.log_prob.exp() * (exact.log_prob - log_pt)).sum())
    return out, estimated, log_pt


def mean_field_metrics(exact: ExactPosterior) -> dict:
    """``mean_field_{edge,path,markov}_rmse`` and ``mean_field_graph_kl``: how far the best a diagonal :math:`\\theta` head can
    reach (:meth:`~gflownet_measure.jsp_gfn.bayesnets.exact_posterior.ExactPosterior.mean_field_log_prob`) lies from the exact posterior, on the same scale as
    :func:`graph_metrics` (a property of the data; ``lingauss-full`` has no such bias)."""
    exact_features, mf = exact.features(), exact.mean_field_features()
    out = {f"mean_field_{name}_rmse": rmse_pearson(mf[name], exact_features[name])[0] for name in FEATURES}
    out["mean_field_graph_kl"] = float((exact.log_prob.exp() * (exact.log_prob - exact.mean_field_log_prob())).sum())
    return out


@torch.no_grad()
def posterior_metrics(policy: JSPPolicy, exact: ExactPosterior, graphs: Tensor, thetas: Tensor, true_adj: Tensor | None = None) -> tuple[dict, dict]:
    """Metrics of a trained policy and its samples ``(graphs [K, d, d], thetas [K, d, d])`` against ``exact``.

    Returns ``(metrics, arrays)``. ``metrics`` (flat, numbers only):

    - those of :func:`graph_metrics` (exact in the policy: our preferred measure), and ``{edge,path,markov}_{rmse,r}_samples``
      the same from the ``K`` samples' frequencies (:func:`~gflownet_measure.jsp_gfn.bayesnets.structure_metrics.feature_metrics`), the papers' estimator (Deleu et
      al. 2023, Table D.1, and Lahlou et al. 2023, Table 3 / C.2; K = 1,000 in the public code, tristandeleu/jax-jsp-gfn,
      ``num_samples_posterior``): its Monte Carlo error, up to :math:`\\sqrt{p(1 - p)/K} \\le 0.016` per pair at
      K = 1,000, adds to the sampler's;
    - ``theta_nll``: mean of :math:`-\\log P(\\theta_k | G_k, D)` over the samples (the "Params" column of Table 3,
      on the scale the paper's numbers are on), ``theta_nll_per_datum`` the same divided by ``N`` (the
      formula of its section C.5), and ``theta_nll_exact`` the exact posterior's own expected value (what an exact
      sampler scores; not a lower bound: a θ density narrower than the posterior scores below it);
    - ``log_pt_vs_log_r_slope`` (least squares), ``log_pt_vs_log_r_slope_robust`` (RANSAC, as the paper),
      ``log_pt_vs_log_r_r``: the fit of :math:`\\log P_T(G_k, \\theta_k)` on
      :math:`\\log R(G_k, \\theta_k)` (slope 1 and r = 1 for a perfect sampler);
    - ``log_pt_vs_log_r_slope_robust_estimated``: the same robust slope with :math:`\\log P_T(G_k)` from the paper's
      estimator (:func:`estimate_graph_log_marginal`, beam 128, 1,000 orders, a fixed seed) instead of the exact sum,
      and ``log_pt_estimate_abs_error``, the mean over samples of its distance to the exact value (nats): what the
      paper's figure would show here, and how far its estimator is from the truth;
    - ``expected_shd``, ``auroc`` (of the policy's exact edge marginals) against ``true_adj`` when it is known.

    ``arrays``: ``log_pt``, ``log_r`` over the samples and the exact and estimated ``edge`` marginals (figures).
    """
    model = exact.model
    out, estimated, log_pt_graph = graph_metrics(policy, exact)
    exact_features = exact.features()
    out |= {f"{k}_samples": v for k, v in feature_metrics(graphs, exact_features).items()}
    nll = exact.theta_metric(graphs, thetas.double())
    out["theta_nll"] = float(nll.mean())
    out["theta_nll_per_datum"] = out["theta_nll"] / model.n
    out["theta_nll_exact"] = exact.theta_metric_expected()
    idx = exact.index(graphs)
    net_out = policy.network(graphs.to(policy.network_dtype))
    dtype = net_out.stop_logit.dtype
    log_pt = (log_pt_graph[idx] + net_out.theta.log_prob(thetas.to(dtype)).double()).cpu().numpy()
    log_r = model.log_reward(graphs, thetas.double()).double().cpu().numpy()
    out["log_pt_vs_log_r_slope"], out["log_pt_vs_log_r_slope_robust"], out["log_pt_vs_log_r_r"] = _line_fit(log_r, log_pt)
    estimated_graph = estimate_graph_log_marginal(policy, graphs, generator=seeded_generator(0))
    out["log_pt_estimate_abs_error"] = float((estimated_graph - log_pt_graph[idx]).abs().mean())
    out["log_pt_vs_log_r_slope_robust_estimated"] = _line_fit(log_r, log_pt + (estimated_graph - log_pt_graph[idx]).cpu().numpy())[1]
    if true_adj is not None:
        out["expected_shd"] = expected_shd(graphs, true_adj)
        out["auroc"] = auroc(estimated["edge"], true_adj)
    arrays = {"log_pt": log_pt, "log_r": log_r, "edge_exact": exact_features["edge"].cpu().numpy(), "edge_model": estimated["edge"].cpu().numpy()}
    return out, arrays


def heldout_metrics(heldout: LinearGaussian, graphs: Tensor, thetas: Tensor) -> dict:
    """The fit of samples ``(graphs [K, d, d], thetas [K, d, d])`` to held-out rows :math:`D'` (the data of ``heldout``),
    from :math:`\\ell_k = \\log P(D' | G_k, \\theta_k)` (Deleu et al. 2023; docs/references.md, 'Metrics'):

    - ``heldout_nll``: :math:`-\\frac1K \\sum_k \\ell_k`, the expected negative log-likelihood (JSP-GFN's d = 20 metric);
    - ``heldout_nll_bma``: :math:`-\\log \\frac1K \\sum_k e^{\\ell_k}`, of the posterior predictive (the model average).

    Both in nats for all :math:`N'` rows; the second is at most the first (Jensen).
    """
    ll = heldout.log_likelihood(graphs, thetas.double())  # [K]
    return {"heldout_nll": float(-ll.mean()), "heldout_nll_bma": float(-(torch.logsumexp(ll, 0) - math.log(len(ll))))}


def sample_metrics(problem, graphs: Tensor, thetas: Tensor) -> dict:
    """The metrics of posterior samples ``(graphs [K, d, d], thetas [K, P])`` that need no exact posterior (Deleu et al.
    2023, section 5.2): :func:`heldout_metrics` where the problem has held-out rows, and ``expected_shd`` and ``auroc`` (of
    the samples' edge frequencies) against the true graph where it is known."""
    out = heldout_metrics(problem.heldout, graphs, thetas) if problem.heldout is not None else {}
    if problem.true_adj is not None:
        out["expected_shd"] = expected_shd(graphs, problem.true_adj)
        out["auroc"] = auroc(sample_features(graphs)["edge"], problem.true_adj)
    return out


@torch.no_grad()
def conditional_theta_metrics(
    model: LinearGaussian, heldout: LinearGaussian, graphs: Tensor, true_adj: Tensor | None = None, generator: torch.Generator | None = None
) -> dict:
    """Where the held-out error of linear-Gaussian samples ``graphs [K, d, d]`` lies when the joint posterior cannot be
    enumerated (d > 5): their graphs scored with parameters from the exact conditional posterior
    :math:`\\theta^*_k \\sim P(\\theta | G_k, D)` (Deleu et al. 2023, eq. D.24; :meth:`LinearGaussian.sample_theta_posterior`)
    in place of the sampler's :math:`\\theta_k`:

    - ``heldout_nll_exact_theta``, ``heldout_nll_bma_exact_theta``: :func:`heldout_metrics` of :math:`(G_k, \\theta^*_k)`,
      the fit the sampled graphs would have under a perfect parameter head; the gap to ``heldout_nll`` is the head's share;
    - ``graph_log_joint``: :math:`\\frac1K \\sum_k \\log P(G_k) P(D | G_k)` (the graph marginal up to :math:`\\log Z`), and
      ``graph_log_joint_true``, the same for ``true_adj`` where it is known.
    """
    graphs = graphs.bool()
    thetas = model.sample_theta_posterior(graphs, generator)
    out = {f"{k}_exact_theta": v for k, v in heldout_metrics(heldout, graphs, thetas).items()}
    out["graph_log_joint"] = float(model.log_joint_graph(graphs).mean())
    if true_adj is not None:
        out["graph_log_joint_true"] = float(model.log_joint_graph(true_adj.bool()[None])[0])
    return out


@torch.no_grad()
def fit_metrics(
    policy: JSPPolicy,
    model,
    graphs: Tensor,
    thetas: Tensor,
    generator: torch.Generator | None = None,
    progress: bool = False,
    n_orders: int = 1000,
    budget: float | None = None,
) -> tuple[dict, dict]:
    """:math:`\\log P_T(G_k, \\theta_k) = \\log \\hat P_T(G_k) + \\log P_\\phi(\\theta_k | G_k)` against :math:`\\log R(G_k, \\theta_k)`
    on samples, with :math:`\\hat P_T(G)` the beam-search + importance-sampling estimate (:func:`estimate_graph_log_marginal`):
    Deleu et al. 2023, Fig. 3c. A perfect sampler has :math:`\\log P_T = \\log R - \\log Z`: slope 1.

    Returns ``({log_pt_vs_log_r_slope, _slope_robust (RANSAC), _r, fit_samples, fit_orders}, arrays)`` with ``log_pt``,
    ``log_r`` and ``n_edges`` per sample (the figure colours points by edge count). ``progress``: a bar over the graphs;
    ``n_orders``: of the importance-sampling term; ``budget``: the most policy evaluations of the estimate, which then
    takes the first :func:`fit_sample_count` samples only (``fit_samples`` says how many; None: all).
    """
    if budget is not None:
        n = fit_sample_count(graphs.flatten(1).sum(1), budget, n_orders=n_orders)
        graphs, thetas = graphs[:n], thetas[:n]
    log_pt_graph = estimate_graph_log_marginal(policy, graphs, n_orders=n_orders, generator=generator, progress=progress)
    net_out = policy.network(graphs.to(policy.network_dtype))
    log_pt = (log_pt_graph + net_out.theta.log_prob(thetas.to(net_out.stop_logit.dtype)).double()).cpu().numpy()
    log_r = model.log_reward(graphs, thetas.double()).double().cpu().numpy()
    out = dict(zip(("log_pt_vs_log_r_slope", "log_pt_vs_log_r_slope_robust", "log_pt_vs_log_r_r"), _line_fit(log_r, log_pt)))
    return out | {"fit_samples": len(graphs), "fit_orders": n_orders}, {"log_pt": log_pt, "log_r": log_r, "n_edges": graphs.flatten(1).sum(1).cpu().numpy()}
