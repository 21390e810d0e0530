"""The batched log P_T(G) estimate of Deleu et al. 2023, D.3.2 (gflownet_measure/jsp_gfn/dag_params/evaluation.py), its sizing to a
budget of policy evaluations, and the posterior sampler (gflownet_measure/jsp_gfn/dag_params/sampling.py)."""
import math

import pytest
import torch

from conftest import random_jsp_policies
from gflownet_measure.environments import dag_params as dp
from gflownet_measure.jsp_gfn.bayesnets.dags import is_dag
from gflownet_measure.jsp_gfn.dag_params.evaluation import estimate_graph_log_marginal, fit_metrics, fit_sample_count
from gflownet_measure.jsp_gfn.dag_params.sampling import posterior_samples

pytestmark = pytest.mark.usefixtures("one_thread")


def _policy(d: int = 6):
    """``(graph, P_F, model)``: a d-node linear-Gaussian problem, its policy with the lookahead and every network weight N(0, 0.3^2)."""
    problem, graph, pf, _ = random_jsp_policies(dp.DagParamsConfig(d=d, hidden=16, lookahead="on", edges_per_node=2.0))
    return graph, pf, problem.model


def _graphs(d: int, n_edges: list[int], seed: int = 0) -> torch.Tensor:
    """DAGs ``[len(n_edges), d, d]`` with the given edge counts: random edges of the upper triangle under a random node order."""
    gen = torch.Generator().manual_seed(seed)
    upper = torch.triu(torch.ones(d, d, dtype=torch.bool), 1).flatten().nonzero()[:, 0]
    out = torch.zeros(len(n_edges), d * d, dtype=torch.bool)
    for i, k in enumerate(n_edges):
        out[i, upper[torch.randperm(len(upper), generator=gen)[:k]]] = True
        perm = torch.randperm(d, generator=gen)
        out[i] = out[i].view(d, d)[perm][:, perm].flatten()
    return out.view(-1, d, d)


@torch.no_grad()
def _reference(pf, adj: torch.Tensor, beam: int, n_orders: int, generator: torch.Generator) -> torch.Tensor:
    """The estimator of D.3.2 one graph, one prefix and one order at a time, with the full network (``pf.heads``): the
    beam's best ``beam`` prefixes at each length, then ``torch.rand(n_orders, k).argsort(1)`` orders, those outside
    the beam weighted by ``k! / n_orders``; graphs in ``torch.unique`` order, as the batched estimate draws them."""
    d = adj.shape[-1]

    def log_edge(edges, prefix):
        part = torch.zeros(d * d, dtype=torch.bool)
        part[edges[list(prefix)]] = True
        return pf.heads(part.view(1, d, d))[1].flatten().double()

    graphs, inverse = torch.unique(adj.flatten(1), dim=0, return_inverse=True)
    out = []
    for flat in graphs:
        edges = flat.nonzero()[:, 0]
        k = len(edges)
        kept = [(0.0, ())]
        for _ in range(k):
            cand = [(lp + float(log_edge(edges, path)[edges[j]]), path + (j,)) for lp, path in kept for j in range(k) if j not in path]
            kept = sorted(cand, key=lambda c: -c[0])[:beam]
        total = torch.tensor([lp for lp, _ in kept], dtype=torch.float64).logsumexp(0)
        if k > 1:
            orders = torch.rand(n_orders, k, generator=generator).argsort(1)
            in_beam = {path for _, path in kept}
            outside = [tuple(o.tolist()) for o in orders if tuple(o.tolist()) not in in_beam]
            if outside:
                terms = torch.tensor([sum(float(log_edge(edges, o[:t])[edges[o[t]]]) for t in range(k)) for o in outside], dtype=torch.float64)
                total = torch.logaddexp(total, terms.logsumexp(0) + math.lgamma(k + 1) - math.log(n_orders))
        out.append(total + pf.heads(flat.view(1, d, d))[2].double()[0])
    return torch.stack(out)[inverse]


@pytest.mark.parametrize("rows", [2**16, 40])
@pytest.mark.slow
def test_batched_estimate_equals_the_estimator_graph_by_graph(rows):
    """d = 6, beam 8, 30 orders, graphs of 0 to 10 edges with repeats: the beam is cut (3! < 8 < 4!) and the orders
    outside it enter the importance-sampling term. All graphs in lockstep (rows 2^16: one group) or in groups of one
    (rows 40 < beam + orders), against :func:`_reference` with the same generator: the same orders are drawn and the
    values agree to 1e-6 relative (the lookahead's logits span hundreds of nats here, rounded in a float32 network
    evaluated in batches of different composition; measured 4e-8, 1.5e-5 nats)."""
    _, pf, _ = _policy()
    adj = _graphs(6, [0, 1, 2, 4, 7, 10, 4, 10, 3])
    adj = torch.cat([adj, adj[[3, 5]]])
    est = estimate_graph_log_marginal(pf, adj, beam=8, n_orders=30, generator=torch.Generator().manual_seed(0), rows=rows)
    ref = _reference(pf, adj, 8, 30, torch.Generator().manual_seed(0))
    assert torch.isfinite(est).all() and est.dtype == torch.float64
    assert torch.allclose(est, ref, rtol=1e-6, atol=0), float(((est - ref) / ref).abs().max())
    assert est[-2] == est[3] and est[-1] == est[5]  # each distinct graph estimated once


def test_fit_sample_count_takes_the_leading_samples_within_the_budget():
    """Bound |E| (beam + M) per sample, beam + M = 10: cumulative costs 30, 80, 100, 140 for 3, 5, 2, 4 edges."""
    n_edges = torch.tensor([3, 5, 2, 4])
    assert fit_sample_count(n_edges, 100, beam=6, n_orders=4) == 3
    assert fit_sample_count(n_edges, 99.9, beam=6, n_orders=4) == 2
    assert fit_sample_count(n_edges, 10, beam=6, n_orders=4) == 2  # a line needs two points
    assert fit_sample_count(n_edges, 1e9, beam=6, n_orders=4) == 4
    assert fit_sample_count(torch.tensor([5]), 10) == 1
    with pytest.raises(ValueError, match="budget=0"):
        fit_sample_count(n_edges, 0)


def test_fit_metrics_under_a_budget_is_the_fit_of_the_leading_samples():
    """d = 6: 12 posterior samples; a budget that admits 5 of them (by the bound of the default beam 128 and 20
    orders) scores those 5, as fit_metrics on them alone does, and records fit_samples and fit_orders."""
    graph, pf, model = _policy()
    torch.manual_seed(1)
    graphs, thetas = posterior_samples(graph, pf, 12)
    budget = float(graphs[:5].flatten(1).sum()) * (128 + 20)
    m, arrays = fit_metrics(pf, model, graphs, thetas, torch.Generator().manual_seed(0), n_orders=20, budget=budget)
    alone, alone_arrays = fit_metrics(pf, model, graphs[:5], thetas[:5], torch.Generator().manual_seed(0), n_orders=20)
    assert m["fit_samples"] == 5 and m["fit_orders"] == 20 and len(arrays["log_pt"]) == 5
    assert m == alone
    assert (arrays["log_pt"] == alone_arrays["log_pt"]).all() and (arrays["n_edges"] == graphs[:5].flatten(1).sum(1).numpy()).all()


def test_posterior_samples_in_chunks_are_dags_with_parameters_on_their_edges():
    """d = 4, 7 samples in chunks of one (numbers below d * D): DAGs, and the linear model's flat weights zero off
    the edges; asking for none is an error."""
    graph, pf, _ = _policy(4)
    torch.manual_seed(0)
    graphs, thetas = posterior_samples(graph, pf, 7, numbers=1)
    assert graphs.shape == (7, 4, 4) and graphs.dtype == torch.bool and thetas.shape == (7, 16)
    assert is_dag(graphs).all()
    assert (thetas[~graphs.flatten(1)] == 0).all()
    with pytest.raises(ValueError, match="n=0"):
        posterior_samples(graph, pf, 0)
