"""Hypergrid specifics: the reward's levels, the exact target, and P_T by dynamic programming against sampling."""
import math
from dataclasses import replace

import pytest
import torch

from gflownet_measure.environments import hypergrid
from gflownet_measure.exact import enumerate_states, index_of, terminating_distribution
from gflownet_measure.rollout import sample_forward


def test_reward_levels_and_partition_function():
    """H = 8, D = 2: each axis has 4 outer-band cells (0, 1, 6, 7) of which 2 are inner (1, 6)."""
    g = hypergrid.make_graph(hypergrid.HypergridConfig())
    states = enumerate_states(g)
    R = g.log_reward(states).double().exp()
    assert len(states) == 64
    assert torch.allclose(R.unique(), torch.tensor([1e-3, 0.501, 2.501], dtype=torch.float64))
    assert int((R > 2).sum()) == 4 and int((R > 0.5).sum()) == 16
    assert math.isclose(float(R.sum()), 48 * 1e-3 + 12 * 0.501 + 4 * 2.501, rel_tol=1e-6)


def _exact(height: int, ndim: int, hidden: int):
    """A seeded random policy on the grid and its exact P_T over the enumerated states."""
    torch.manual_seed(0)
    cfg = hypergrid.HypergridConfig(height=height, ndim=ndim)
    g = hypergrid.make_graph(cfg)
    pf, _ = hypergrid.make_policies(g, replace(cfg, hidden=hidden))
    states = enumerate_states(g)
    return g, pf, states, terminating_distribution(g, pf, states)


def test_exact_terminating_distribution_agrees_with_sampling():
    """Total variation between P_T (exact DP) and 20,000 samples of the same policy.

    E[TV] for K cells and n samples is about sum_x sqrt(p(1 - p) / (2 pi n)) <= 0.02 here; 0.05 is far
    outside that (seeded), while a DP that ignored, say, the stop probability would be off by O(1).
    """
    g, pf, states, p_T = _exact(5, 2, 16)
    assert math.isclose(float(p_T.sum()), 1.0, rel_tol=1e-6)  # the policy's softmax is float32 (eps 1.2e-7 per row)
    x = sample_forward(g, pf, 20000).terminal
    counts = torch.bincount(index_of(states, x), minlength=len(states)).double() / len(x)
    assert 0.5 * float((counts - p_T).abs().sum()) < 0.05


def test_encoding_is_one_hot_per_axis():
    g = hypergrid.make_graph(hypergrid.HypergridConfig(height=4, ndim=3))
    e = g.encode(torch.tensor([[0.0, 3.0, 1.0]]))
    assert e.shape == (1, 12) and e.sum() == 3 and e[0, 0] == 1 and e[0, 4 + 3] == 1 and e[0, 8 + 1] == 1


@pytest.mark.slow
def test_exact_distribution_of_a_large_grid_fits_in_memory():
    """H = 16, D = 4: 65,536 states, whose dense transition matrix would take 34 GB; the sparse one holds 5 entries a row."""
    g, pf, states, p_T = _exact(16, 4, 8)
    assert p_T.shape == (16**4,) and (p_T >= 0).all()
    assert math.isclose(float(p_T.sum()), 1.0, rel_tol=1e-5)  # float32 softmax rows, 61 steps
    # s0 is terminated only by stopping at once: P_T(s0) = P_F(stop | s0)
    origin = int(index_of(states, g.source[None])[0])
    with torch.no_grad():
        stop_now = pf(g.source[None]).log_prob(g.source[None], torch.ones(1, dtype=torch.bool)).double().exp()
    assert math.isclose(float(p_T[origin]), float(stop_now), rel_tol=1e-6)
