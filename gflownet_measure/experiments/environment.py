"""The door of every experiment into an environment: the registry :data:`gflownet_measure.environments.ENVIRONMENTS`, as ``check`` uses it."""

from __future__ import annotations

from typing import Any, NamedTuple

from gflownet_measure.densities import Policy
from gflownet_measure.environments import get_environment
from gflownet_measure.graph import PointedGraph

__all__ = ["Environment", "make_environment"]


class Environment(NamedTuple):
    """A registered environment built from a run's settings: its typed config, its graph and its untrained ``(P_F, P_B)``."""

    config: Any
    graph: PointedGraph
    pf: Policy
    pb: Policy


def make_environment(name: str, config: Any) -> Environment:
    """The environment registered as ``name`` from its typed ``config`` (its :class:`~gflownet_measure.environments.EnvironmentSpec`'s
    ``config`` class): the config, then the graph, then the policies."""
    spec = get_environment(name)
    if not isinstance(config, spec.config):
        raise TypeError(f"make_environment({name!r}): config must be a {spec.config.__name__}, got {type(config).__name__}")
    graph = spec.make_graph(config)
    return Environment(config, graph, *spec.make_policies(graph, config))
