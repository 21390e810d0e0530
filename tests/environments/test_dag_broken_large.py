"""Broken DAG x Theta spaces beyond enumeration fail the theory checks that see them (the sampled reference measures of
environments/dag_params/reference.py): a wrong backward kernel and a reward that is not a density at d = 20. (A chart
whose Jacobian was dropped is a matter of eq. 4, which the sampled nu leaves undecided at these sizes: docs/results.md.)"""
import dataclasses

import pytest
import torch

from environments.dag_params.bayesnet import LinearGaussian, simulate_er
from environments.dag_params.space import DagKernel, make_space
from environments.dag_params.states import split
from gflownet_measure.checks import check_finite_absorption, check_support
from gflownet_measure.densities import UniformPolicy


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
