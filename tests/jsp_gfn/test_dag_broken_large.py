"""Broken DAG x Theta spaces beyond enumeration fail the theory checks that see them (the sampled reference measures of
gflownet_measure/jsp_gfn/dag_params/reference.py): a wrong backward kernel and a reward that is not a density at d = 20, and, on
eq. 4 (Lahlou et al. 2023, Definition 1), a chart whose Jacobian was dropped and a parent shifted by one edge, while
the shipped space and the same chart with its Jacobian pass eq. 4.

Eq. 4 runs at 64 draws of nu here (the command line's default is 256; about 30 s a check on one thread): seeded, it
decides with median tolerance / |integral| 0.15 (POWER = 0.25), so a pass is not a lack of power; the failures are off
by 7 and 3 times their tolerance (Z_SCORE = 5 standard errors each; asserted: over twice)."""
import dataclasses
import math

import pytest
import torch

from gflownet_measure.checks import check_finite_absorption, check_reversibility, check_support
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.dag_params.space import DagKernel, ThetaChart, make_space
from gflownet_measure.jsp_gfn.dag_params.states import split

EQ4_DRAWS = 64


def _graph(d: int):
    return make_space(LinearGaussian(simulate_er(d, 2.0, 50, 0, seed=0).train))


class _LastRemovalMissing(DagKernel):
    """kappa_b without its last removal slot: the parent G' - e of the row-major last edge e of G' is missing."""

    def __call__(self, s):
        m = super().__call__(s)
        atoms = m.atoms
        adj, _, stopped = split(s, self.d)
        last = adj.flatten(1).sum(1) - 1  # the slot of the last edge
        mask = atoms.mask.clone()
        rows = (~stopped & (last >= 0)).nonzero()[:, 0]
        mask[rows, last[rows]] = False
        return dataclasses.replace(m, atoms=dataclasses.replace(atoms, mask=mask))


@pytest.mark.slow
def test_a_backward_kernel_missing_a_parent_fails_the_support_check_at_d20():
    torch.manual_seed(0)
    graph = _graph(20)
    broken = dataclasses.replace(graph, kappa_b=_LastRemovalMissing(20, graph.kappa.n_params, False, graph.kappa.chart._active))
    assert check_support(graph, 16).passed
    result = check_support(broken, 16)
    assert not result.passed and "kappa_b" in result.detail


def test_a_reward_that_is_not_a_density_fails_at_d20():
    """log R = NaN on graphs of three edges or more: the forward walks of eq. 7 reach such terminal states and say where
    (a ValueError, which check_graph reports as the failed row of eq. 7)."""
    torch.manual_seed(0)
    graph = _graph(20)

    def nan_reward(x):
        adj, _, _ = split(x, 20)
        return torch.where(adj.flatten(1).sum(1) >= 3, torch.nan, graph.log_reward(x))

    with pytest.raises(ValueError, match="log_reward is nan"):
        check_finite_absorption(dataclasses.replace(graph, log_reward=nan_reward), 8, UniformPolicy(graph.kappa))


class _DoubledTheta(ThetaChart):
    """:math:`\\theta = 2u` on :math:`\\Theta_G`, :math:`\\log |J| = |\\Theta_G| \\log 2`, or 0 where ``jacobian`` is false (dropped);
    its Monte Carlo proposal on ``u`` is half the shipped one, so that ``theta`` is drawn as the shipped chart draws it."""

    def __init__(self, chart: ThetaChart, jacobian: bool):
        super().__init__(chart.d, chart.n_params, chart._active, chart.domain.proposal_scale / 2)
        self.jacobian = jacobian

    def _embed(self, s, u):
        return super()._embed(s, 2 * u)

    def _coords(self, s, y):
        return super()._coords(s, y / 2)

    def log_abs_det_jacobian(self, s, u):
        k = self.active(s).sum(1).to(u.dtype)
        return k * math.log(2) if self.jacobian else torch.zeros_like(k)


class _ParentShifted(DagKernel):
    """kappa_b of a terminal state (G, theta) is (G - e, #), e the last edge of G in row-major order, instead of (G, #)."""

    def __call__(self, s):
        m = super().__call__(s)
        adj, _, stopped = split(s, self.d)
        flat = adj.flatten(1)
        last = flat.shape[1] - 1 - flat.flip(1).to(torch.int8).argmax(1)
        rows = (stopped & flat.any(1)).nonzero()[:, 0]
        x = m.atoms.x.clone()
        x[rows, -1, last[rows]] = 0.0
        return dataclasses.replace(m, atoms=dataclasses.replace(m.atoms, x=x))


def _eq4(graph):
    return check_reversibility(graph, EQ4_DRAWS, "auto", 8, torch.Generator().manual_seed(0))


def _with_theta_chart(graph, jacobian: bool):
    kappa = DagKernel(20, graph.kappa.n_params, True, graph.kappa.chart._active)
    kappa.chart = _DoubledTheta(graph.kappa.chart, jacobian)
    return dataclasses.replace(graph, kappa=kappa)


def _decided_pass(graph) -> None:
    result = _eq4(graph)
    assert result.passed and not result.undecided, result.detail
    power = float(result.detail.rsplit("median tolerance / |integral| ", 1)[1].rstrip(")"))
    assert power <= 0.2, result.detail  # measured 0.15: below POWER = 0.25 with a margin


@pytest.mark.slow
def test_eq4_decides_at_d20_and_passes_the_shipped_space():
    torch.manual_seed(0)
    _decided_pass(_graph(20))


@pytest.mark.slow
def test_eq4_passes_at_d20_a_chart_with_its_jacobian():
    """theta = 2u with log|J| = |Theta_G| log 2: the chart of the next test with its Jacobian passes eq. 4 with power."""
    torch.manual_seed(0)
    _decided_pass(_with_theta_chart(_graph(20), True))


@pytest.mark.slow
def test_eq4_fails_at_d20_for_a_dropped_jacobian():
    """theta = 2u with log|J| = 0: kappa's piece carries 2^-|Theta_G| of Lebesgue measure; eq. 4 fails on the diffuse inner pairs."""
    torch.manual_seed(0)
    result = _eq4(_with_theta_chart(_graph(20), False))
    assert not result.passed and not result.undecided
    assert result.estimate > 2 * result.tolerance and "pairs between states, diffuse: " in result.detail and "most of the difference on pairs inner" in result.detail, result.detail


@pytest.mark.slow
def test_eq4_fails_at_d20_for_a_parent_shifted_by_one_edge():
    """kappa_b((G, theta)) = delta of (G - e, #): the pairs it makes are off by e^(1/2) (one edge fewer under the envelope)."""
    torch.manual_seed(0)
    graph = _graph(20)
    result = _eq4(dataclasses.replace(graph, kappa_b=_ParentShifted(20, graph.kappa.n_params, False, graph.kappa.chart._active)))
    assert not result.passed and not result.undecided
    assert result.estimate > 2 * result.tolerance and "pairs between states, diffuse: " in result.detail and "most of the difference on pairs inner" in result.detail, result.detail
