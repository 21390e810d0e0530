"""The eq. 3 row (issue 39, item 8): jumps of kernels and policies inside a piece of nu, located, and declared boundaries.

Every check here is deterministic: ``check_continuity`` and ``check_graph`` draw from their seed (0), networks are built
right after ``torch.manual_seed(broken_spaces.SEED)``. The jumps planted are far above the row's floor (1e-3 relative):
a component appearing, a policy's coordinate density moved by 0.24 in log, an atom's log-mass by 0.05; the smooth
control moves 0.8 in log-mass across one step of a segment, which only the bisection tells from a jump. Where a
test needs a segment to cross a curve (the quarter disc's boundaries) it uses ``n = 256`` (64 segments), which the
module docstring's power estimate makes near certain, and the seed makes certain.
"""
from __future__ import annotations

import dataclasses
import math

import broken_spaces as bs
import pytest
import torch

from gflownet_measure.checks import CONDITIONS, check_continuity, check_graph
from gflownet_measure.environments.quarter_disc import QuarterDiscKernel
from gflownet_measure.kernels import Kernel, atoms_measure

pytestmark = pytest.mark.usefixtures("one_thread")

CONTINUITY = CONDITIONS["continuity"]


def test_a_policy_with_a_step_inside_a_piece_fails_this_row_alone_and_is_located():
    """The gallery's circle whose P_F reads 4 * 1[theta > pi]: eq. 15 passes (each P_F(s, .) still integrates to 1),
    eq. 4 never sees a policy; only eq. 3 fails, at theta = pi on the stage-1 circle, naming P_F's density."""
    graph, pf, pb = bs.circle_pf_jumps_at_pi()
    report = check_graph(graph, pf, pb, n=64, seed=0)
    assert [r.condition for r in report.results if not r.passed] == [CONTINUITY], str(report)
    row = next(r for r in report.results if r.condition == CONTINUITY)
    assert row.verdict == "FAIL" and row.estimate >= 1
    assert row.detail.startswith("P_F piece 1 (AffineChart) coordinate log-density jumps from "), row.detail
    assert "at s=[1.0, 3.14159]" in row.detail and "inside nu piece 0 (AffineChart)" in row.detail
    assert "declared by the kernel's `boundaries`" in row.detail


class Undeclared(QuarterDiscKernel):
    """The quarter disc's kernel without its declared boundaries."""

    boundaries = Kernel.boundaries


def test_the_quarter_disc_passes_with_its_boundaries_declared_and_fails_without():
    """The first disc (kappa_b: the atom s0 inside, the backward arc outside) and the forced exit (P_F's sink takes all)
    are jumps of the space itself: counted when declared, a located FAIL when not."""
    graph, pf, pb = bs.environment("quarter-disc", rho=0.25)()
    row = check_continuity(graph, pf, pb, 256)
    assert row.passed and "jumps at boundaries the kernels declare (Kernel.boundaries)" in row.detail, row.detail

    bare = dataclasses.replace(graph, kappa=Undeclared(0.25, True), kappa_b=Undeclared(0.25, False))
    row = check_continuity(bare, None, None, 256)
    assert not row.passed and row.detail.startswith("kappa_b number of atoms jumps from 1 to 0 at s="), row.detail
    s = [float(v) for v in row.detail.split("at s=[")[1].split("]")[0].split(",")]
    assert math.hypot(*s) == pytest.approx(0.25, abs=1e-4)  # on the first disc's circle

    pf.kernel = Undeclared(0.25, True)
    row = check_continuity(graph, pf, None, 256)
    assert not row.passed and row.detail.startswith("P_F log-probability of the sink jumps from "), row.detail
    s = [float(v) for v in row.detail.split("at s=[")[1].split("]")[0].split(",")]
    assert math.hypot(1 - s[0], 1 - s[1]) == pytest.approx(0.25, abs=1e-4)  # the forced exit: the corner within rho


class ParentMass(Kernel):
    """kappa_b of the README's one-step space, the parent s0 of [1, y] with log-mass ``log_mass(y)``."""

    def __init__(self, log_mass):
        self.log_mass = log_mass

    def __call__(self, s):
        m = atoms_measure(s.new_zeros(len(s), 1, 2), s[:, :1] == 1)
        return dataclasses.replace(m, atoms=dataclasses.replace(m.atoms, log_mass=self.log_mass(s[:, 1:])))


def test_a_small_jump_fails_and_a_steep_continuous_change_passes():
    """A log-mass step of 0.05 at y = 0.5 is a jump; tanh((y - 0.5) / 0.02), 0.8 across one step of a segment, is not."""
    graph = bs.segment()
    jump = check_continuity(dataclasses.replace(graph, kappa_b=ParentMass(lambda y: 0.05 * (y > 0.5).to(y.dtype))), None, None, 64)
    assert not jump.passed and jump.detail.startswith("kappa_b atoms' log-mass jumps from 0 to 0.05 at s=[1.0, 0.5]"), jump.detail
    steep = check_continuity(dataclasses.replace(graph, kappa_b=ParentMass(lambda y: torch.tanh((y - 0.5) / 0.02))), None, None, 64)
    assert steep.passed, steep.detail


def test_a_space_of_atoms_has_nothing_to_probe_and_the_row_leaves_the_global_generator_alone():
    graph, _, _ = bs.chain_valid()
    row = check_continuity(graph, None, None, 64)
    assert row.passed and row.detail.startswith("nu has no piece of positive dimension"), row.detail
    graph, pf, pb = bs.circle_valid()
    torch.manual_seed(1)
    before = torch.get_rng_state()
    first = check_continuity(graph, pf, pb, 64)
    assert torch.equal(torch.get_rng_state(), before)
    assert check_continuity(graph, pf, pb, 64) == first  # seeded: the same segments and verdict


SHIPPED = [("hypergrid", {"height": 4, "ndim": 2}), ("quarter-disc", {"rho": 0.25}), ("sde", {"target": "gmm9", "n_steps": 4, "hidden": 16}),
           ("sde", {"target": "funnel", "n_steps": 2, "hidden": 16}), ("dag-params", {"d": 3, "hidden": 8}),
           ("torus", {"n_steps": 2, "harmonics": 1, "hidden": 8, "n_layers": 1}), ("hybrid-torus", {"n_steps": 2, "harmonics": 1, "hidden": 8, "n_layers": 1}),
           ("diffusion", {"dim": 2, "n_steps": 4, "hidden": 16})]


@pytest.mark.parametrize("name, settings", SHIPPED)
def test_every_shipped_environment_passes_the_row(name, settings):
    """Kernels and default policies of every registered environment, at small settings and 64 segments per piece (n = 256;
    at most 512 in all): each run takes under a second on one thread."""
    graph, pf, pb = bs.environment(name, **settings)()
    row = check_continuity(graph, pf, pb, 256)
    assert row.passed, row.detail
