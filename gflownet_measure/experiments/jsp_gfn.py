"""`gflownet-measure run jsp-gfn` and `jsp-table`: the joint posterior over DAGs and CPD parameters (JSP-GFN).

One run (Deleu et al. 2023, Algorithm 1; docs/references.md, 'Loss (eq. 8)' and 'Training loop'), through the shared
training path (:func:`~gflownet_measure.experiments.common.train_gflownet`): ``num_envs`` walkers grow graphs under the behaviour policy
(uniform with probability :math:`1 - \\epsilon`, :math:`\\epsilon` rising linearly from 0 to ``1 - min_exploration`` over the
first ``anneal_fraction`` of training, half by default; 100% uniform during ``prefill``); their edge transitions fill a
replay buffer (:class:`~gflownet_measure.jsp_gfn.dag_params.replay.EdgeReplay`, the batch source of the ``transitions`` objective);
each update draws ``batch_size`` transitions and ``theta_samples`` fresh parameters at both ends and minimises the
registered undirected SubTB objective (eq. 8), with a moving average of the weights (``ema``) as the sampler. With
``objective=tb`` (or ``vargrad``) an update instead draws ``batch_size`` whole trajectories, plus ``replayed`` walked back
from a ring of visited terminal states (:class:`~gflownet_measure.experiments.structure_batches.StructureBatches`), and
minimises trajectory balance with a learned log Z. The final sampler is scored against the exact posterior up to d = 5
(:mod:`gflownet_measure.jsp_gfn.dag_params.evaluation`), by held-out NLL, E-SHD, AUROC and the log P_T vs log R fit
beyond (and, with ``reference=mc3-collapsed``, against a collapsed-MC3 gold standard), beside the baselines of the
``baseline`` setting on the same data. Every run also reports its sampler's on-policy log-weights (ELBO, sd, ESS,
importance-weighted log Z) and the same figures of the untrained policy, ``start_*``, measured before training.

``samples.npz``: ``graphs [K, d, d]`` uint8 (``A[i, j] = 1`` for i -> j) and ``thetas [K, P]``, the CPD model's flat
parameters (for a linear model ``P = d^2``, row-major: the weight of i -> j at ``i d + j``, 0 where absent), from
``posterior_samples`` pure-policy rollouts of the core.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np
import torch
from torch import nn

from gflownet_measure.densities import Policy
from gflownet_measure.environments import dag_params as env
from gflownet_measure.graph import PointedGraph
from gflownet_measure.jsp_gfn.baselines import structure as structure_baselines
from gflownet_measure.jsp_gfn.baselines.collapsed_mc3 import gold_standard, no_closed_form
from gflownet_measure.jsp_gfn.bayesnets.cpd_base import CPDModel
from gflownet_measure.jsp_gfn.bayesnets.dags import MAX_ENUMERATE
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.jsp_gfn.bayesnets.structure_metrics import feature_metrics, rmse_pearson, sample_features
from gflownet_measure.jsp_gfn.dag_params.evaluation import (
    conditional_theta_metrics,
    fit_metrics,
    graph_metrics,
    heldout_metrics,
    mean_field_metrics,
    posterior_metrics,
    sample_metrics,
)
from gflownet_measure.jsp_gfn.dag_params.objective import UNDIRECTED_SUBTB
from gflownet_measure.jsp_gfn.dag_params.policy import JSPPolicy
from gflownet_measure.jsp_gfn.dag_params.replay import EdgeReplay, uniform_move_probability
from gflownet_measure.jsp_gfn.dag_params.sampling import posterior_samples
from gflownet_measure.objectives import GFlowNet, Objective, get_objective
from gflownet_measure.options import Setting, check_options, option, settings_of
from gflownet_measure.run_files import write_file, write_text
from gflownet_measure.training import WeightAverage, seeded_generator

from .common import ExecutionConfig, SubRun, balance_metrics, configure, learned_log_Z, run_many, start_metrics, train_gflownet
from .memory import PARAMETER_BYTES, SUB_RUN_BYTES, require_memory, require_phases
from .plots import optional_figure, plot_edge_marginals, plot_fit, plot_history, plot_per_dataset, plot_scatter_panels
from .registry import Experiment, RunContext, register
from .settings import ConfigError, flatten
from .structure_batches import StructureBatches
from .tables import write_table
from .training_config import TrainingConfig, ema_option, training_settings

BASELINE_NAMES = {name: b.label for name, b in structure_baselines.STRUCTURE_BASELINES.items()}
"""The baselines a run can put beside JSP-GFN on the same data (:data:`~gflownet_measure.jsp_gfn.baselines.structure.STRUCTURE_BASELINES`:
structure MCMC, and the structure learners of the optional extra ``baselines``), name -> the label tables print."""


@dataclass(frozen=True)
class EdgeTransitions:
    """``objective=undirected_subtb``: eq. 8 of Deleu et al. 2023 on the edge transitions of
    :class:`~gflownet_measure.jsp_gfn.dag_params.replay.EdgeReplay` (its walkers and buffer), and the objective's own hyper-parameters."""

    theta_samples: int = option(16, "S: fresh theta samples at each end of a transition (S x S pairs per transition)", low=1)
    prefill: int = option(1000, "undirected_subtb: uniform-policy environment steps that fill the replay buffer before training", low=1)
    replay_capacity: int = option(100000, "undirected_subtb: edge transitions kept (FIFO)", low=1)
    num_envs: int = option(8, "undirected_subtb: graphs grown in parallel; one step each per update", low=1)
    delta: float = option(1.0, "Huber threshold of eq. 8 (> 0)", low=1e-6)
    penalty: bool = option(False, "add the length-2 score-matching penalty of eq. C.21", choices=(True, False))
    batch_size_data: int = option(0, "rows of the data per log-reward estimate (eq. 13; 0 = all N)", low=0)

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class TerminalRing:
    """``objective=tb`` or ``vargrad``: the terminal states replayed beside the forward trajectories
    (:class:`~gflownet_measure.experiments.structure_batches.StructureBatches`)."""

    replayed: int = option(
        0,
        "tb, vargrad: per update, terminal states drawn from a ring of visited ones (rank-prioritised by log R) and walked back to s0 with P_B",
        low=0,
    )
    ring_capacity: int = option(2000, "tb, vargrad: terminal states the ring of replayed keeps (FIFO)", low=1)
    rank_weight: float = option(0.01, "tb, vargrad: priority 1 / (rank_weight n + rank) of the ring's draws, rank 0 the highest log R", low=1e-8)

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class Exploration:
    """The behaviour policy's uniform moves: probability 1 during ``prefill``, then linear down to ``min_exploration``."""

    min_exploration: float = option(
        0.1, "final probability of a uniform move (1 during prefill, then linear to this over anneal_fraction of the steps)", low=0.0, high=1.0
    )
    anneal_fraction: float = option(
        0.5, "share of the steps over which uniform moves decay from 1 to min_exploration (the public code: half of 100,000)", low=1e-6, high=1.0
    )

    def __post_init__(self):
        check_options(self)

    def probability(self, step: int, steps: int) -> float:
        """Probability of a uniform move at update ``step`` of ``steps`` (:func:`~gflownet_measure.jsp_gfn.dag_params.replay.uniform_move_probability`)."""
        return uniform_move_probability(step, steps, self.anneal_fraction, self.min_exploration)


@dataclass(frozen=True)
class Evaluation:
    """How the sampler is scored: its final samples, its log-weights, and against what (the exact posterior, or samples and the log P_T vs log R fit)."""

    posterior_samples: int = option(1000, "K: final (G, theta) samples from the learned policy", low=2)
    weight_samples: int = option(
        1000,
        "on-policy trajectories whose log-weights w = log R + sum log P_B - sum log P_F give elbo, log_weight_sd, ess and iw_log_Z, for the sampler and for its untrained start (start_*)",
        low=2,
    )
    exact: str = option(
        "auto",
        "score against the exact posterior (enumerated DAGs; d <= 5): auto = where d <= 5, on, off (sample metrics: held-out NLL, E-SHD, AUROC, log P_T vs log R)",
        choices=("auto", "on", "off"),
    )
    eval_samples: int = option(200, "posterior samples per evaluation during training where the exact posterior is not used", low=2)
    fit_samples: int = option(
        1000,
        "samples whose log P_T is estimated (beam search + importance sampling) for the log P_T vs log R fit, where the exact posterior is not used",
        low=2,
    )
    fit_budget: float = option(
        4.0,
        "policy evaluations of the log P_T estimate, as a multiple of the training's steps x (2 batch_size + num_envs): it takes the first samples (up to fit_samples) whose bound |E| (128 + fit_orders) fits, at least 2 (fit_samples in metrics.json says how many), so the fit costs about a third of the training; 0 = fit_samples exactly",
        low=0.0,
    )
    fit_orders: int = option(
        1000,
        "uniformly random edge orders per graph in the importance-sampling half of that estimate (Deleu et al. 2023, D.3.2): its cost, and its variance, scale with it",
        low=1,
    )

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class GoldStandard:
    """Beyond the exact posterior: a gold standard of :math:`P(G | D)` to score the sampler's marginals against (:func:`reference_metrics`)."""

    reference: str = option(
        "none",
        "beyond the exact posterior (d > 5): mc3-collapsed scores the sampler's and its start's edge and path marginals against a gold standard, the collapsed structure MC3 on the model's closed-form marginal (linear-Gaussian or BDeu; reference_chains x reference_steps steps); none",
        choices=("none", "mc3-collapsed"),
    )
    reference_chains: int = option(8, "reference=mc3-collapsed: chains, from different starts", low=2)
    reference_steps: int = option(
        16_000_000,
        "reference=mc3-collapsed: steps per chain after a quarter as many of burn-in (16M: split-R-hat 1.002, chains within 0.02, about 4 min at d = 20; jsp_gfn/baselines/collapsed_mc3.py)",
        low=1,
    )

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class Baselines:
    """The baselines run on the same data (``baseline``, :data:`BASELINE_NAMES`) and their budgets (:func:`budget`)."""

    baseline: str = option(
        "none",
        "baselines on the same data, comma-separated: gibbs (Gibbs-MC3: exact conjugate theta draws for linear models, adaptive MALA moves for the others), mh (MH-MC3, joint random-walk theta moves), b-ges, b-pc (bootstrap GES / PC, causal-learn; linear models), dibs (DiBS, dibs-lib), bcd (BCD Nets, torch; linear models, d <= 7), vbg (VBG: a structure GFlowNet and a mean-field q(theta); linear models); none. What cannot run is skipped (baselines.json says why)",
    )
    bootstraps: int = option(100, "bootstrap resamples (one DAG each) of b-ges and b-pc", low=1)
    dibs_steps: int = option(1000, "SVGD steps of dibs (30 particles)", low=1)
    bcd_steps: int = option(
        20000, "ELBO steps of bcd (BCD Nets, 64 samples each; the paper's 20,000, about 5 min at d = 5 on one core), posterior_samples draws", low=1
    )
    vbg_steps: int = option(
        10000, "GFlowNet updates of vbg (VBG; its public code: 30,000 at d = 5), in vbg_rounds rounds each ended by an update of q(theta)", low=1
    )
    vbg_rounds: int = option(10, "rounds of vbg: updates of its q(theta) from 1,000 graphs of the GFlowNet (its public code: 15)", low=1)
    mcmc_steps: int = option(20000, "MCMC iterations per chain after burn-in (mcmc_chains chains, thinned to posterior_samples in all)", low=1)
    mcmc_chains: int = option(4, "independent chains of gibbs and mh, each started from the empty graph", low=1)
    mcmc_burn_in: float = option(
        0.25,
        "burn-in of each chain of gibbs and mh, as a fraction of mcmc_steps (the MC3 script of the VBG code, Nishikawa-Toomey et al. 2022: 10 of 10,000, 0.001)",
        low=0.0,
    )
    mcmc_budget: str = option(
        "steps",
        "steps: gibbs, mh and mc3-collapsed run mcmc_steps per chain (a step budget, as the papers); matched: each runs for the wall-clock seconds of this run's training (metrics' seconds), its chains thinned evenly to posterior_samples (baselines at matched wall clock)",
        choices=("steps", "matched"),
    )
    mh_theta_step: float = option(0.05, "step size of mh's Gaussian random walk on the active weights (that VBG script: 0.001)", low=1e-9)

    def __post_init__(self):
        check_options(self)
        _baseline_names(self.baseline)  # an unknown name is a ValueError here, a ConfigError on the command line

    @property
    def names(self) -> list[str]:
        """``baseline`` as a list (``none``: empty), each name once."""
        return _baseline_names(self.baseline)


def _baseline_names(baseline: str) -> list[str]:
    """The ``baseline`` setting as a list (``none``: empty), each name once; a name outside :data:`BASELINE_NAMES` is a ``ValueError``."""
    names = [v.strip() for v in baseline.split(",") if v.strip() and v.strip() != "none"]
    unknown = [v for v in names if v not in BASELINE_NAMES]
    if unknown:
        raise ValueError(f"baseline={baseline!r}: unknown {', '.join(unknown)}; valid: none or a comma-separated list of {', '.join(BASELINE_NAMES)}")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class JspGfnRun:
    """The settings of ``run jsp-gfn``: the data, model and policy (:class:`~gflownet_measure.jsp_gfn.dag_params.DagParamsConfig`),
    the training (:class:`~gflownet_measure.experiments.training_config.TrainingConfig`: no state flow, no epsilon, the batches
    are the objective's own), the batches of each objective (:class:`EdgeTransitions`, :class:`TerminalRing`), the behaviour
    policy's exploration, the evaluation, the gold standard beyond it, the baselines, and the experiment's own."""

    space: env.DagParamsConfig
    training: TrainingConfig
    transitions: EdgeTransitions
    ring: TerminalRing
    exploration: Exploration
    evaluation: Evaluation
    gold_standard: GoldStandard
    baselines: Baselines
    objective: str = option(
        "undirected_subtb",
        "undirected_subtb: eq. 8 of Deleu et al. 2023 on replayed edge transitions; tb: trajectory balance on whole trajectories with a learned log Z (started at the untrained policy's importance-weighted log Z); vargrad: the log-variance of the trajectories' log-weights (no log Z)",
        choices=("undirected_subtb", "tb", "vargrad"),
    )
    lr_theta: float = option(
        0.0,
        "Adam learning rate of the theta head P_phi(theta | G) alone (its own layers, not the shared backbone); 0 = lr. Two time scales: a slow structure policy, a fast conditional regression",
        low=0.0,
    )
    lr_calibrate: float = option(0.01, "Adam learning rate of the stop offsets per edge count (calibrate=true)", low=0.0)
    ema: float = ema_option(0.999)

    def __post_init__(self):
        check_options(self)


SETTINGS = {
    **env.SETTINGS,
    **training_settings(without=("steps", "batch_size", "lr_flow", "epsilon", "lr_backward"), lr=1e-4, grad_clip=0.0),  # no state flow, own batches
    "steps": Setting(2000, "gradient updates (one per environment step of every graph)", low=1),
    "batch_size": Setting(
        64, "per update: replayed edge transitions (undirected_subtb) or trajectories drawn forward from the exploring policy (tb, vargrad)", low=1
    ),
    **settings_of(JspGfnRun),
    **settings_of(EdgeTransitions),
    **settings_of(TerminalRing),
    **settings_of(Exploration),
    **settings_of(Evaluation),
    **settings_of(GoldStandard),
    **settings_of(Baselines),
}

PRESETS: dict[str, dict] = {
    # d = 3 in about a minute; the weight average's horizon is 100 updates (docs/results.md, section 4: 'The sampler', 'd = 3, quick preset')
    "quick": {"d": 3, "steps": 2000, "batch_size": 64, "theta_samples": 16, "prefill": 200, "lr": 3e-4, "eval_every": 500, "ema": 0.99},
    # d = 20 on a CPU: trajectory balance from the one-step reward lookahead's greedy start, with stop offsets per edge count
    # learned at their own rate (docs/results/jsp-gfn-d20.md: chosen on data_seeds 100, 0 and 1; reported on 2 and 3)
    "d20": {
        "d": 20,
        "edges_per_node": 2.0,
        "theta_head": "solver",
        "lookahead": "auto",
        "objective": "tb",
        "calibrate": True,
        "lr_calibrate": 0.01,
        "steps": 2000,
        "batch_size": 16,
        "lr": 5e-4,
        "grad_clip": 10.0,
        "min_exploration": 0.0,
        "anneal_fraction": 1e-6,
        "eval_every": 250,
        "ema": 0.0,
        "eval_samples": 100,
        "fit_samples": 50,
        "fit_orders": 100,
        "posterior_samples": 1000,
    },
    # the Sachs data: a BDeu lookahead start, a slow structure policy and a fast theta head (docs/results.md, section 8: 'Off the empty graph')
    "sachs": {
        "data": "sachs",
        "model": "categorical-mlp",
        "lookahead": "on",
        "steps": 1000,
        "batch_size": 16,
        "theta_samples": 4,
        "batch_size_data": 128,
        "prefill": 200,
        "replay_capacity": 20000,
        "lr": 3e-6,
        "lr_theta": 3e-4,
        "anneal_fraction": 0.5,
        "eval_every": 250,
        "ema": 0.99,
        "eval_samples": 100,
        "fit_samples": 200,
        "posterior_samples": 500,
        "baseline": "mh,gibbs",
        "mcmc_steps": 200,
    },
    # the paper's d = 5 problem at a CPU budget (docs/results.md, section 4: 'How the paper preset was reached', 'Preset history', 'Changes tested at 20,000 updates')
    "paper": {
        "d": 5,
        "model": "lingauss-full",
        "steps": 40000,
        "batch_size": 64,
        "theta_samples": 64,
        "prefill": 1000,
        "replay_capacity": 20000,
        "logit_scale": 10.0,
        "lr": 1e-4,
        "lr_milestone": 10000,
        "lr_gamma": 0.5,
        "anneal_fraction": 0.25,
        "eval_every": 2000,
    },
}


def exploration(settings: JspGfnRun, step: int) -> float:
    """Probability of a uniform move at update ``step``, from the run's ``steps``, ``anneal_fraction`` and ``min_exploration``
    (:meth:`Exploration.probability`)."""
    return settings.exploration.probability(step, settings.training.steps)


def _exact(settings: JspGfnRun, d: int) -> bool:
    """Whether a run scores against the exact posterior: ``exact=on``, or ``auto`` with ``d <= 5`` and a linear-Gaussian model (setting ``exact``)."""
    linear = env.MODELS[settings.space.model][0] == "lingauss"
    exact = settings.evaluation.exact
    return exact == "on" or (exact == "auto" and d <= MAX_ENUMERATE and linear)


def _problem(space: env.DagParamsConfig) -> env.Problem:
    """The data and model ``space`` names; data that cannot be read or modelled is a :class:`ConfigError`."""
    try:
        return env.make_problem(space)
    except ValueError as e:
        raise ConfigError(str(e)) from None


def budget(settings: JspGfnRun, seed: int, seconds: float = 0.0) -> structure_baselines.Budget:
    """The baselines' :class:`~gflownet_measure.jsp_gfn.baselines.structure.Budget` from the run's settings of the same names
    (:class:`Baselines`, ``posterior_samples``, and the space's ``max_parents`` and ``edges_per_node``); with
    ``mcmc_budget=matched``, the MCMC baselines' wall clock is ``seconds`` (the training's)."""
    b, space = settings.baselines, settings.space
    return structure_baselines.Budget(
        seed=seed,
        posterior_samples=settings.evaluation.posterior_samples,
        max_parents=space.max_parents,
        edges_per_node=space.edges_per_node,
        mcmc_steps=b.mcmc_steps,
        mcmc_chains=b.mcmc_chains,
        mcmc_burn_in=b.mcmc_burn_in,
        mh_theta_step=b.mh_theta_step,
        dibs_steps=b.dibs_steps,
        bcd_steps=b.bcd_steps,
        vbg_steps=b.vbg_steps,
        vbg_rounds=b.vbg_rounds,
        bootstraps=b.bootstraps,
        mcmc_seconds=seconds if b.mcmc_budget == "matched" else 0.0,
    )


def _baselines(settings: JspGfnRun, problem: env.Problem, exact: ExactPosterior | None, seed: int, out: Path, seconds: float) -> dict:
    """Every baseline of the ``baseline`` setting on the same data, its metrics prefixed by its name (``b-ges`` -> ``b_ges_``):
    the sample metrics of :func:`sample_metrics` (held-out NLL where it has theta in the model's layout, E-SHD, AUROC) and,
    with the exact posterior, its marginals' RMSEs and theta NLL. ``seconds``: the training's wall clock, the MCMC
    baselines' with ``mcmc_budget=matched``. ``baselines.json`` records which ran and why others were skipped."""
    metrics: dict[str, float] = {}
    record: dict[str, str] = {}
    for name in settings.baselines.names:
        result = structure_baselines.sample(name, problem.model, budget(settings, seed, seconds))
        if isinstance(result, str):
            record[name] = f"skipped: {result}"
            print(f"jsp-gfn: baseline {name} skipped: {result}", file=sys.stderr)
            continue
        samples, extra = result
        graphs, thetas = samples.graphs, samples.thetas
        write_file(out / f"baseline_{name}.npz", lambda f: np.savez(f, graphs=graphs.cpu().numpy().astype(np.uint8)))
        m = sample_metrics(problem if thetas is not None else dataclasses.replace(problem, heldout=None), graphs, thetas)
        if exact is not None:
            m |= feature_metrics(graphs, exact.features())
            if thetas is not None:
                m["theta_nll"] = float(exact.theta_metric(graphs, thetas.double()).mean())
        prefix = name.replace("-", "_") + "_"
        metrics |= {prefix + k: v for k, v in (m | extra | {"seconds": samples.seconds, "samples": len(graphs)}).items()}
        record[name] = "ran"
    if record:
        write_text(out / "baselines.json", json.dumps(record, indent=1) + "\n")
    return metrics


def _module_rates(settings: JspGfnRun, pf: JSPPolicy) -> list[tuple[nn.Module | nn.Parameter, float]]:
    """The parts of ``gfn`` that train at their own Adam rates (``lr_modules`` of :func:`~gflownet_measure.experiments.common.train_gflownet`):
    the theta head at ``lr_theta`` (where it is not 0), the stop offsets per edge count at ``lr_calibrate`` (``calibrate=true``)."""
    rates: list[tuple[nn.Module | nn.Parameter, float]] = [(pf.network.theta_head, settings.lr_theta)] if settings.lr_theta else []
    if settings.space.calibrate:
        if pf.stop_offsets is None:
            raise ValueError("calibrate=true, but the policy has no stop offsets")
        rates.append((pf.stop_offsets, settings.lr_calibrate))
    return rates


def run(settings: JspGfnRun, context: RunContext) -> dict:
    space, evaluation, out, resume = settings.space, settings.evaluation, context.out, context.resume
    problem = _problem(space)
    graph = env.make_graph(space, problem)
    pf, pb = env.make_policies(graph, space, problem)
    model, d = problem.model, problem.model.d
    # the posterior over the DAGs the kernel reaches (a linear-Gaussian model's: _exact, and validate for exact=on)
    exact = ExactPosterior(model, space.max_parents or None) if _exact(settings, d) and isinstance(model, LinearGaussian) else None

    def scores(policy: JSPPolicy, prefix: str = "", n: int = evaluation.eval_samples, drawn: tuple | None = None) -> dict:
        """Against the exact posterior, or the sample metrics of ``n`` draws (``drawn``: ones already made)."""
        if exact is not None:
            m = graph_metrics(policy, exact)[0]
            return {prefix + k: m[k] for k in ("graph_kl", "edge_rmse", "path_rmse", "markov_rmse", "edge_r", "path_r", "markov_r")}
        if drawn is None:
            with torch.no_grad():
                drawn = posterior_samples(graph, policy, n)
        return {prefix + k: v for k, v in sample_metrics(problem, *drawn).items()}

    def measure_start() -> dict:
        """The untrained policy: its scores and marginals from one set of ``posterior_samples`` draws, its log-weights."""
        with torch.no_grad():
            drawn = posterior_samples(graph, pf, evaluation.posterior_samples)
        return scores(pf, drawn=drawn) | balance_metrics(graph, pf, pb, evaluation.weight_samples) | _marginals(drawn[0])

    start = start_metrics(out, resume, measure_start)
    gfn, objective, batches = _training_parts(settings, graph, pf, pb, model, start, resume)
    ema = WeightAverage(pf, settings.ema) if settings.ema > 0 else None  # when on, the average is the sampler
    sampler = pf if ema is None else cast(JSPPolicy, ema.module)  # the average is a copy of pf

    def evaluate() -> dict:
        m = scores(sampler) | balance_metrics(graph, sampler, pb, evaluation.eval_samples)
        return m | (scores(pf, "last_") if ema is not None else {}) | learned_log_Z(objective, gfn, graph)

    lr_modules = _module_rates(settings, pf)
    history = train_gflownet(gfn, graph, objective, settings.training, context, evaluate, batches, ema, lr_modules)
    with torch.no_grad():
        graphs, thetas = posterior_samples(graph, sampler, evaluation.posterior_samples)
    write_file(out / "samples.npz", lambda f: np.savez(f, graphs=graphs.cpu().numpy().astype(np.uint8), thetas=thetas.cpu().numpy()))
    with torch.no_grad():
        if exact is not None:
            metrics, arrays = posterior_metrics(sampler, exact, graphs, thetas, problem.true_adj)
            if ema is not None:  # the last iterate on the papers' estimator too: K samples of its own
                last_graphs = posterior_samples(graph, pf, evaluation.posterior_samples)[0]
                metrics |= {f"last_{k}_samples": v for k, v in feature_metrics(last_graphs, exact.features()).items()}
        else:
            n_fit = min(evaluation.fit_samples, len(graphs))
            metrics = sample_metrics(problem, graphs, thetas)
            training = settings.training
            fit_budget = (
                evaluation.fit_budget * training.steps * (2 * training.batch_size + settings.transitions.num_envs) if evaluation.fit_budget > 0 else None
            )
            fit, arrays = fit_metrics(
                sampler, model, graphs[:n_fit], thetas[:n_fit], generator=seeded_generator(0), progress=True, n_orders=evaluation.fit_orders, budget=fit_budget
            )
            metrics |= fit
            if metrics.get("fit_samples", 0) < MIN_ROBUST_FIT:  # RANSAC on a few dozen points is noise: the plain fit and r stay
                metrics.pop("log_pt_vs_log_r_slope_robust", None)
            if problem.heldout_nll_truth is not None:  # the generating network's own score of the held-out rows
                metrics["heldout_nll_truth"] = problem.heldout_nll_truth
            if isinstance(model, LinearGaussian) and isinstance(problem.heldout, LinearGaussian):  # the graphs' share of the held-out error
                metrics |= conditional_theta_metrics(model, problem.heldout, graphs, problem.true_adj, seeded_generator(0))
            if settings.gold_standard.reference != "none":
                metrics |= reference_metrics(settings, model, graphs, start)
    metrics |= {k: v for k, v in history[-1].items() if k.startswith("last_")}  # the last evaluation scored the final weights
    metrics |= balance_metrics(graph, sampler, pb, evaluation.weight_samples) | learned_log_Z(objective, gfn, graph)
    metrics |= {f"start_{k}": v for k, v in start.items() if not isinstance(v, list)} | {"expected_edges": float(graphs.double().sum((1, 2)).mean())}
    metrics |= {
        "seconds": history[-1]["seconds"],
        "seconds_per_step": history[-1]["seconds"] / settings.training.steps,
        "steps": settings.training.steps,
        "d": d,
        "n_params": model.n_params,
    }
    if exact is not None:
        metrics |= mean_field_metrics(exact) | {"log_evidence": exact.log_normaliser()}
        if isinstance(problem.heldout, LinearGaussian):  # simulated data: the held-out rows, scored beside as many exact draws
            exact_draws = exact.sample(evaluation.posterior_samples, seeded_generator(context.seed))
            metrics |= heldout_metrics(problem.heldout, graphs, thetas) | {f"{k}_exact": v for k, v in heldout_metrics(problem.heldout, *exact_draws).items()}
    metrics |= _baselines(settings, problem, exact, context.seed, out, history[-1]["seconds"])
    # a Pearson r (or an AUROC, a slope) is undefined when one side is constant, e.g. every sampled graph has the same
    # Markov blankets: such keys are left out, as metrics.json holds finite numbers only
    metrics = {k: v for k, v in metrics.items() if math.isfinite(v)}
    _figures(settings, history, exact, arrays, out, d, model.n)
    if problem.true_adj is not None and exact is None:
        _edge_figure(settings, problem, problem.true_adj, graphs, out)
    return metrics


MIN_ROBUST_FIT = 1000
"""The fewest points of the log P_T vs log R fit whose RANSAC slope (``log_pt_vs_log_r_slope_robust``) is reported: on 30-50
points the same policy gave slopes 0.72, 0.45 and -0.06 in three runs."""


def _marginals(graphs: torch.Tensor) -> dict:
    """``{"edge_marginals": [d][d], "path_marginals": [d][d], "expected_edges": float}`` of sampled ``graphs [K, d, d]``
    (what a gold standard is compared with)."""
    features = sample_features(graphs.cpu())
    return {"edge_marginals": features["edge"].tolist(), "path_marginals": features["path"].tolist(), "expected_edges": float(features["edge"].sum())}


def reference_metrics(settings: JspGfnRun, model: CPDModel, graphs: torch.Tensor, start: dict) -> dict:
    """The sampler's and its start's edge and path marginals against a gold standard of :math:`P(G | D)` beyond the exact
    posterior (``reference=mc3-collapsed``: :func:`~gflownet_measure.jsp_gfn.baselines.collapsed_mc3.gold_standard`, the collapsed
    structure MC3 on the model's closed-form marginal): ``{edge,path}_{rmse,r}_reference`` and ``start_*`` of them, the
    posterior's ``reference_expected_edges`` beside the samples' ``expected_edges``, and the chains' ``reference_rhat`` and
    ``reference_chain_spread`` (how far the gold standard itself is from converged)."""
    gold, space = settings.gold_standard, settings.space
    ref = gold_standard(model, gold.reference_chains, gold.reference_steps, seed=space.data_seed, max_parents=space.max_parents or None)
    features = {"edge": ref.edge, "path": ref.path}
    out: dict[str, float] = {f"{k}_reference": v for k, v in feature_metrics(graphs.cpu(), features).items()}
    for name, exact in features.items():
        out[f"start_{name}_rmse_reference"], out[f"start_{name}_r_reference"] = rmse_pearson(start[f"{name}_marginals"], exact)
    return out | {
        "reference_expected_edges": ref.expected_edges,
        "reference_rhat": ref.rhat,
        "reference_chain_spread": ref.chain_spread,
        "reference_seconds": ref.seconds,
    }


def _training_parts(
    settings: JspGfnRun, graph: PointedGraph, pf: JSPPolicy, pb: Policy, model: CPDModel, start: dict, resume: bool
) -> tuple[GFlowNet, Objective, EdgeReplay | StructureBatches]:
    """``(gfn, objective, batches)`` of the ``objective`` setting: eq. 8 on the edge transitions of :class:`EdgeReplay` (its
    walkers and buffer prefilled by a uniform policy unless the run resumes), or a trajectory objective on
    :class:`~.structure_batches.StructureBatches`, log Z (tb) started at the untrained policy's importance-weighted estimate."""
    batch_size = settings.training.batch_size
    if settings.objective == "undirected_subtb":
        eq8 = settings.transitions
        replay = EdgeReplay(graph, pf, model, eq8.batch_size_data, eq8.replay_capacity, eq8.num_envs, batch_size, lambda step: exploration(settings, step))
        if not resume:  # a resumed run restores the replay and the walkers from its checkpoint
            replay.prefill(eq8.prefill)
        return GFlowNet(pf, pb), configure(UNDIRECTED_SUBTB, settings), replay
    gfn = GFlowNet(pf, pb, log_Z=start["iw_log_Z"])
    ring = settings.ring
    batches = StructureBatches(graph, gfn, batch_size, ring.replayed, lambda step: exploration(settings, step), ring.ring_capacity, ring.rank_weight)
    return gfn, configure(get_objective(settings.objective), settings), batches


def _edge_figure(settings: JspGfnRun, problem: env.Problem, true_adj: torch.Tensor, graphs: torch.Tensor, out: Path) -> None:
    """``edge_marginals.png``: the samples' edge frequencies (and each baseline's, from its ``baseline_<name>.npz``) beside the known graph."""
    marginals = {"JSP-GFN": graphs.double().mean(0).cpu().numpy()}
    for name in settings.baselines.names:
        path = out / f"baseline_{name}.npz"
        if path.exists():
            with np.load(path) as z:
                marginals[BASELINE_NAMES[name]] = z["graphs"].astype(float).mean(0)
    names = list(problem.names) or [str(i) for i in range(problem.model.d)]
    reference = "consensus graph" if settings.space.data == "sachs" else "true graph"
    plot_edge_marginals(marginals, true_adj.cpu().numpy(), names, out / "edge_marginals.png", f"posterior edge marginals beside the {reference} (outlined)")


def _figures(settings: JspGfnRun, history: list[dict], exact: ExactPosterior | None, arrays: dict, out: Path, d: int, n: int) -> None:
    """``edge_rmse.png`` (or ``heldout_nll.png``) over training, and ``posterior.png``: the learned marginals against the exact
    ones and log P_T against log R (or, beyond the exact posterior, log P_T against log R coloured by edge count)."""
    title = f"JSP-GFN, d = {d}, N = {n}, {settings.space.model}"
    if exact is not None:
        plot_history(history, "edge_rmse", out / "edge_rmse.png", f"edge-marginal RMSE to the exact posterior (d = {d})")
        off = ~np.eye(d, dtype=bool)
        plot_scatter_panels(
            [
                ("edge marginals", arrays["edge_exact"][off], arrays["edge_model"][off], "exact P(i -> j | D)", "learned P_T(i -> j)", True),
                ("terminal states", arrays["log_r"] - exact.log_normaliser(), arrays["log_pt"], "log R(G, theta) - log Z", "log P_T(G, theta)", False),
            ],
            out / "posterior.png",
            title,
        )
        return
    if any("heldout_nll" in h for h in history):
        plot_history(history, "heldout_nll", out / "heldout_nll.png", f"expected held-out NLL of posterior samples (d = {d})", log_y=False)
    plot_fit(arrays, out / "posterior.png", title)


def update_bytes(settings: JspGfnRun, problem: env.Problem) -> float:
    """Peak memory of one update, the largest of three estimates (bytes):

    - the S x S residual pairs of eq. 8: about 3.3 d^2 bytes per transition and pair (measured at d = 3, 64 transitions,
      S from 64 to 256: 29.5 bytes per pair);
    - the CPDs' likelihood of S x B parameter draws at both ends on the mini-batch of M rows, kept for the backward pass:
      8 bytes x 2 x S x B x M x d x width x 3, with width the hidden units of an MLP CPD (its largest intermediate) or d
      for a linear one;
    - the walkers' forward kernel: ``num_envs`` x d^2 atoms of d^2 + P + 1 numbers, three copies of 4 bytes.
    """
    model = problem.model
    eq8 = settings.transitions
    d, B, S = model.d, settings.training.batch_size, eq8.theta_samples
    M = eq8.batch_size_data if 0 < eq8.batch_size_data < model.n else model.n
    width = max(getattr(model, "hidden", d), getattr(model, "outputs", 1))
    pairs = 3.3 * d * d * B * S**2
    likelihood = 8 * 2 * S * B * M * d * width * 3
    walkers = 12 * eq8.num_envs * d * d * (d * d + model.n_params + 1)
    return max(pairs, likelihood, walkers)


POSTERIOR_SAMPLE_BYTES = 13.0
"""Bytes per posterior sample, pair of variables and unit of the policy network that an evaluation holds while the
network runs on many samples at once (measured on the quick preset, d = 3, hidden 128, ``steps=1``, from 5,000 to
40,000 samples: 15.1 KB per ``posterior_samples`` against the exact posterior, 14.4 KB with ``exact=off``, 14.3 KB per
``eval_samples`` with ``exact=off``; the weights of ``weight_samples``, drawn 100 at a time, did not move the peak from
10,000 to 1,000,000)."""


def network_parameters(hidden: int) -> int:
    """About the parameters of the policy network (:class:`~gflownet_measure.jsp_gfn.dag_params.network.JSPNetwork`):
    the backbone's edge, node and global MLPs, the senders', receivers' and stop MLPs and the theta head, 18 hidden x
    hidden blocks, and its attention's and embeddings' layers."""
    return 18 * (hidden + 1) * hidden + 600 * hidden


def evaluation_bytes(settings: JspGfnRun, problem: env.Problem, n: int, exact: bool) -> float:
    """Peak memory of an evaluation on ``n`` posterior samples: the policy network on many at once
    (:data:`POSTERIOR_SAMPLE_BYTES`; all of them against the exact posterior, else the sampler's chunks of about 2^24
    numbers, :func:`~gflownet_measure.jsp_gfn.dag_params.sampling.posterior_samples`), and 8 bytes per number each
    sample keeps: its graph and theta four times, its log-likelihood of each held-out row and variable twice, a theta posterior's d^3."""
    model = problem.model
    d, P = model.d, model.n_params
    rows = n if exact else min(n, max(1, 2**24 // (d * (d * d + P + 1))))
    heldout = problem.heldout.n if problem.heldout is not None else 0
    return POSTERIOR_SAMPLE_BYTES * d * d * settings.space.hidden * rows + 8.0 * n * (4 * (d * d + P) + 2 * heldout * d + d**3)


def _validate_transitions(batch_size: int, eq8: EdgeTransitions) -> None:
    """Eq. 8's replay: a batch (``batch_size``) no larger than the buffer, nor than the transitions of the prefill."""
    if batch_size > eq8.replay_capacity:
        raise ConfigError(
            f"batch_size={batch_size} exceeds replay_capacity={eq8.replay_capacity}: an update replays batch_size transitions from the buffer; lower batch_size or raise replay_capacity"
        )
    if batch_size > eq8.prefill * eq8.num_envs:
        raise ConfigError(
            f"batch_size={batch_size} exceeds the {eq8.prefill * eq8.num_envs} transitions of prefill={eq8.prefill} x num_envs={eq8.num_envs}: the first updates would replay fewer; raise prefill to at least {-(-batch_size // eq8.num_envs)}"
        )


def validate(settings: JspGfnRun) -> None:
    """The data (a user's CSV is read and checked), the replay batch against the buffer, the mini-batch against the rows,
    and the memory of each phase (:func:`~gflownet_measure.experiments.memory.require_phases`): one update
    (:func:`update_bytes`), the model (:func:`network_parameters`), the final samples and each evaluation's
    (:func:`evaluation_bytes`), the log-weights (16 bytes each); the baselines' names are checked when the settings are built."""
    problem = _problem(settings.space)
    d, model, evaluation = problem.model.d, settings.space.model, settings.evaluation
    reference, batch_size, eq8 = settings.gold_standard.reference, settings.training.batch_size, settings.transitions
    if evaluation.exact == "on" and d > MAX_ENUMERATE:
        raise ConfigError(
            f"exact=on scores against the exact posterior, which enumerates the DAGs for d <= {MAX_ENUMERATE}; d = {d}: use exact=auto or off (held-out NLL, E-SHD, AUROC and the log P_T vs log R fit)"
        )
    if evaluation.exact == "on" and not isinstance(problem.model, LinearGaussian):
        raise ConfigError(f"exact=on needs the closed-form posterior of a linear-Gaussian model; model={model} has none: use exact=auto or off")
    if reference != "none":
        if _exact(settings, d):
            raise ConfigError(
                f"reference={reference} is a gold standard beyond the exact posterior, which this run (d = {d}) scores against: use reference=none, or exact=off"
            )
        if no_closed_form(problem.model):
            raise ConfigError(f"reference={reference}: {no_closed_form(problem.model)}; use reference=none")
    if settings.objective == "undirected_subtb":
        _validate_transitions(batch_size, eq8)
    elif eq8.batch_size_data:
        raise ConfigError(
            f"batch_size_data={eq8.batch_size_data} estimates the reward of eq. 8's transitions on a mini-batch; objective={settings.objective} scores whole trajectories with the full-data reward: use batch_size_data=0"
        )
    elif settings.ring.replayed > settings.ring.ring_capacity:
        raise ConfigError(f"replayed={settings.ring.replayed} exceeds ring_capacity={settings.ring.ring_capacity}: lower replayed or raise ring_capacity")
    if eq8.batch_size_data > problem.model.n:
        raise ConfigError(
            f"batch_size_data={eq8.batch_size_data} exceeds the {problem.model.n} data rows N: a mini-batch (eq. 13) takes at most N rows; lower it, or 0 for all"
        )
    exact = _exact(settings, d) and isinstance(problem.model, LinearGaussian)  # what run scores against
    hidden, samples, weights = settings.space.hidden, evaluation.posterior_samples, evaluation.weight_samples
    during = evaluation.eval_samples  # each evaluation during training draws them where it does not score against the exact posterior
    require_phases(
        (update_bytes(settings, problem), f"d={d} with model={model}, batch_size={batch_size}, theta_samples={eq8.theta_samples}"),
        (PARAMETER_BYTES * network_parameters(hidden), f"hidden={hidden}"),
        (evaluation_bytes(settings, problem, samples, exact), f"posterior_samples={samples}"),
        (16.0 * during if exact else evaluation_bytes(settings, problem, during, False), f"eval_samples={during}"),
        (16.0 * weights, f"weight_samples={weights}"),
    )


register(
    Experiment(
        "jsp-gfn",
        "JSP-GFN: joint posterior over DAGs and CPD parameters (linear, MLP, categorical); against the exact posterior for d <= 5, by held-out NLL, E-SHD, AUROC and log P_T vs log R beyond",
        SETTINGS,
        PRESETS,
        run,
        validate,
        settings_type=JspGfnRun,
        evaluation_settings=("baseline", "mcmc_steps", "mcmc_chains", "mcmc_burn_in", "mcmc_budget", "fit_samples", "fit_orders", "fit_budget"),
    )
)

# --- Table 3 / C.2 and D.1: d = 3, 4, 5 over datasets, beside the paper -------------------------------------


def _d1(edge: tuple, path: tuple, markov: tuple, suffix: str = "") -> dict:
    """A row of Deleu et al. 2023, Table D.1 from its ``(RMSE, 95% CI, Pearson r)`` per feature, keyed as our metrics
    (``suffix``: ``_samples`` for JSP-GFN's sample-based keys; a baseline's marginals are its samples' already)."""
    row = {}
    for name, (rmse, ci, r) in zip(("edge", "path", "markov"), (edge, path, markov)):
        row[f"{name}_rmse{suffix}"], row[f"{name}_r{suffix}"] = (rmse, ci), (r, None)
    return row


PAPER: dict[str, dict] = {  # docs/references.md, 'Table 3 and Table D.1'. Both papers estimate the marginals from K sampled graphs, so their
    # values stand beside our *_samples keys, never beside the exact-P_T ones
    "lahlou_table3": {  # Lahlou et al. 2023, Table 3 / C.2, GFlowNet row: RMSE (Pearson r) and Params
        3: {
            "edge_rmse_samples": 0.0150,
            "edge_r_samples": 0.9993,
            "path_rmse_samples": 0.00339,
            "path_r_samples": 1.0000,
            "markov_rmse_samples": 0.0214,
            "markov_r_samples": 0.9986,
            "theta_nll": -1.75,
        },
        4: {
            "edge_rmse_samples": 0.0161,
            "edge_r_samples": 0.9990,
            "path_rmse_samples": 0.0107,
            "path_r_samples": 0.9996,
            "markov_rmse_samples": 0.0238,
            "markov_r_samples": 0.9982,
            "theta_nll": -3.06,
        },
        5: {
            "edge_rmse_samples": 0.0180,
            "edge_r_samples": 0.9990,
            "path_rmse_samples": 0.0199,
            "path_r_samples": 0.9989,
            "markov_rmse_samples": 0.0283,
            "markov_r_samples": 0.9980,
            "theta_nll": -5.17,
        },
    },
    "deleu_d1": {  # Deleu et al. 2023, Table D.1 (d = 5, 20 datasets): the row of the theta density the run trains
        "lingauss-diag": _d1((0.018, 0.005, 0.998), (0.022, 0.005, 0.998), (0.019, 0.006, 0.999), "_samples"),
        "lingauss-full": _d1((0.019, 0.007, 0.998), (0.021, 0.007, 0.998), (0.020, 0.008, 0.999), "_samples"),
    },
    "deleu_d1_baselines": {  # the same table's baseline rows, by our baseline names
        "mh": _d1((0.357, 0.022, 0.067), (0.368, 0.027, 0.045), (0.341, 0.017, 0.064)),
        "gibbs": _d1((0.357, 0.022, 0.028), (0.367, 0.026, 0.150), (0.341, 0.018, 0.062)),
        "b-ges": _d1((0.263, 0.070, 0.635), (0.302, 0.080, 0.544), (0.129, 0.022, 0.955)),
        "b-pc": _d1((0.305, 0.057, 0.570), (0.349, 0.058, 0.471), (0.354, 0.072, 0.821)),
        "dibs": _d1((0.312, 0.038, 0.737), (0.357, 0.041, 0.710), (0.504, 0.052, 0.643)),
        "bcd": _d1((0.215, 0.055, 0.819), (0.266, 0.057, 0.774), (0.327, 0.040, 0.850)),
        "vbg": _d1((0.237, 0.037, 0.816), (0.284, 0.027, 0.799), (0.434, 0.058, 0.738)),
    },
}
D1_ROWS = {"lingauss-diag": "diag", "lingauss-full": "full"}
"""The model setting -> its JSP-GFN row of Table D.1 (the other models have none)."""
FEATURE_KEYS = tuple(f"{name}_{stat}{suffix}" for name in ("edge", "path", "markov") for stat in ("rmse", "r") for suffix in ("", "_samples"))
"""RMSE and Pearson r of each feature, from the exact P_T (ours) and from K samples (the papers' estimator)."""
TABLE_KEYS = FEATURE_KEYS + ("theta_nll", "theta_nll_exact")
"""Rows of a table against the exact posterior (d <= 5)."""
SAMPLE_KEYS = ("heldout_nll", "heldout_nll_bma", "expected_shd", "auroc", "log_pt_vs_log_r_slope_robust", "log_pt_vs_log_r_r")
"""Rows of a table without it (Deleu et al. 2023, section 5.2: d = 20)."""
BALANCE_KEYS = ("elbo", "log_weight_sd", "ess", "iw_log_Z", "expected_edges", "edge_rmse_reference", "path_rmse_reference")
"""How close a sampler is to balance (:func:`~gflownet_measure.metrics.log_weight_summary`) and, beyond d = 5, to the gold
standard; each also of the untrained start (``start_``), the row that shows what training did."""
BASELINE_KEYS = {
    True: ("edge_rmse", "edge_r", "path_rmse", "path_r", "markov_rmse", "markov_r", "theta_nll"),
    False: ("heldout_nll", "heldout_nll_bma", "expected_shd", "auroc"),
}


PER_RUN = ("data", "d", "data_seed")
"""The settings of a run that are not the table's: each run's own (its ``d`` of ``dims``, simulated data, its dataset's number)."""


@dataclass(frozen=True)
class JspTable:
    """The settings of ``run jsp-table``: those its runs share (:class:`JspGfnRun`, whose :data:`PER_RUN` settings are
    each run's own: :meth:`sub_run`), the numbers of variables and datasets, and where the runs train."""

    runs: JspGfnRun
    execution: ExecutionConfig
    dims: str = option(
        "3,4,5", "comma-separated numbers of variables (up to 5: against the exact posterior; beyond: held-out NLL, E-SHD, AUROC, log P_T vs log R)"
    )
    datasets: int = option(3, "simulated ER datasets per d (data_seed 0, 1, ...)", low=1)

    def __post_init__(self):
        check_options(self)
        _dims(self.dims)  # a bad list is a ValueError here, a ConfigError on the command line

    @property
    def dimensions(self) -> list[int]:
        """``dims`` as numbers."""
        return _dims(self.dims)

    def sub_run(self, d: int, dataset: int) -> JspGfnRun:
        """The settings of the run of ``d`` variables on simulated dataset ``dataset`` (its ``data_seed``)."""
        return dataclasses.replace(self.runs, space=dataclasses.replace(self.runs.space, d=d, data="", data_seed=dataset))


def _dims(dims: str) -> list[int]:
    """The ``dims`` setting as numbers; a value that is not a number of variables in ``2..MAX_NODES`` is a ``ValueError``."""
    try:
        numbers = [int(v) for v in dims.split(",")]
    except ValueError:
        numbers = []
    if not numbers or any(not 2 <= v <= env.MAX_NODES for v in numbers):
        raise ValueError(f"dims={dims!r}: give comma-separated numbers of variables in 2..{env.MAX_NODES}, e.g. 3,4,5 or 20")
    return numbers


def _flat(settings: JspGfnRun) -> dict:
    """A run's flat settings as ``config.json`` records them: :func:`~gflownet_measure.experiments.settings.flatten` of
    ``settings`` on the keys of :data:`SETTINGS` (the training settings it does not declare left out), the table's
    own :data:`PER_RUN` last (the order a table's runs have always recorded)."""
    flat = flatten(settings)
    return {k: flat[k] for k in SETTINGS if k not in PER_RUN} | {k: flat[k] for k in PER_RUN}


TABLE_SETTINGS = {k: v for k, v in SETTINGS.items() if k not in PER_RUN} | settings_of(JspTable) | settings_of(ExecutionConfig)
TABLE_PRESETS = {
    "quick": {k: v for k, v in PRESETS["quick"].items() if k != "d"} | {"dims": "3", "datasets": 1, "steps": 500},
    "paper": {k: v for k, v in PRESETS["paper"].items() if k != "d"} | {"datasets": 20},
    "d20": {k: v for k, v in PRESETS["d20"].items() if k != "d"}
    | {"dims": "20", "datasets": 5, "baseline": "mh,gibbs,mc3-collapsed,b-ges,b-pc,dibs,bcd,vbg", "reference": "mc3-collapsed"},  # bcd says why not (d > 7)
}


def run_table(table: JspTable, context: RunContext) -> dict:
    """One jsp-gfn run per (d, dataset) in ``out/d<d>/data<k>`` (finished ones kept on resume), then the table beside the
    paper (``d <= 5``) or beside the baselines (beyond)."""
    out, dims, datasets, settings, execution = context.out, table.dimensions, table.datasets, table.runs, table.execution
    jobs = [SubRun(out / f"d{d}" / f"data{k}", context.seed + k, _flat(table.sub_run(d, k)), settings_type=JspGfnRun) for d in dims for k in range(datasets)]
    results = iter(run_many(run, jobs, context.resume, execution.jobs, executor=execution.executor, address=execution.address))
    rows = {d: [next(results) for _ in range(datasets)] for d in dims}
    names, model = settings.baselines.names, settings.space.model
    history: list[dict] = []
    lines: list[str] = []
    metrics: dict[str, float] = {}
    for d, ms in rows.items():
        exact = _exact(settings, d)
        keys = TABLE_KEYS if exact else SAMPLE_KEYS
        for k, m in enumerate(ms):
            history.append({"step": len(history) + 1, "trajectories": 0, "d": d, "dataset": k} | {key: m[key] for key in keys if key in m})
        optional = (
            "last_edge_rmse",
            "last_edge_rmse_samples",
            "last_path_rmse",
            "last_path_rmse_samples",
            "last_markov_rmse",
            "last_markov_rmse_samples",
            "mean_field_edge_rmse",
            "mean_field_path_rmse",
            "mean_field_markov_rmse",
            "last_heldout_nll",
            *(f"{prefix}{key}" for key in BALANCE_KEYS for prefix in ("", "start_")),
            *(f"start_{key}" for key in (("graph_kl", "edge_rmse", "path_rmse", "markov_rmse") if exact else ("heldout_nll", "expected_shd", "auroc"))),
            "seconds",
        )
        optional += tuple(f"{b.replace('-', '_')}_{key}" for b in names for key in BASELINE_KEYS[exact] + ("seconds",))
        extra = [key for key in optional if all(key in m for m in ms)]
        _plot_table(settings, d, ms, exact, out / f"table_d{d}.png")
        graph = f"ER{settings.space.edges_per_node:g}"
        d1_row = PAPER["deleu_d1"].get(model, {}) | {f"{b.replace('-', '_')}_{k}": v for b in names for k, v in PAPER["deleu_d1_baselines"].get(b, {}).items()}
        d1_head = f"paper (Deleu D.1, {D1_ROWS.get(model, '-')})"
        lines += [
            f"\nd = {d}: {len(ms)} {graph} datasets of N = {settings.space.n_data}, {model} (mean ± 95% CI over datasets)",
            f"{'metric':<28} {'ours':>20} {'paper (Lahlou T3)':>18} {d1_head:>24}",
        ]
        for key in tuple(k for k in keys if all(k in m for m in ms)) + tuple(extra):
            v = np.array([m[key] for m in ms])
            metrics[f"{key}/d{d}/mean"] = float(v.mean())
            cell = f"{v.mean():.4g}"
            if len(v) > 1:  # one dataset has no spread: the key is left out (metrics.json holds finite numbers only)
                ci = metrics[f"{key}/d{d}/ci95"] = float(1.96 * v.std(ddof=1) / np.sqrt(len(v)))
                cell += f" ± {ci:.2g}"
            t3 = PAPER["lahlou_table3"].get(d, {}).get(key)
            d1 = d1_row.get(key) if d == 5 else None
            paper_d1 = "" if d1 is None else f"{d1[0]:.3g}" + ("" if d1[1] is None else f" ± {d1[1]:.2g}")
            lines.append(f"{key:<28} {cell:>20} {'' if t3 is None else f'{t3:.4g}':>18} {paper_d1:>24}")
    skipped = sorted({line for d in dims for k in range(datasets) for line in _skipped(out / f"d{d}" / f"data{k}")})
    lines += [f"\nbaseline {line}" for line in skipped]
    lines.append("")
    if any(_exact(settings, d) for d in dims):
        lines.append(
            f"*_rmse, *_r: RMSE and Pearson r of the sampler's exact marginals (P_T summed over every DAG; ours, no Monte Carlo error); *_rmse_samples, *_r_samples: of the frequencies in K = {settings.evaluation.posterior_samples} sampled graphs, the papers' estimator, beside which the papers' values stand. Each baseline's marginals are its samples' frequencies."
        )
    lines.append(
        "The sampler is the exponential moving average of the policy's weights (setting ema); last_*: the last iterate, scored the same way."
        if settings.ema > 0
        else "The sampler is the last iterate (ema = 0)."
    )
    lines.append(
        "mean_field_*: the fixed point of a perfectly trained diagonal theta density (lingauss-diag) against the exact posterior, a bias of that model (ExactPosterior.mean_field_log_prob)."
    )
    lines.append(
        "heldout_nll: mean over posterior samples of -log P(D' | G, theta) on the 100 held-out rows (nats); heldout_nll_bma: of the model average; expected_shd, auroc: against the simulated graph; <baseline>_*: the same for each baseline's samples."
    )
    lines.append(
        "seconds: training time of one dataset (its updates and evaluations, summed over resumed sessions; sampling, scoring and the baselines not included)."
    )
    lines.append(
        "theta_nll: mean of -log P(theta_k | G_k, D) over samples, without the 1/N factor (the scale of the paper's numbers, docs/references.md, 'Metrics'); theta_nll_exact: what an exact sampler scores (not a bound: a theta density narrower than the posterior scores lower)."
    )
    write_table(out, "\n".join(lines).strip() + "\n", history, out / f"d{next(iter(rows))}" / "data0", ("posterior.png",))
    return metrics | {"datasets": datasets}


def _skipped(folder: Path) -> list[str]:
    """The lines ``name: skipped: reason`` of a sub-run's ``baselines.json``."""
    path = folder / "baselines.json"
    if not path.exists():
        return []
    return [f"{name}: {state}" for name, state in json.loads(path.read_text()).items() if state != "ran"]


@optional_figure
def _plot_table(settings: JspGfnRun, d: int, ms: list[dict], exact: bool, path: Path) -> None:
    """``table_d<d>.png``: per dataset, the sampler (exact P_T and K samples) beside its last iterate and each baseline: the
    three RMSEs and Params against the exact posterior (beside the papers' means, estimated from samples), or the held-out NLL, E-SHD and AUROC without it."""
    baselines, model, samples = settings.baselines.names, settings.space.model, settings.evaluation.posterior_samples
    panels = []
    if exact:
        for feature, title in (("edge", "edge"), ("path", "path"), ("markov", "Markov-blanket")):
            labels = {
                "JSP-GFN, exact P_T": f"{feature}_rmse",
                f"JSP-GFN, {samples} samples": f"{feature}_rmse_samples",
                "last iterate, exact P_T": f"last_{feature}_rmse",
            }
            labels |= {BASELINE_NAMES[b]: f"{b.replace('-', '_')}_{feature}_rmse" for b in baselines}
            series = {label: [m[key] for m in ms] for label, key in labels.items() if all(key in m for m in ms)}
            references = {"Lahlou et al. T3": (PAPER["lahlou_table3"][d][f"{feature}_rmse_samples"], 0.0)} if d in PAPER["lahlou_table3"] else {}
            if d == 5 and model in D1_ROWS:
                references[f"Deleu et al. D.1 ({D1_ROWS[model]})"] = PAPER["deleu_d1"][model][f"{feature}_rmse_samples"]
            panels.append((f"{title} features: RMSE against the exact posterior", series, references))
        series = {"JSP-GFN": [m["theta_nll"] for m in ms], "exact sampler": [m["theta_nll_exact"] for m in ms]}
        panels.append(
            (
                "Params: mean -log P(theta | G, D) (no 1/N)",
                series,
                {"Lahlou et al. T3": (PAPER["lahlou_table3"][d]["theta_nll"], 0.0)} if d in PAPER["lahlou_table3"] else {},
            )
        )
    else:
        for key, title in (("heldout_nll", "expected held-out NLL (nats)"), ("expected_shd", "E-SHD"), ("auroc", "AUROC of the edge marginals")):
            labels = {"JSP-GFN": key} | {BASELINE_NAMES[b]: f"{b.replace('-', '_')}_{key}" for b in baselines}
            series = {label: [m[k] for m in ms] for label, k in labels.items() if all(k in m for m in ms)}
            panels.append((title, series, {}))
    plot_per_dataset(panels, path, f"JSP-GFN, d = {d}: {len(ms)} datasets (lines: means)")


def validate_table(table: JspTable) -> None:
    """:func:`validate` of the table's largest run (its memory), on the first dataset, and the memory of its sub-runs,
    one per number of variables and dataset (:data:`~gflownet_measure.experiments.memory.SUB_RUN_BYTES`)."""
    validate(table.sub_run(max(table.dimensions), 0))
    require_memory(SUB_RUN_BYTES * len(table.dimensions) * table.datasets, f"datasets={table.datasets}")


register(
    Experiment(
        "jsp-table",
        "Table 3 / C.2, D.1 (d <= 5, against the exact posterior) and section 5.2 (d = 20, held-out NLL, E-SHD, AUROC beside the baselines): JSP-GFN over datasets",
        TABLE_SETTINGS,
        TABLE_PRESETS,
        run_table,
        validate_table,
        multi_run=True,
        settings_type=JspTable,
    )
)
