"""The door of every experiment into an environment: the registry :data:`gflownet_measure.environments.ENVIRONMENTS`, as ``check`` uses it."""

from __future__ import annotations

from typing import Any, NamedTuple

from gflownet_measure.densities import Policy
from gflownet_measure.environments import get_environment
from gflownet_measure.graph import PointedGraph

from .settings import build

__all__ = ["Environment", "make_environment"]


class Environment(NamedTuple):
    """A registered environment built from a run's settings: its typed config, its graph and its untrained ``(P_F, P_B)``."""

    config: Any
    graph: PointedGraph
    pf: Policy
    pb: Policy


def make_environment(name: str, config: Any) -> Environment:
    """The environment registered as ``name`` from its typed ``config`` (or, for the experiments not typed yet, the
    resolved flat settings, whose config fields are read): the config, then the graph, then the policies
    (:class:`~gflownet_measure.environments.EnvironmentSpec`)."""
    spec = get_environment(name)
    config = config if isinstance(config, spec.config) else build(spec.config, config)
    graph = spec.make_graph(config)
    return Environment(config, graph, *spec.make_policies(graph, config))
