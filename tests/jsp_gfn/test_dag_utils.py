"""DAG utilities of JSP-GFN (``gflownet_measure/jsp_gfn/bayesnets/dags.py``): enumeration counts, the closure
and the action mask against from-scratch references, and the marginal features on a hand graph."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import HYPOTHESIS
from gflownet_measure.jsp_gfn.bayesnets.dags import (
    dag_codes,
    edge_features,
    enumerate_dags,
    markov_blanket_features,
    path_features,
    transitive_closure,
    valid_edges,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def nilpotent(adj):
    """Acyclic iff :math:`A^d = 0` (a walk of length d on d nodes repeats a node): ``[B]`` bool, independent of the closure code."""
    d = adj.shape[-1]
    return (torch.linalg.matrix_power(adj.double(), d) == 0).all(-1).all(-1)


def closure_by_powers(adj):
    """:math:`\\sum_{k=0}^{d-1} A^k > 0`, the reflexive transitive closure by path counting."""
    d = adj.shape[-1]
    a = adj.double()
    total = sum(torch.linalg.matrix_power(a, k) for k in range(d))
    return total > 0


@pytest.mark.parametrize("d, count", [(1, 1), (2, 3), (3, 25), (4, 543), (5, 29281)])
def test_enumerated_dags_are_all_distinct_acyclic_and_counted(d, count):
    dags = enumerate_dags(d)
    assert dags.shape == (count, d, d) and dags.dtype == torch.bool
    assert nilpotent(dags).all()
    codes = dag_codes(dags)
    assert (codes[1:] > codes[:-1]).all()  # canonical order: strictly increasing codes, hence distinct


@pytest.mark.parametrize("d", [2, 3, 4, 5])
def test_enumeration_within_one_parent_counts_the_rooted_forests(d):
    """A DAG where every node has at most one parent is a forest of rooted trees: (d + 1)^(d - 1) of them on d
    labelled nodes (Cayley). And it is the full list filtered, in the same order."""
    full, kept = enumerate_dags(d), enumerate_dags(d, 1)
    assert len(kept) == (d + 1) ** (d - 1)
    assert torch.equal(kept, full[full.sum(1).amax(1) <= 1])
    assert torch.equal(enumerate_dags(d, d - 1), full)  # d - 1 parents is no limit


def test_enumeration_refuses_d_6():
    with pytest.raises(ValueError, match="3,781,503"):
        enumerate_dags(6)


@st.composite
def edge_sequences(draw):
    """A batch size, a node count and, per step and graph, an integer that picks one valid edge."""
    d = draw(st.integers(2, 6))
    batch = draw(st.integers(1, 4))
    steps = draw(st.integers(1, d * (d - 1) // 2))
    picks = draw(st.lists(st.lists(st.integers(0, 10**6), min_size=batch, max_size=batch), min_size=steps, max_size=steps))
    return d, batch, picks


@settings(HYPOTHESIS, max_examples=40)
@given(edge_sequences())
def test_closure_and_mask_match_from_scratch(case):
    d, batch, picks = case
    adj = torch.zeros(batch, d, d, dtype=torch.bool)
    reach = transitive_closure(adj)
    eye = torch.eye(d, dtype=torch.bool)
    for pick in picks:
        mask = valid_edges(adj, reach)
        # the mask is exactly the set of absent non-loop edges whose addition keeps A^d = 0
        for b in range(batch):
            for i in range(d):
                for j in range(d):
                    if i == j or adj[b, i, j]:
                        assert not mask[b, i, j]
                        continue
                    new = adj[b].clone()
                    new[i, j] = True
                    assert bool(mask[b, i, j]) == bool(nilpotent(new[None])[0])
        live = mask.flatten(1).any(1).nonzero()[:, 0]  # graphs with at least one valid edge
        if len(live) == 0:
            break
        flat = [mask[b].flatten().nonzero()[:, 0] for b in live.tolist()]
        action = torch.stack([f[p % len(f)] for f, p in zip(flat, [pick[b] for b in live.tolist()])])
        u, v = action // d, action % d
        adj[live, u, v] = True
        reach = transitive_closure(adj)
        assert torch.equal(reach, closure_by_powers(adj))
        assert (reach & eye).sum() == batch * d and not (reach & reach.transpose(1, 2) & ~eye).any()


def test_max_parents_masks_full_columns():
    adj = torch.zeros(1, 3, 3, dtype=torch.bool)
    adj[0, 0, 2] = True
    mask = valid_edges(adj, transitive_closure(adj), max_parents=1)
    assert not mask[0, :, 2].any() and mask[0, 0, 1] and mask[0, 2, 1]


def test_features_on_a_hand_graph():
    # 0 -> 2 <- 1, 2 -> 3: a collider whose child has a child
    adj = torch.zeros(1, 4, 4, dtype=torch.bool)
    for i, j in [(0, 2), (1, 2), (2, 3)]:
        adj[0, i, j] = True
    assert torch.equal(edge_features(adj), adj.double())
    paths = torch.zeros(4, 4, dtype=torch.float64)
    for i, j in [(0, 2), (1, 2), (2, 3), (0, 3), (1, 3)]:
        paths[i, j] = 1.0
    assert torch.equal(path_features(adj)[0], paths)
    blankets = {0: {1, 2}, 1: {0, 2}, 2: {0, 1, 3}, 3: {2}}  # MB(j): parents, children, co-parents
    mb = torch.zeros(4, 4, dtype=torch.float64)
    for j, members in blankets.items():
        for i in members:
            mb[i, j] = 1.0
    assert torch.equal(markov_blanket_features(adj)[0], mb)
