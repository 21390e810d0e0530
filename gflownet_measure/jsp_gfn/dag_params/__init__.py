"""The hybrid DAG x Theta space of JSP-GFN (Deleu et al. 2023; Lahlou et al. 2023 section 4.4).

The GFlowNet half; the Bayesian networks it is built on (DAGs, CPD models, data, scores, the exact posterior) are
:mod:`gflownet_measure.jsp_gfn.bayesnets`, and the MCMC baselines :mod:`gflownet_measure.jsp_gfn.baselines.mcmc`.
Modules: :mod:`.states`, :mod:`.space` and :mod:`.reference` (the measurable pointed graph; its reference measures
enumerated for ``d <= 5``, an importance rule beyond), :mod:`.network`, :mod:`.theta`, :mod:`.solver` and
:mod:`.policy` (the forward policy), :mod:`.objective` (the transition loss), :mod:`.replay` and :mod:`.sampling`,
:mod:`.evaluation` (the policy's exact marginals and the metrics of Table 3 / D.1).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from gflownet_measure.densities import UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.jsp_gfn.bayesnets.cpd_base import GRAPH_PRIORS, CPDModel
from gflownet_measure.jsp_gfn.bayesnets.cpds import make_model
from gflownet_measure.jsp_gfn.bayesnets.datasets.csv_files import load_data
from gflownet_measure.jsp_gfn.bayesnets.datasets.pgmpy_networks import PREFIX as PGMPY
from gflownet_measure.jsp_gfn.bayesnets.datasets.pgmpy_networks import simulate_pgmpy
from gflownet_measure.jsp_gfn.bayesnets.datasets.sachs import consensus_graph, discretise, sachs_split
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import SimulatedData, simulate_er, simulate_mlp, simulate_zi
from gflownet_measure.jsp_gfn.bayesnets.laplace import LaplaceCache
from gflownet_measure.jsp_gfn.bayesnets.scores import lookahead_scores
from gflownet_measure.jsp_gfn.dag_params.network import DiagGaussianHead, FullGaussianHead, JSPNetwork
from gflownet_measure.jsp_gfn.dag_params.policy import JSPPolicy
from gflownet_measure.jsp_gfn.dag_params.solver import SolverHead
from gflownet_measure.jsp_gfn.dag_params.space import dag_kernel, make_space
from gflownet_measure.options import check_options, option, settings_of

__all__ = ["DagParamsConfig", "SETTINGS", "MODELS", "MAX_NODES", "Problem", "make_problem", "make_graph", "make_policies", "solver_rows"]

MODELS: dict[str, tuple[str, type[DiagGaussianHead] | type[FullGaussianHead]]] = {
    "lingauss-diag": ("lingauss", DiagGaussianHead),
    "lingauss-full": ("lingauss", FullGaussianHead),
    "mlp": ("mlp", DiagGaussianHead),
    "categorical-mlp": ("categorical-mlp", DiagGaussianHead),
    "zi-mlp": ("zi-mlp", DiagGaussianHead),
}
"""``model`` setting -> (the CPD model's name in :data:`~gflownet_measure.jsp_gfn.bayesnets.cpds.CPD_MODELS`, the one registry of
CPD models; the class of the network's parameter head, :mod:`.network`). ``lingauss-diag`` / ``-full`` and ``mlp`` are
the public JSP-GFN code's ``lingauss_diag`` / ``lingauss_full`` and ``mlp_gauss``."""

MAX_NODES = 100
"""The largest ``d`` a run accepts; the memory of an update is checked separately (``gflownet_measure.experiments.jsp_gfn.validate``)."""


@dataclass(frozen=True)
class DagParamsConfig:
    """The data (simulated Erdos-Renyi, or a user's CSV), the CPD model and the policy network of JSP-GFN."""

    d: int = option(
        3,
        "number of variables of simulated data (a CSV sets its own); beyond 5 nu is not enumerated and the exact posterior is unavailable",
        low=2,
        high=MAX_NODES,
    )
    data: str = option(
        "",
        "a CSV file (header = variable names, one column per variable, optionally an 'intervention' column of targets); sachs: the shipped Sachs et al. 2005 flow-cytometry data with its interventions (docs/sachs.md); pgmpy:NAME: n_data + n_valid rows simulated from pgmpy's discrete network NAME, e.g. pgmpy:sachs, its graph known (the extra pgmpy); empty: simulated Erdos-Renyi data",
        path=True,
        keywords=("sachs", "pgmpy:"),
    )
    interventions: str = option(
        "",
        "a CSV of the interventions of data=PATH.csv: one column of targets per row (node names separated by ';', empty or none: observational), or one 0/1 column per node; perfect interventions drop the target's CPD term (every CPD model)",
        path=True,
    )
    bins: int = option(
        0, "discretise every variable into this many quantile bins of the training rows (0: the data as they are; data=sachs: 0 means 3, tertiles)", low=0
    )
    subsample: int = option(0, "train on this many random training rows (0: all; JSP-GFN Fig. 4a uses 100 of the Sachs rows)", low=0)
    sachs_heldout: str = option(
        "u0126,ly294002",
        "data=sachs: the conditions held out and scored by the interventional NLL (keys cd3cd28, icam2, akt, g0076, psitect, u0126, ly294002, pma, b2camp or 1..9); the others are trained on",
    )
    sachs_rows: int = option(600, "data=sachs: random rows kept per condition (0: all; 600 gives the paper's N = 4,200 over 7 training conditions)", low=0)
    data_seed: int = option(0, "seed of the simulated graph, parameters and data", low=0)
    n_data: int = option(100, "simulated training rows N", low=2)
    n_valid: int = option(100, "simulated held-out rows (scored by heldout_nll; 0: none)", low=0)
    edges_per_node: float = option(1.0, "expected edges per node k of the simulated ER graph (ER1: 1, ER2: 2), and of the erdos_renyi prior", low=0.0)
    obs_var: float = option(0.01, "noise variance sigma^2 of every Gaussian CPD (fixed)", low=1e-8)
    prior_var: float = option(1.0, "variance of the N(0, .) prior on each active parameter", low=1e-8)
    graph_prior: str = option("uniform", "prior over DAGs", choices=GRAPH_PRIORS)
    max_parents: int = option(0, "at most this many parents per node (0: no limit)", low=0)
    model: str = option(
        "lingauss-diag",
        "CPDs and P_phi(theta | G): linear Gaussian with a diagonal or full-covariance Normal, MLP Gaussian CPDs (5 hidden units), categorical MLP CPDs (16 hidden units; integer data), zero-inflated Normal MLP CPDs (16 hidden units; exact zeros are dropouts, JSP-GFN eq. D.18)",
        choices=tuple(MODELS),
    )
    hidden: int = option(128, "width of the backbone and heads", low=1)
    # the public JSP-GFN code scales by N; measured here at d = 5 (quick preset, 2,000 updates) that starts from a far more
    # peaked policy and learns slower: KL(P(G|D) || P_T) = 46-50 with N (lr 3e-5 or 1e-4) against 0.63 with 1 (lr 3e-4)
    logit_scale: float = option(1.0, "multiply the edge and stop logits by this (0: the number of data rows N, as the public JSP-GFN code does)", low=0.0)
    theta_head: str = option(
        "amortised",
        "P_phi(theta | G): amortised (the paper's: the network's mean and scale) or solver (linear-Gaussian CPDs: Newton steps to the exact conditional mean, the scale from the curvature; MLP CPDs: each node's conditional mode from a cached multi-start L-BFGS solve per (node, parent set), the scale from its Laplace precision; docs/cpd_models.md)",
        choices=("amortised", "solver"),
    )
    solver_steps: int = option(
        10,
        "theta_head=solver: Newton (linear-Gaussian CPDs) or preconditioned conjugate-gradient steps T on log R(G, .) per graph (not read by MLP CPDs)",
        low=0,
    )
    solver_scale: float = option(
        1.0,
        "theta_head=solver: the scale's multiplier of the curvature's (Laplace) scale at initialisation, softplus(rho + c) = this at rho = 0 (1: mean-field for a Gaussian posterior; an MLP's posterior is not one: docs/results/jsp-gfn-d20.md)",
        low=1e-6,
        high=1e6,
    )
    solver_starts: int = option(
        3,
        "MLP CPDs (theta_head=solver, or lookahead): prior draws seeded by the (node, parent set) that each per-node L-BFGS solve starts from, the best kept",
        low=1,
        high=64,
    )
    solver_iterations: int = option(
        100,
        "MLP CPDs (theta_head=solver, or lookahead): L-BFGS steps per start of each (node, parent set) solve (jsp_gfn/bayesnets/laplace.py)",
        low=0,
        high=10_000,
    )
    lookahead: str = option(
        "off",
        "one-step reward lookahead: shift the edge and stop logits by the gains log P(G + e, D) - log P(G, D) of a marginal score, a fixed function of G that sets where training starts, not its fixed point (docs/cpd_models.md): on (the model's own closed-form marginal for linear-Gaussian CPDs; the Laplace local marginal for MLP and zero-inflated CPDs; the BDeu score for categorical CPDs), off, or auto (on for linear-Gaussian CPDs only)",
        choices=("off", "on", "auto"),
    )
    calibrate: bool = option(
        False,
        "learn an offset of the stop logit per edge count, zero at the start: the completions beyond one step that the lookahead's stop term misses (jsp_gfn/dag_params/policy.py, JSPPolicy); its rate is the run's lr_calibrate",
        choices=(True, False),
    )
    solver_rows: int = option(
        0,
        "theta_head=solver: the data rows its log R reads, a random subset fixed by data_seed when the run starts (0: all N; never the update's mini-batch)",
        low=0,
    )

    def __post_init__(self):
        check_options(self)

    @property
    def uses_lookahead(self) -> bool:
        """Whether the policy's logits carry the one-step lookahead (``lookahead`` on, or auto with a linear-Gaussian model)."""
        return self.lookahead == "on" or (self.lookahead == "auto" and MODELS[self.model][0] == "lingauss")


SETTINGS = settings_of(DagParamsConfig)


@dataclass(frozen=True)
class Problem:
    """The data and model of a run: ``heldout`` is the same model on the held-out rows (``None`` for a user's CSV or
    ``n_valid = 0``; for ``data=sachs`` the held-out conditions, with their interventions), ``true_adj`` the simulated
    graph (the consensus graph for ``data=sachs``; ``None`` for a CSV), ``names`` the variables."""

    model: CPDModel
    heldout: CPDModel | None
    true_adj: Tensor | None
    names: tuple[str, ...] = ()
    heldout_nll_truth: float | None = None
    """The held-out NLL of the model that generated the data, where it is known (``data=pgmpy:NAME``)."""


def make_problem(config: DagParamsConfig) -> Problem:
    """Simulated ER data (``data`` empty; linear, MLP or zero-inflated CPDs as the model), the shipped Sachs data
    (``data=sachs``: the held-out conditions of ``sachs_heldout``, tertiles, interventions), categorical rows simulated
    from a pgmpy network (``data=pgmpy:NAME``, :mod:`gflownet_measure.jsp_gfn.bayesnets.datasets.pgmpy_networks`) or the user's CSV (with its
    interventions), and the CPD model on it; ``ValueError`` for data that cannot be read or modelled (the message names
    the file and the problem).

    The last problem is kept: :func:`make_graph` and :func:`make_policies` of one configuration (as ``check`` and the
    registry build them), and a run after its validation, read and simulate the data once. The key is the
    configuration, the files' sizes and modification times, and the default device.
    """
    return _make_problem(config, _file_stamps(config), str(torch.get_default_device()))


def _file_stamps(config: DagParamsConfig) -> tuple:
    """``(path, size, mtime)`` of each data file the configuration names, so that an edited file is read again."""
    paths = [p for p in (config.data, config.interventions) if p and p != "sachs" and not p.startswith(PGMPY)]
    return tuple((p, st.st_size, st.st_mtime_ns) if (st := _stat(p)) else (p,) for p in paths)


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except OSError:  # missing or unreadable: load_data names the problem
        return None


@functools.lru_cache(maxsize=1)
def _make_problem(config: DagParamsConfig, stamps: tuple, device: str) -> Problem:
    """:func:`make_problem`'s work; ``stamps`` and ``device`` only key the cache."""
    cpd, _ = MODELS[config.model]
    valid = valid_mask = true_adj = mask = truth = None
    names: Sequence[str]
    if config.data == "sachs":
        if cpd != "categorical-mlp":
            raise ValueError(
                f"data=sachs is discretised into {config.bins or 3} states per protein (categorical); model={config.model} is continuous: use model=categorical-mlp"
            )
        split = sachs_split(config.sachs_heldout, config.sachs_rows, config.bins or 3, config.data_seed)
        data, mask, valid, valid_mask, true_adj, names = (
            split.train,
            split.train_interventions,
            split.heldout,
            split.heldout_interventions,
            consensus_graph(),
            split.names,
        )
    elif config.data.startswith(PGMPY):
        if cpd != "categorical-mlp":
            raise ValueError(f"data={config.data} simulates categorical states; model={config.model} is continuous: use model=categorical-mlp")
        sim = simulate_pgmpy(config.data[len(PGMPY) :], config.n_data, config.n_valid, config.data_seed)
        data, valid, true_adj, names = sim.train, sim.valid if config.n_valid else None, sim.adj, sim.names
        truth = sim.valid_nll if config.n_valid else None
    elif config.data:
        data, names, mask = load_data(config.data, config.interventions)
        if config.bins:
            data = torch.from_numpy(discretise(data.numpy(), n_states=config.bins, names=names)[0])
    elif config.interventions:
        raise ValueError("interventions=PATH.csv needs data=PATH.csv (simulated data are observational)")
    elif cpd == "categorical-mlp":
        raise ValueError("model=categorical-mlp needs categorical data: give data=PATH.csv with integer states (0, 1, ...) in every column, or data=sachs")
    else:
        simulators: dict[str, Callable[..., SimulatedData]] = {"mlp": simulate_mlp, "zi-mlp": simulate_zi}
        simulated = simulators.get(cpd, simulate_er)(
            config.d, config.edges_per_node, config.n_data, config.n_valid, seed=config.data_seed, obs_std=config.obs_var**0.5
        )
        data, valid, true_adj, names = simulated.train, simulated.valid if config.n_valid else None, simulated.adj, tuple(simulated.names)
    if data.shape[1] > MAX_NODES:  # a CSV's columns or a pgmpy network's variables (simulated data are bounded by d)
        raise ValueError(
            f"data={config.data!r} has {data.shape[1]} columns (variables); the DAG space takes at most {MAX_NODES}: keep at most {MAX_NODES} columns"
        )
    if config.subsample:
        if config.subsample > data.shape[0]:
            raise ValueError(f"subsample={config.subsample} exceeds the {data.shape[0]} training rows; lower it, or 0 for all")
        keep = torch.from_numpy(np.sort(np.random.default_rng(config.data_seed).choice(data.shape[0], config.subsample, replace=False)))
        data, mask = data[keep], None if mask is None else mask[keep]

    def model_on(rows: Tensor, interventions: Tensor | None) -> CPDModel:
        return make_model(
            cpd,
            rows,
            obs_var=config.obs_var,
            prior_var=config.prior_var,
            graph_prior=config.graph_prior,
            edges_per_node=config.edges_per_node,
            interventions=interventions,
        )

    true_adj = None if true_adj is None else true_adj.to(torch.get_default_device())  # beside the sampled graphs (--device)
    return Problem(model_on(data, mask), None if valid is None else model_on(valid, valid_mask), true_adj, tuple(names), truth)


def make_graph(config: DagParamsConfig, problem: Problem | None = None) -> PointedGraph:
    """The pointed graph of :mod:`.space` with :math:`\\log R` of the CPD model (full data)."""
    problem = problem or make_problem(config)
    return make_space(problem.model, config.max_parents or None)


def make_policies(graph: PointedGraph, config: DagParamsConfig, problem: Problem | None = None) -> tuple[JSPPolicy, UniformPolicy]:
    """``(P_F, P_B)``: the JSP-GFN policy (fresh network, logits scaled by ``logit_scale`` or ``N``) and the uniform backward policy over the edges of ``G'``."""
    model = (problem or make_problem(config)).model
    scale = config.logit_scale or float(model.n)
    network = JSPNetwork(model.d, config.hidden, model.block_index(), model.active, MODELS[config.model][1])
    rows = solver_rows(config, model.n)
    laplace = LaplaceCache(model, rows, config.solver_starts, config.solver_iterations) if hasattr(model, "node_log_likelihood") else None
    if config.theta_head == "solver":
        base = network.theta_head
        assert isinstance(base, (DiagGaussianHead, FullGaussianHead))  # the fresh network's own head (MODELS)
        network.theta_head = SolverHead(base, model, config.solver_steps, rows, laplace, config.solver_scale)
    # the lookahead reads all rows: it shares the solves when the solver head does too
    scores = lookahead_scores(model, laplace if rows is None else None) if config.uses_lookahead else None
    return JSPPolicy(dag_kernel(graph), network, scale, None if scores is None else scores.edge_gains, config.calibrate), UniformPolicy(graph.kappa_b)


def solver_rows(config: DagParamsConfig, n: int) -> Tensor | None:
    """The data rows the solver head reads: ``None`` (all) when ``solver_rows`` is 0 or at least ``n``, else a sorted random
    subset drawn from ``data_seed`` (the same for the whole run and on resume)."""
    if not 0 < config.solver_rows < n:
        return None
    return torch.from_numpy(np.sort(np.random.default_rng(config.data_seed + 1).choice(n, config.solver_rows, replace=False)))
