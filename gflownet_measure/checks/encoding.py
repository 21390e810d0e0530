"""``graph.encode`` separates states: the test functions of eq. 4 are functions of :math:`e(s)`, so two states with the
same features are one state to them, and eq. 4 cannot see mass moved from one to the other."""

from __future__ import annotations

import torch

from ..graph import PointedGraph
from .integration import nu_states
from .results import CONDITIONS, CheckResult

__all__ = ["check_encoding"]


def check_encoding(graph: PointedGraph, n: int) -> CheckResult:
    """Distinct states drawn from :math:`\\nu` (its atoms, ``n`` random points per piece, :math:`s_0`) have distinct
    features ``graph.encode``.

    Features are compared exactly: an encoding that drops information (a coordinate left out, a one-hot of a rounded
    value) maps whole sets of states to one feature vector, which independent draws hit exactly. A periodic encoding of
    an unwrapped angle identifies only pairs that draws never hit; :func:`~gflownet_measure.checks.support.check_support`
    finds such a chart where it leaves :math:`\\nu`.
    """
    s = nu_states(graph, n)
    e = graph.encode(s).double()
    _, state_id = torch.unique(s, dim=0, return_inverse=True)
    _, feature_id = torch.unique(e, dim=0, return_inverse=True)
    groups = int(feature_id.max()) + 1
    lo = torch.full((groups,), len(s)).scatter_reduce(0, feature_id, state_id, "amin")
    hi = torch.full((groups,), -1).scatter_reduce(0, feature_id, state_id, "amax")
    shared = (lo != hi).nonzero()[:, 0]
    name = CONDITIONS["encode"]
    if not len(shared):
        return CheckResult(name, 0, 0, True, f"{int(state_id.max()) + 1} distinct states, as many distinct features")
    g = int(shared[0])
    rows = (feature_id == g).nonzero()[:, 0]
    a, b = rows[state_id[rows] == lo[g]][0], rows[state_id[rows] == hi[g]][0]
    n_states, n_features = int(state_id.max()) + 1, groups
    return CheckResult(
        name,
        n_states - n_features,
        0,
        False,
        f"encode maps states A={s[a].tolist()} and B={s[b].tolist()} to the same features {e[a].tolist()} ({n_states} distinct states, {n_features} distinct features): "
        "the test functions of eq. 4 cannot tell them apart; use an encoding that separates states (e.g. add the raw coordinates)",
    )
