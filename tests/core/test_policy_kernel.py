"""A policy built on the graph's other reference kernel keeps every shape, so the shapes row must say so: P_F is a
density w.r.t. kappa and P_B w.r.t. kappa_b (the theory's eq. 1 and 2), and a P_F on kappa_b trains to a wrong answer."""

import pytest

from gflownet_measure.checks import check_contracts
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.environments.hypergrid import HypergridConfig, make_graph


@pytest.fixture(scope="module")
def graph():
    return make_graph(HypergridConfig(height=4, ndim=2))


def test_the_right_kernels_pass(graph):
    assert check_contracts(graph, {"P_F": UniformPolicy(graph.kappa), "P_B": UniformPolicy(graph.kappa_b)}, 16).passed


@pytest.mark.parametrize("name, own, other", [("P_F", "kappa", "kappa_b"), ("P_B", "kappa_b", "kappa")])
def test_a_policy_on_the_other_kernel_fails_the_shapes_row_and_says_which(graph, name, own, other):
    networks = {"P_F": UniformPolicy(graph.kappa), "P_B": UniformPolicy(graph.kappa_b)} | {name: UniformPolicy(getattr(graph, other))}
    row = check_contracts(graph, networks, 16)
    assert not row.passed
    assert row.detail.startswith(f"{name} is built on graph.{other}, not graph.{own}") and "\n" not in row.detail
