"""Exact draws of DAGs with probability proportional to x^|E| (``gflownet_measure/jsp_gfn/bayesnets/weighted_dags.py``): Robinson's
recurrence counts the labelled DAGs (OEIS A003024) and their edge-weighted sums, and the draws follow x^|E| / Z_x.

Every draw is seeded (deterministic outcomes); the frequency test allows 4.5 binomial standard errors per DAG, which
an unseeded run passes with probability about 1 - 543 x 7e-6 = 0.996 over the 543 DAGs on 4 nodes."""
from __future__ import annotations

import math

import pytest
import torch

from gflownet_measure.jsp_gfn.bayesnets.dags import dag_codes, enumerate_dags, is_dag
from gflownet_measure.jsp_gfn.bayesnets.weighted_dags import draw_weighted_dags, log_total


def test_log_total_counts_the_labelled_dags():
    """x = 1: 1, 3, 25, 543, 29281, 3781503 DAGs on 1..6 nodes (OEIS A003024)."""
    counts = [round(math.exp(log_total(d, 0.0))) for d in range(1, 7)]
    assert counts == [1, 3, 25, 543, 29281, 3781503]


@pytest.mark.parametrize("log_x", [-1.0, 0.5])
def test_log_total_is_the_edge_weighted_sum_over_the_enumerated_dags(log_x):
    edges = enumerate_dags(4).flatten(1).sum(1).double()
    assert log_total(4, log_x) == pytest.approx(float(torch.logsumexp(edges * log_x, 0)), rel=1e-12)


@pytest.mark.parametrize("log_x", [-1.0, -0.5])
def test_draws_follow_x_to_the_number_of_edges(log_x):
    """50,000 draws at d = 4: every draw is one of the 543 DAGs, its log-probability is |E| log x - log Z_x, and each DAG's
    frequency is within 4.5 binomial standard errors of x^|E| / Z_x."""
    M = 50_000
    adj, log_p = draw_weighted_dags(M, 4, log_x, torch.Generator().manual_seed(4))
    dags = enumerate_dags(4)
    codes = dag_codes(dags)
    idx = torch.searchsorted(codes, dag_codes(adj))
    assert torch.equal(codes[idx], dag_codes(adj)) and bool(is_dag(adj).all())
    exact = (dags.flatten(1).sum(1).double() * log_x - log_total(4, log_x)).exp()
    assert torch.allclose(log_p, exact[idx].log(), rtol=0, atol=1e-12)
    freq = torch.bincount(idx, minlength=len(dags)).double() / M
    assert bool(((freq - exact).abs() <= 4.5 * (exact * (1 - exact) / M).sqrt()).all())


def test_draws_at_d20_are_repeatable_dags_with_the_expected_edges():
    """d = 20, x = e^-1: DAGs, the same from the same seed, none of a draw of zero; 2,000 draws' mean edge count is within
    5 standard errors of d log Z_x / d log x (the mean of |E| under x^|E| / Z_x), by a central difference of log_total
    (its error, O(h^2) = 1e-6, is far below the 0.15 standard error)."""
    a, la = draw_weighted_dags(2000, 20, -1.0, torch.Generator().manual_seed(0))
    b, lb = draw_weighted_dags(2000, 20, -1.0, torch.Generator().manual_seed(0))
    assert torch.equal(a, b) and torch.equal(la, lb) and bool(is_dag(a).all())
    assert draw_weighted_dags(0, 20, -1.0)[0].shape == (0, 20, 20)
    h = 1e-3
    mean = (log_total(20, -1.0 + h) - log_total(20, -1.0 - h)) / (2 * h)
    edges = a.flatten(1).sum(1).double()
    assert abs(float(edges.mean()) - mean) <= 5 * float(edges.std()) / math.sqrt(len(edges))
