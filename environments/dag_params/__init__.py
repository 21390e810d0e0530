"""The hybrid DAG x Theta space of JSP-GFN (Deleu et al. 2023; Lahlou et al. 2023 section 4.4).

Modules: :mod:`.dags` (closures, masks, enumeration, features), :mod:`.bayesnet` (linear-Gaussian model,
priors, simulated and CSV data), :mod:`.exact` (the exact posterior for ``d <= 5``), :mod:`.space` (the
measurable pointed graph), :mod:`.network` and :mod:`.policy` (the forward policy), :mod:`.objective`
(Algorithm 1's environments and the transition loss), :mod:`.evaluation` (the policy's exact marginals and
the metrics of Table 3 / D.1), :mod:`.mcmc` and :mod:`.metrics` (baselines and comparisons).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from gflownet_measure.config import ConfigError, Setting
from gflownet_measure.graph import PointedGraph
from gflownet_measure.policies import UniformPolicy

from .bayesnet import GRAPH_PRIORS, LinearGaussian, load_csv, simulate_er
from .dags import MAX_ENUMERATE
from .network import JSPNetwork
from .policy import JSPPolicy
from .space import make_space

__all__ = ["SETTINGS", "MODELS", "Problem", "make_problem", "make_graph", "make_policies"]

MODELS = {"lingauss-diag": "diag", "lingauss-full": "full"}

SETTINGS = {
    "d": Setting(3, "number of variables of simulated data (a CSV sets its own)", low=2, high=5),
    "data": Setting("", "a CSV file (header = variable names, one column per variable); empty: simulated Erdos-Renyi data", path=True),
    "data_seed": Setting(0, "seed of the simulated graph, weights and data", low=0),
    "n_data": Setting(100, "simulated training rows N", low=2),
    "n_valid": Setting(100, "simulated held-out rows (scored by heldout_nll; 0: none)", low=0),
    "edges_per_node": Setting(1.0, "expected edges per node k of the simulated ER graph (ER1: 1), and of the erdos_renyi prior", low=0.0),
    "obs_var": Setting(0.01, "noise variance sigma^2 of every CPD (fixed)", low=1e-8),
    "prior_var": Setting(1.0, "variance of the N(0, .) prior on each active weight", low=1e-8),
    "graph_prior": Setting("uniform", "prior over DAGs", choices=GRAPH_PRIORS),
    "max_parents": Setting(0, "at most this many parents per node (0: no limit)", low=0),
    "model": Setting("lingauss-diag", "P_phi(theta | G): diagonal or full-covariance Normal", choices=tuple(MODELS)),
    "hidden": Setting(128, "width of the backbone and heads", low=1),
    # the public JSP-GFN code scales by N; measured here at d = 5 (quick preset, 2,000 updates) that starts from a far more
    # peaked policy and learns slower: KL(P(G|D) || P_T) = 46-50 with N (lr 3e-5 or 1e-4) against 0.63 with 1 (lr 3e-4)
    "logit_scale": Setting(1.0, "multiply the edge and stop logits by this (0: the number of data rows N, as the public JSP-GFN code does)", low=0.0),
}


@dataclass(frozen=True)
class Problem:
    """The data and model of a run: ``heldout`` is the same model on the held-out rows (``None`` for a user's CSV or
    ``n_valid = 0``), ``true_adj`` the simulated graph (``None`` for a CSV)."""

    model: LinearGaussian
    heldout: LinearGaussian | None
    true_adj: Tensor | None


def make_problem(cfg: dict) -> Problem:
    """Simulated ER data (``data`` empty) or the user's CSV, and the linear-Gaussian model on it."""
    if cfg["data"]:
        try:
            data, _ = load_csv(cfg["data"])
        except ValueError as e:
            raise ConfigError(str(e)) from None
        if data.shape[1] > MAX_ENUMERATE:
            raise ConfigError(f"data={cfg['data']!r} has {data.shape[1]} columns (variables); the DAG space and its exact posterior are enumerated for at most {MAX_ENUMERATE}: keep at most {MAX_ENUMERATE} columns")
        valid = true_adj = None
    else:
        sim = simulate_er(cfg["d"], cfg["edges_per_node"], cfg["n_data"], cfg["n_valid"], seed=cfg["data_seed"], obs_std=cfg["obs_var"] ** 0.5)
        data, valid, true_adj = sim.train, sim.valid if cfg["n_valid"] else None, sim.adj

    def model_on(rows: Tensor) -> LinearGaussian:
        return LinearGaussian(rows, cfg["obs_var"], cfg["prior_var"], cfg["graph_prior"], cfg["edges_per_node"])

    try:
        return Problem(model_on(data), None if valid is None else model_on(valid), true_adj)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def make_graph(cfg: dict, problem: Problem | None = None) -> PointedGraph:
    """The pointed graph of :mod:`.space` with :math:`\\log R` of the linear-Gaussian model (full data)."""
    problem = problem or make_problem(cfg)
    d = problem.model.d
    try:
        return make_space(d, problem.model.log_reward, cfg["max_parents"] or None)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def make_policies(graph: PointedGraph, cfg: dict, problem: Problem | None = None) -> tuple[JSPPolicy, UniformPolicy]:
    """``(P_F, P_B)``: the JSP-GFN policy (fresh network, logits scaled by ``logit_scale`` or ``N``) and the uniform backward policy over the edges of ``G'``."""
    scale = cfg["logit_scale"] or float((problem or make_problem(cfg)).model.n)
    return JSPPolicy(graph.kappa, JSPNetwork(graph.kappa.d, cfg["hidden"], MODELS[cfg["model"]]), scale), UniformPolicy(graph.kappa_b)
