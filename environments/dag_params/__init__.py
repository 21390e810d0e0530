"""The hybrid DAG x Theta space of JSP-GFN (Deleu et al. 2023; Lahlou et al. 2023 section 4.4).

Modules: :mod:`.dags` (closures, masks, enumeration, features), :mod:`.cpd_base` and :mod:`.cpds` (the CPD models behind
one interface with flat parameter vectors: linear Gaussian, MLP Gaussian, categorical MLP; their priors and reward,
simulated nonlinear data; docs/cpd_models.md), :mod:`.bayesnet` (the linear-Gaussian model, simulated and CSV data),
:mod:`.exact` (the exact posterior for ``d <= 5``), :mod:`.states`, :mod:`.space` and :mod:`.reference` (the measurable
pointed graph; its reference measures enumerated for ``d <= 5``, an importance rule beyond), :mod:`.network`,
:mod:`.theta` and :mod:`.policy` (the forward policy), :mod:`.objective` (the transition loss), :mod:`.evaluation` (the
policy's exact marginals and the metrics of Table 3 / D.1), :mod:`.mcmc` and :mod:`.metrics` (baselines and comparisons).
"""
from __future__ import annotations

from dataclasses import dataclass

from torch import Tensor

from gflownet_measure.densities import UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.options import check_options, option, settings_of

from .bayesnet import GRAPH_PRIORS, load_csv, simulate_er
from .cpds import CPDModel, make_model, simulate_mlp
from .network import JSPNetwork
from .policy import JSPPolicy
from .space import make_space

__all__ = ["DagParamsConfig", "SETTINGS", "MODELS", "MAX_NODES", "Problem", "make_problem", "make_graph", "make_policies"]

MODELS = {"lingauss-diag": ("lingauss", "diag"), "lingauss-full": ("lingauss", "full"), "mlp": ("mlp", "diag"), "categorical-mlp": ("categorical-mlp", "diag")}
"""``model`` setting -> (CPD model of :data:`~.cpds.CPD_MODELS`, parameter head of :data:`~.network.THETA_HEADS`)."""

MAX_NODES = 100
"""The largest ``d`` a run accepts; the memory of an update is checked separately (``experiments.jsp_gfn.validate``)."""


@dataclass(frozen=True)
class DagParamsConfig:
    """The data (simulated Erdos-Renyi, or a user's CSV), the CPD model and the policy network of JSP-GFN."""

    d: int = option(3, "number of variables of simulated data (a CSV sets its own); beyond 5 nu is not enumerated and the exact posterior is unavailable", low=2, high=MAX_NODES)
    data: str = option("", "a CSV file (header = variable names, one column per variable); empty: simulated Erdos-Renyi data", path=True)
    data_seed: int = option(0, "seed of the simulated graph, parameters and data", low=0)
    n_data: int = option(100, "simulated training rows N", low=2)
    n_valid: int = option(100, "simulated held-out rows (scored by heldout_nll; 0: none)", low=0)
    edges_per_node: float = option(1.0, "expected edges per node k of the simulated ER graph (ER1: 1, ER2: 2), and of the erdos_renyi prior", low=0.0)
    obs_var: float = option(0.01, "noise variance sigma^2 of every Gaussian CPD (fixed)", low=1e-8)
    prior_var: float = option(1.0, "variance of the N(0, .) prior on each active parameter", low=1e-8)
    graph_prior: str = option("uniform", "prior over DAGs", choices=GRAPH_PRIORS)
    max_parents: int = option(0, "at most this many parents per node (0: no limit)", low=0)
    model: str = option("lingauss-diag", "CPDs and P_phi(theta | G): linear Gaussian with a diagonal or full-covariance Normal, MLP Gaussian CPDs (5 hidden units), categorical MLP CPDs (16 hidden units; integer data)", choices=tuple(MODELS))
    hidden: int = option(128, "width of the backbone and heads", low=1)
    # the public JSP-GFN code scales by N; measured here at d = 5 (quick preset, 2,000 updates) that starts from a far more
    # peaked policy and learns slower: KL(P(G|D) || P_T) = 46-50 with N (lr 3e-5 or 1e-4) against 0.63 with 1 (lr 3e-4)
    logit_scale: float = option(1.0, "multiply the edge and stop logits by this (0: the number of data rows N, as the public JSP-GFN code does)", low=0.0)

    def __post_init__(self):
        check_options(self)


SETTINGS = settings_of(DagParamsConfig)


@dataclass(frozen=True)
class Problem:
    """The data and model of a run: ``heldout`` is the same model on the held-out rows (``None`` for a user's CSV or
    ``n_valid = 0``), ``true_adj`` the simulated graph (``None`` for a CSV)."""

    model: CPDModel
    heldout: CPDModel | None
    true_adj: Tensor | None


def make_problem(config: DagParamsConfig) -> Problem:
    """Simulated ER data (``data`` empty; linear or MLP CPDs as the model) or the user's CSV, and the CPD model on it;
    ``ValueError`` for data that cannot be read or modelled (the message names the file and the problem)."""
    cpd, _ = MODELS[config.model]
    if config.data:
        data, _ = load_csv(config.data)
        if data.shape[1] > MAX_NODES:
            raise ValueError(f"data={config.data!r} has {data.shape[1]} columns (variables); the DAG space takes at most {MAX_NODES}: keep at most {MAX_NODES} columns")
        valid = true_adj = None
    elif cpd == "categorical-mlp":
        raise ValueError("model=categorical-mlp needs categorical data: give data=PATH.csv with integer states (0, 1, ...) in every column")
    else:
        simulate = simulate_mlp if cpd == "mlp" else simulate_er
        sim = simulate(config.d, config.edges_per_node, config.n_data, config.n_valid, seed=config.data_seed, obs_std=config.obs_var**0.5)
        data, valid, true_adj = sim.train, sim.valid if config.n_valid else None, sim.adj

    def model_on(rows: Tensor) -> CPDModel:
        return make_model(cpd, rows, obs_var=config.obs_var, prior_var=config.prior_var, graph_prior=config.graph_prior, edges_per_node=config.edges_per_node)

    return Problem(model_on(data), None if valid is None else model_on(valid), true_adj)


def make_graph(config: DagParamsConfig, problem: Problem | None = None) -> PointedGraph:
    """The pointed graph of :mod:`.space` with :math:`\\log R` of the CPD model (full data)."""
    problem = problem or make_problem(config)
    return make_space(problem.model, config.max_parents or None)


def make_policies(graph: PointedGraph, config: DagParamsConfig, problem: Problem | None = None) -> tuple[JSPPolicy, UniformPolicy]:
    """``(P_F, P_B)``: the JSP-GFN policy (fresh network, logits scaled by ``logit_scale`` or ``N``) and the uniform backward policy over the edges of ``G'``."""
    model = (problem or make_problem(config)).model
    scale = config.logit_scale or float(model.n)
    network = JSPNetwork(model.d, config.hidden, model.block_index(), model.active, MODELS[config.model][1])
    return JSPPolicy(graph.kappa, network, scale), UniformPolicy(graph.kappa_b)
