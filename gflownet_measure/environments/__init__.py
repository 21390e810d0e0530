"""Environments built on the gflownet_measure core, registered by name for the CLI, checks and tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from gflownet_measure.graph import PointedGraph
from gflownet_measure.jsp_gfn import dag_params
from gflownet_measure.options import Setting, lookup, settings_of

from . import diffusion, hybrid_torus, hypergrid, quarter_disc, sde, torus

__all__ = ["EnvironmentSpec", "ENVIRONMENTS", "get_environment"]


@dataclass(frozen=True)
class EnvironmentSpec:
    """A registered space: its typed settings (a dataclass of :func:`~gflownet_measure.options.option` fields), a graph
    factory and default (untrained) policies ``(P_F, P_B)``, both taking an instance of ``config``.

    ``check_bytes``: the peak memory of ``gflownet-measure check`` per squared node (Monte Carlo or quadrature) (its pair integrals hold
    ``n`` kernel nodes for each of ``n`` nodes of every piece of nu), measured at the default settings as the slope of the
    peak resident memory between ``--samples`` 256 and 512 (``/usr/bin/time -f %M``, 2-core machine, one thread, ``--method auto``); the command line
    refuses a ``--samples`` whose estimate exceeds the available memory.
    """

    name: str
    description: str
    config: type
    make_graph: Callable[[Any], PointedGraph]
    make_policies: Callable[[PointedGraph, Any], tuple]
    check_bytes: float = 0.0

    @property
    def settings(self) -> dict[str, Setting]:
        return settings_of(self.config)


ENVIRONMENTS: dict[str, EnvironmentSpec] = {
    "hypergrid": EnvironmentSpec(
        "hypergrid",
        "D-dimensional grid of side H, +1 moves or stop (Bengio et al. 2021)",
        hypergrid.HypergridConfig,
        hypergrid.make_graph,
        hypergrid.make_policies,
    ),  # discrete: --samples is unused
    "quarter-disc": EnvironmentSpec(
        "quarter-disc",
        "[0,1]^2, a first move in the rho quarter disc, then arcs of radius rho or stop (Lahlou et al. 2023, 4.1)",
        quarter_disc.QuarterDiscConfig,
        quarter_disc.make_graph,
        quarter_disc.make_policies,
        check_bytes=1.0e3,
    ),
    "dag-params": EnvironmentSpec(
        "dag-params",
        "DAGs x their linear-Gaussian weights: add an edge or stop and draw theta (JSP-GFN, Deleu et al. 2023)",
        dag_params.DagParamsConfig,
        dag_params.make_graph,
        dag_params.make_policies,
        check_bytes=1.1e3,
    ),  # d = 3; grows with the number of DAGs
    "torus": EnvironmentSpec(
        "torus",
        "[0, 2pi)^n x {1..T}: von Mises increments, Haar reference, R6 or alanine dipeptide (Lahlou et al. 2023, 4.3)",
        torus.TorusConfig,
        torus.make_graph,
        torus.make_policies,
        check_bytes=1.3e4,
    ),  # not measured: the sde value (100 levels) as a bound for T = 10
    "hybrid-torus": EnvironmentSpec(
        "hybrid-torus",
        "the torus with a discrete choice per step (stay, or which angle to move) then a von Mises angle: atoms and Haar pieces in one kernel",
        torus.TorusConfig,
        hybrid_torus.make_graph,
        hybrid_torus.make_policies,
        check_bytes=1.3e4,
    ),  # not measured, as torus
    "sde": EnvironmentSpec(
        "sde",
        "R^n x {0..T}: Euler-Maruyama steps with a Brownian-bridge P_B, 9-Gaussian mixture or 10-D funnel (Lahlou et al. 2023, 4.2)",
        sde.SDEConfig,
        sde.make_graph,
        sde.make_policies,
        check_bytes=1.3e4,
    ),  # T = 100 time levels
    "diffusion": EnvironmentSpec(
        "diffusion",
        "R^n x {0..T+1}: a DDPM denoiser as P_F, the noising process (DDPM's or learned) as P_B; no reward, trained from data (Lahlou et al. 2023, 4.5)",
        diffusion.DiffusionConfig,
        diffusion.make_graph,
        diffusion.make_policies,
        check_bytes=1.3e4,
    ),  # not measured: the sde value (100 levels) as a bound for T = 50
}


def get_environment(name: str) -> EnvironmentSpec:
    return lookup(ENVIRONMENTS, name, "environment")
