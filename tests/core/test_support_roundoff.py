"""Issue 39, item 3: atoms match within round-off (:data:`~gflownet_measure.roundoff.ATOM_ULPS`), and the support row's
hint names round-off when a mismatch is at the ulp level.

The spaces are the gallery's hybrid (``tests/broken_spaces.py``) with the parent atom of category 1 moved by a number of
units of :func:`~gflownet_measure.roundoff.ulps_from` (``eps max(1, |x|)``, float32): 1 unit (a parent recomputed by
another formula) passes, 100 units (beyond the tolerance, still round-off) and 1e-3 (8,400 units: a shifted atom) FAIL
with their own hints. Every check is deterministic (``check_graph(seed=0)``, networks seeded by the gallery): no
statistical tolerance is added here.
"""

from __future__ import annotations

import broken_spaces as bs
import pytest
import torch

from gflownet_measure.checks import check_graph
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.exact import index_of
from gflownet_measure.kernels import atoms_measure
from gflownet_measure.measures import Atoms
from gflownet_measure.roundoff import ATOM_ULPS, ROUNDOFF_ULPS, ulps_from

pytestmark = pytest.mark.usefixtures("one_thread")

SUPPORT = "support kappa <-> kappa_b"


class ParentOff(bs.HybridBackward):
    """kappa_b of the hybrid space with the parent (1, 1, 0) of (2, 1, y) written ``units`` units of round-off off."""

    def __init__(self, units: float):
        super().__init__()
        self.units = units

    def __call__(self, s):
        a = super().__call__(s).atoms
        x = a.x.clone()
        on = (s[:, 0].round() == 2) & (s[:, 1] == 1)
        x[on, 0, 1] += self.units * torch.finfo(s.dtype).eps * x[on, 0, 1].abs().clamp(min=1)
        return atoms_measure(x, a.mask)


def support_row(units: float):
    g = bs.hybrid(f"hybrid, parent {units} ulps off", kappa_b=ParentOff(units))
    report = check_graph(g, *bs.hybrid_policies(g), n=64)
    return report, next(r for r in report.results if r.condition.startswith(SUPPORT))


def test_recomputing_an_angle_by_atan2_stays_within_the_tolerance():
    """The case the tolerance is for: atan2(sin t, cos t) in float32 is within one unit of t (measured: at most 0.5)."""
    t = torch.linspace(-3.14159, 3.14159, 10_001)
    assert float(ulps_from(torch.atan2(torch.sin(t), torch.cos(t))[:, None], t[:, None]).max()) <= 1 < ATOM_ULPS


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_locate_matches_within_the_tolerance_only(dtype):
    eps = torch.finfo(dtype).eps
    atoms = Atoms(torch.tensor([[[3.0, 0.0]]], dtype=dtype), torch.zeros(1, 1, dtype=dtype), torch.ones(1, 1, dtype=torch.bool), torch.zeros(1, 1, dtype=torch.bool))
    no_sink = torch.zeros(1, dtype=torch.bool)

    def found(x: list[float]) -> bool:
        return int(atoms.locate(torch.tensor([x], dtype=dtype), no_sink)[0]) == 0

    assert found([3.0, 0.0]) and found([3.0 + 3 * eps, eps]) and found([3.0, -ATOM_ULPS * eps])
    assert not found([3.0 + 100 * 3 * eps, 0.0]) and not found([3.0, 1e-3])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_index_of_matches_states_as_locate_matches_atoms(dtype):
    """exact.index_of (exact searches over nu's atoms, the support check's nu) and Atoms.locate share one tolerance: each
    query finds the same state by both, within ATOM_ULPS units and not at 100 units or 1e-3."""
    eps = torch.finfo(dtype).eps
    states = torch.tensor([[0.0, 0.0], [3.0, 0.5], [3.0, 1.0]], dtype=dtype)
    queries = torch.tensor([[3.0 + 3 * eps, 1.0], [3.0, 0.5 + 100 * eps], [3.0, 1.0], [0.0, -ATOM_ULPS * eps], [3.0, 0.5 + 1e-3]], dtype=dtype)
    assert index_of(states, queries).tolist() == [2, -1, 2, 0, -1]
    Q = len(queries)
    atoms = Atoms(states[None].expand(Q, -1, -1), torch.zeros(Q, 3, dtype=dtype), torch.ones(Q, 3, dtype=torch.bool), torch.zeros(Q, 3, dtype=torch.bool))
    assert atoms.locate(queries, torch.zeros(Q, dtype=torch.bool)).tolist() == index_of(states, queries).tolist()


def test_a_policy_density_at_a_parent_one_ulp_off_is_finite():
    """Training locates the transition among kappa_b's atoms as the check does: P_B at the recomputed parent is log 1."""
    s = torch.tensor([[2.0, 1.0, 0.5]])
    parent = ParentOff(1.0)(s).atoms.x[:, 0]
    assert float(parent[0, 1]) != 1.0
    log_p = UniformPolicy(ParentOff(0.0))(s).log_prob(parent, torch.zeros(1, dtype=torch.bool))
    assert float(log_p[0]) == 0.0


def test_a_parent_one_ulp_off_passes():
    report, row = support_row(1.0)
    assert row.passed, row
    assert report.passed, report


def test_a_parent_100_ulps_off_fails_naming_round_off():
    _, row = support_row(100.0)
    assert row.verdict == "FAIL", row
    assert "round-off" in row.detail and "by 100 ulps" in row.detail and "s=[1.0, 1.0, 0.0]" in row.detail, row.detail


def test_a_parent_shifted_by_1e_3_fails_as_a_shifted_atom():
    units = bs.SHIFT / torch.finfo(torch.float32).eps
    assert units > ROUNDOFF_ULPS  # far beyond round-off: the hint must not excuse it
    _, row = support_row(units)
    assert row.verdict == "FAIL", row
    assert "shifted atom" in row.detail and "round-off" not in row.detail, row.detail
