"""Issue 64 (B): a head whose squashed parameters sit at their cap is a WARNING line of the check report, never a FAIL.

``BetaHead``, ``BetaMixtureHead`` and ``VonMisesHead`` squash their concentrations into ``(c_min, c_min + c_span)``.
Here the heads' parameters are forced to a bound through the policy's output bias (``sigmoid(8) = 0.99966``), so the
outcome does not hang on training; tests/experiments/test_head_saturation_cli.py trains a head whose ``c_span`` is too
small for its target until it saturates. The spaces are those of tests/broken_spaces.py (seeded), checked at
``n = 64`` as in tests/core/test_broken_spaces.py.
"""

from __future__ import annotations

import math

import broken_spaces as bs
import pytest
import torch

from gflownet_measure.checks import check_graph, saturation_warnings
from gflownet_measure.heads import SATURATION_LEVEL, BetaHead, BetaMixtureHead, SquashedHead, VonMisesHead, VonMisesMixtureHead
from gflownet_measure.measures import Box
from gflownet_measure.networks import MLPPolicy

pytestmark = pytest.mark.usefixtures("one_thread")

N = 64
FORCE = 8.0  # sigmoid(8) = 0.99966 > SATURATION_LEVEL


def forced(policy: MLPPolicy, columns: list[int], shift: float = FORCE) -> MLPPolicy:
    """``policy`` with ``shift`` added to the raw outputs ``columns`` (after the atom and piece logits) at every state."""
    n_logits = policy.n_atoms + len(policy.heads)
    with torch.no_grad():
        for c in columns:
            policy.out.bias[n_logits + c] += shift
            if policy.source_out is not None:
                policy.source_out[n_logits + c] += shift
    return policy


def test_the_threshold_is_within_one_percent_of_the_bound():
    assert SATURATION_LEVEL == 0.99
    assert math.isclose(math.log(SATURATION_LEVEL / (1 - SATURATION_LEVEL)), 4.595, abs_tol=1e-3)  # |z| beyond log 99
    assert torch.sigmoid(torch.tensor(FORCE)) > SATURATION_LEVEL


@pytest.mark.parametrize(
    "head",
    [BetaHead(2), BetaMixtureHead(2, 3), VonMisesHead(Box((0.0,), (1.0,)))],
    ids=["beta", "beta-mixture", "von-mises"],
)
def test_heads_share_one_mechanism_and_do_not_saturate_near_zero(head):
    """Every squashing head is a SquashedHead; raw outputs of a freshly built network (|z| about 1) sit at no bound."""
    assert isinstance(head, SquashedHead)
    torch.manual_seed(0)
    sats = head.saturation(torch.randn(500, head.n_params))
    assert sats and all(s.fraction == 0 for s in sats)


def test_the_von_mises_mixture_head_has_no_cap():
    """Its concentrations are c_min + softplus(.), unbounded above: no saturation to measure."""
    assert not isinstance(VonMisesMixtureHead(Box((0.0,), (1.0,))), SquashedHead)


def test_saturation_names_the_parameter_and_the_share_of_states():
    head = BetaMixtureHead(2, 3, c_span=2.0)  # raw: 3 logits, then alpha [C, k], then beta [C, k]
    raw = torch.zeros(4, head.n_params)
    raw[:3, 3 + 6 + 2 * 1 + 0] = FORCE  # beta of component 1, coordinate 0, at 3 of 4 states
    raw[:, 3] = -FORCE  # alpha of component 0, coordinate 0, at its floor everywhere
    sats = {(s.parameter, s.bound): s for s in head.saturation(raw)}
    assert sats[("beta[component 1, coordinate 0]", "cap")].fraction == 0.75
    assert sats[("beta[component 1, coordinate 0]", "cap")].value == pytest.approx(2.1)
    assert sats[("alpha[component 0, coordinate 0]", "floor")].fraction == 1.0
    assert sum(s.fraction > 0 for s in sats.values()) == 2
    assert head.describe() == "BetaMixtureHead(k=2, C=3, c_min=0.1, c_span=2)"


def test_a_head_at_its_cap_warns_in_the_report_and_still_passes():
    """The README's one-step space with P_F's Beta concentrations forced to the cap: every row passes, and the report
    says which head, which parameter, how many of the states and the remedy."""
    graph, pf, pb = bs.readme_one_step()
    report = check_graph(graph, forced(pf, [0, 1]), pb, n=N, seed=0)
    assert report.passed, str(report)
    assert len(report.warnings) == 1
    line = report.warnings[0]
    for part in (
        "P_F head 0 (BetaHead(k=1, c_min=0.1, c_span=5))",
        "alpha (and 1 more of its 2 squashed parameters)",
        "cap c_min + c_span = 5.1",
        "100% of the 1 state sampled from nu",
        "raise c_span (now 5",
    ):
        assert part in line, (part, line)
    assert f"WARNING: {line}" in str(report).splitlines()
    assert str(report).splitlines()[-1] == "all conditions hold"


def test_a_head_at_its_floor_warns_lower_c_min():
    """beta at its floor 0.1: a density singular at 1, which eq. 15's quadrature may not decide; the warning is there either way."""
    graph, pf, pb = bs.readme_one_step()
    report = check_graph(graph, forced(pf, [1], -FORCE), pb, n=N, seed=0)
    assert len(report.warnings) == 1
    assert "beta sits within 1% of its floor c_min = 0.1" in report.warnings[0]
    assert "lower c_min (now 0.1)" in report.warnings[0]


def test_a_normal_head_gives_no_warning():
    for factory in (bs.readme_one_step, bs.circle_valid, bs.hybrid_valid):
        report = check_graph(*factory(), n=N, seed=0)
        assert report.warnings == (), factory.__name__
        assert "WARNING" not in str(report)


def test_a_warning_does_not_hide_a_failure():
    """A broken space with a saturated head: its row still FAILs, and the warning is printed beside it."""
    graph, pf, pb = bs.hybrid_head_off_by_constant()
    report = check_graph(graph, forced(pf, [0, 1]), pb, n=N, seed=0)
    assert not report.passed and any(r.verdict == "FAIL" for r in report.results)
    assert len(report.warnings) == 1 and "P_F head 0" in report.warnings[0]


def test_the_von_mises_head_at_s0_and_the_beta_head_at_inner_states():
    """The circle's P_F: a von Mises head used at s0 alone (1 state), a Beta head on the arcs from the 64 stage-1 states."""
    graph, pf, pb = bs.circle_valid()
    report = check_graph(graph, forced(pf, [1, 2, 3]), pb, n=N, seed=0)  # kappa of head 0; alpha, beta of head 1
    assert report.passed, str(report)
    first, arc = report.warnings
    assert first.startswith("P_F head 0 (VonMisesHead(k=1, c_min=0.1, c_span=10)): kappa sits within 1% of its cap c_min + c_span = 10.1 at 100% of the 1 state")
    assert arc.startswith("P_F head 1 (BetaHead(k=1, c_min=0.1, c_span=5)): alpha (and 1 more")
    assert "at 100% of the 64 states sampled from nu" in arc


@pytest.mark.parametrize("offset, warns", [(0.0, False), (10.0, True)])
def test_a_warning_needs_most_of_the_states_at_the_cap(offset, warns):
    """A linear P_F on the circle whose arc head's alpha is z = 10 cos(theta) + offset at the stage-1 states: at the cap
    (z > 4.6) on about a third of them for offset 0 (and at the floor on another third), two thirds for +10; the
    report warns only past half."""
    graph = bs.circle()
    torch.manual_seed(bs.SEED)
    heads = [VonMisesHead(bs.UNIT), BetaHead(1, domain=Box((0.0,), (bs.ARC,)))]
    pf = MLPPolicy(graph.kappa, graph.encode, n_in=5, n_atoms=1, heads=heads, n_layers=0)
    alpha = pf.n_atoms + len(heads) + 2  # after the logits and head 0's two outputs
    with torch.no_grad():
        pf.out.weight[alpha] = torch.tensor([0.0, 0.0, 0.0, 10.0, 0.0])  # encode: one-hot stage, cos theta, sin theta
        pf.out.bias[alpha] = offset
    states = torch.stack([torch.ones(N, dtype=torch.float64), torch.linspace(0, 2 * math.pi, N + 1, dtype=torch.float64)[:-1]], 1)
    share = float((10 * torch.cos(states[:, 1]) + offset > math.log(99)).double().mean())
    assert (share > 0.5) == warns and abs(share - 0.5) > 0.1
    found = saturation_warnings({"P_F": pf}, states.float(), "on the stage-1 circle")
    assert bool(found) == warns
    if warns:
        assert f"{share:.0%} of the {N} states on the stage-1 circle" in found[0].message
