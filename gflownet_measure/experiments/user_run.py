"""`gflownet-measure run MODULE:FACTORY`: a space of one's own trained from the command line, with the run folder of
every experiment (config, history, checkpoints, ``--resume``, the NaN stop, ``samples.npz``, ``metrics.json``).

``FACTORY`` is what ``check`` takes (:mod:`gflownet_measure.experiments.user_space`): it returns ``(graph, pf)`` or ``(graph, pf, pb)``
(``pb`` defaults to the uniform policy over :math:`\\kappa_b`, :class:`~gflownet_measure.densities.UniformPolicy`).
``--set`` gives the training settings below and the factory's own (a dataclass of ``option`` fields, or keyword
arguments with defaults); a factory parameter named like a training setting is refused. Training goes through
:func:`~gflownet_measure.experiments.common.train_gflownet` with any registered objective on trajectories; a state flow
:math:`\\log F` (DB, SubTB) is an MLP on ``graph.encode``.

Metrics: the learned :math:`\\log Z` (where the objective learns one) and, from ``eval_samples`` fresh trajectories,
the two estimates of :func:`~gflownet_measure.metrics.log_z_bounds`: the mean log-weight (a lower bound in
expectation) and the importance-weighted :math:`\\log Z` (consistent whatever the policy), where
:math:`w = \\log R(x) + \\sum_t \\log P_B - \\sum_t \\log P_F`. Figures: those estimates over training, and the terminal
states' coordinates that vary (a histogram for one, a scatter of the first two otherwise).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import torch

from gflownet_measure.checks import probe_contracts
from gflownet_measure.contracts import ContractError
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.networks import StateFlow
from gflownet_measure.objectives import GFlowNet, get_objective, objective_names
from gflownet_measure.options import check_options, option, settings_of
from gflownet_measure.rollout import log_densities, sample_forward
from gflownet_measure.run_files import write_file

from .common import CONTRACT_STATES, configure, final_samples, learned_log_Z, train_gflownet
from .plots import plot_history, plot_terminal_samples
from .registry import Experiment, RunContext
from .settings import ConfigError, flatten
from .training_config import TrainingConfig, training_settings
from .user_space import call_factory, factory_settings, load_factory

__all__ = ["SETTINGS", "PRESETS", "UserRunOptions", "user_experiment"]


@dataclass(frozen=True)
class UserRunOptions:
    """The settings of ``run MODULE:FACTORY`` beside the training's and the factory's own."""

    objective: str = option("tb", "training objective (gflownet_measure.objectives)", choices=objective_names(batch="trajectories"))
    subtb_lambda: float = option(0.9, "SubTB weight lambda^(j-i)", low=0.0)
    flow_hidden: int = option(64, "width of the state-flow MLP (db, subtb)", low=1)
    eval_samples: int = option(2000, "fresh trajectories per evaluation and at the end, for the log Z estimates and samples.npz", low=2)
    reward_floor: float = option(
        0.0,
        "train on max(R, reward_floor), so that states where R = 0 (log R = -inf) are trainable; the log Z estimates still score the true R (docs/tutorial.md); 0 = off",
        low=0.0,
    )

    def __post_init__(self):
        check_options(self)


SETTINGS = {**training_settings(without=("lr_backward",)), **settings_of(UserRunOptions)}
PRESETS = {
    # the tutorial's budget (docs/tutorial.md, section 8: 300 updates of 64 trajectories reach log Z within 0.002 there)
    "quick": {"steps": 1000, "batch_size": 64, "eval_every": 100},
    "long": {"steps": 10000, "batch_size": 128, "eval_every": 500, "lr_milestone": 2500},
}


def user_experiment(target: str) -> Experiment:
    """The :class:`~gflownet_measure.experiments.registry.Experiment` that trains the space ``target`` = ``MODULE:FACTORY``: its settings
    are :data:`SETTINGS` and the factory's (imported now, called when the run starts, after seeding)."""
    factory = load_factory(target, "run")
    own = factory_settings(target, factory, "run")
    if own.required:
        raise ConfigError(
            f"run: {target}: parameter {', '.join(own.required)} of {factory.__name__} has no default; give it one (a run folder records every setting, and --resume rebuilds the space from them)"
        )
    clash = sorted(set(own.schema) & set(SETTINGS))
    if clash:
        raise ConfigError(
            f"run: {target}: {factory.__name__}'s setting {', '.join(clash)} has the name of a training setting; rename it (training settings: {', '.join(sorted(SETTINGS))})"
        )

    factory_fields = [(k, type(v.default), dataclasses.field(default=v.default)) for k, v in own.schema.items()]
    space_type = dataclasses.make_dataclass("FactorySettings", factory_fields, frozen=True)  # the factory's own settings
    run_type = dataclasses.make_dataclass("UserRun", [("space", space_type), ("training", TrainingConfig), ("options", UserRunOptions)], frozen=True)

    def build_space(settings):
        """The factory's graph and policies for the run's settings (``pb`` uniform where it returns none)."""
        args, kwargs = own.arguments(flatten(settings.space))  # values the resolved settings already typed
        graph, pf, pb = call_factory(target, factory, args, kwargs, "run")
        if pf is None:
            raise ConfigError(
                f"run: {target}: {factory.__name__} returns no forward policy; return (graph, pf) or (graph, pf, pb) to train it (docs/tutorial.md, section 7)"
            )
        return graph, pf, pb if pb is not None else UniformPolicy(graph.kappa_b)

    def validate(settings) -> None:
        """Before the run folder is touched: the space builds, its objects keep their shape contracts
        (:mod:`gflownet_measure.contracts`: a reward of the wrong shape, atoms of the wrong width, a policy whose ``n_in``
        is not the width of ``encode``), two trajectories roll out and score under P_F and P_B (a kernel or policy that
        raises), each one line, and the objective fits the kernels."""
        graph, pf, pb = build_space(settings)

        def trial() -> None:
            with torch.no_grad():
                log_densities(sample_forward(graph, pf, 2), pf, pb)

        probes = (
            ("the shape contracts' probe", lambda: probe_contracts(graph, {"P_F": pf, "P_B": pb}, CONTRACT_STATES)),
            ("a trial rollout of 2 trajectories", trial),
        )
        for what, probe in probes:
            try:
                probe()
            except ContractError as e:
                raise ConfigError(f"run: {target}: {e}") from None
            except Exception as e:  # the user's kernel, reward or policy raised: one line, naming the probe that met it
                first = str(e).strip().splitlines()[0] if str(e).strip() else ""
                raise ConfigError(f"run: {target}: {what} raised {type(e).__name__}: {first}") from None
        objective = get_objective(settings.options.objective)
        if objective.atoms_only and any(graph.kappa(graph.source[None]).pieces):
            raise ConfigError(
                f"run: objective {objective.name} needs kernels of atoms only, and {target}'s kappa has continuous pieces; valid: {', '.join(n for n in objective_names(batch='trajectories') if not get_objective(n).atoms_only)}"
            )

    def run(settings, context: RunContext) -> dict:
        graph, pf, pb = build_space(settings)
        options = settings.options
        objective = configure(get_objective(options.objective), options)
        n_in = graph.encode(graph.source[None]).shape[-1]
        gfn = GFlowNet(pf, pb, StateFlow(graph.encode, n_in, options.flow_hidden) if objective.needs_flow else None)

        def evaluate() -> dict:
            _, lower, iw = final_samples(graph, gfn, options.eval_samples)
            return {"log_Z_lower_bound": lower, "log_Z_importance_weighted": iw} | learned_log_Z(objective, gfn, graph)

        trained_on = graph.with_reward_floor(options.reward_floor) if options.reward_floor > 0 else graph
        history = train_gflownet(gfn, trained_on, objective, settings.training, context, evaluate)
        traj, lower, iw = final_samples(graph, gfn, options.eval_samples)
        x = traj.terminal.double().cpu().numpy()
        write_file(context.out / "samples.npz", lambda f: np.savez(f, x=x))
        metrics = {
            **{f"{k}_learned": v for k, v in learned_log_Z(objective, gfn, graph).items()},
            "log_Z_lower_bound": lower,
            "log_Z_importance_weighted": iw,
            "seconds": history[-1]["seconds"],
            "steps": settings.training.steps,
            "trajectories": history[-1]["trajectories"],
        }
        plot_history(
            history,
            [k for k in ("log_Z", "log_Z_lower_bound", "log_Z_importance_weighted") if k in history[-1]],
            context.out / "log_z.png",
            graph.name,
            log_y=False,
        )
        plot_terminal_samples(x, context.out / "samples.png", f"{len(x)} terminal states ({options.objective})")
        return metrics

    return Experiment(
        target, f"a space of one's own, {target}", SETTINGS | own.schema, PRESETS, run, validate, settings_type=run_type, evaluation_settings=("eval_samples",)
    )
