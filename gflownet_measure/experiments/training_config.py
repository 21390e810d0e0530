"""The typed training settings every experiment shares (:class:`TrainingConfig`), and each experiment's view of them
(:func:`training_settings`): its own subset and defaults, declared once through :func:`~gflownet_measure.options.option`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from gflownet_measure.options import Setting, check_options, option, settings_of

__all__ = ["TrainingConfig", "TRAINING_SETTINGS", "LOGGERS", "ema_option", "training_settings", "tensorboard_writer"]

LOGGERS = ("none", "tensorboard")
"""Where a run's history rows also go (the ``logger`` setting): nowhere else, or TensorBoard event files in the run folder."""


def tensorboard_writer() -> type:
    """torch's ``SummaryWriter`` (:mod:`torch.utils.tensorboard`); a ``ValueError`` (one line, naming the extra) where the
    optional ``tensorboard`` package is not installed."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ValueError(
            "logger=tensorboard needs the tensorboard package, which is not installed: pip install 'gflownet-measure[tensorboard]', or run with logger=none"
        ) from None
    return SummaryWriter


@dataclass(frozen=True)
class _LoggerSetting(Setting):
    """The ``logger`` setting: one of :data:`LOGGERS`, and ``tensorboard`` only where its package is installed. Checked with
    the value, so that the command line stops (exit 2) while it resolves the settings, before it touches the run folder,
    and a :class:`TrainingConfig` built in Python fails at once."""

    def check(self, key: str, value: Any) -> None:
        super().check(key, value)
        if value == "tensorboard":
            tensorboard_writer()


@dataclass(frozen=True)
class TrainingConfig:
    """How :func:`~gflownet_measure.experiments.common.train_gflownet` trains: updates, batch, learning rates and their schedule, clipping,
    evaluations, exploration, and where the history's scalars also go (``logger``).

    An experiment declares the fields it uses (:func:`training_settings`); one it leaves out keeps the default here,
    which is then never read: ``lr_logZ`` where the objective learns no log Z, ``lr_flow`` where there is no state flow,
    ``lr_backward`` where P_B is fixed or trains at ``lr``, ``epsilon`` where the experiment gives its own batches.
    ``logger`` is declared by every experiment that trains (none leaves it out), so ``--set logger=tensorboard`` works for
    each, tables included (their runs get it with the other training settings).
    """

    steps: int = option(3000, "gradient updates", low=1)
    batch_size: int = option(32, "trajectories per update", low=1)
    lr: float = option(1e-3, "Adam learning rate of the policies", low=0.0)
    lr_logZ: float = option(1e-1, "Adam learning rate of log Z", low=0.0)
    lr_flow: float = option(1e-3, "Adam learning rate of the state flow log F (db, subtb)", low=0.0)
    lr_milestone: int = option(0, "multiply every learning rate by lr_gamma each lr_milestone updates (0 = constant)", low=0)
    lr_gamma: float = option(0.5, "learning-rate decay factor at each milestone", low=0.0, high=1.0)
    grad_clip: float = option(10.0, "max global gradient norm (0 = off)", low=0.0)
    eval_every: int = option(100, "updates between evaluations", low=1)
    epsilon: float = option(0.0, "probability of a uniform move while sampling training trajectories", low=0.0, high=1.0)
    lr_backward: float = option(0.0, "Adam learning rate of a learned P_B (0 = lr)", low=0.0)
    logger: str = dataclasses.field(
        default="none",
        metadata={
            "setting": _LoggerSetting(
                "none",
                "where the history's scalars also go, for live curves: none (history.jsonl only) or tensorboard (event files in the run folder's tensorboard/; pip install 'gflownet-measure[tensorboard]')",
                choices=LOGGERS,
            )
        },
    )

    def __post_init__(self):
        check_options(self)


TRAINING_SETTINGS = settings_of(TrainingConfig)


def training_settings(without: tuple[str, ...] = (), **defaults: Any) -> dict[str, Setting]:
    """The settings of :class:`TrainingConfig` an experiment declares: all but ``without``, in field order, each with the
    experiment's default where ``defaults`` names it (e.g. ``epsilon=0.1``)."""
    unknown = sorted((set(without) | set(defaults)) - set(TRAINING_SETTINGS))
    if unknown:
        raise ValueError(f"no training setting {', '.join(unknown)}; valid: {', '.join(TRAINING_SETTINGS)}")
    return {k: dataclasses.replace(s, default=defaults.get(k, s.default)) for k, s in TRAINING_SETTINGS.items() if k not in without}


def ema_option(default: float) -> Any:
    """The ``ema`` field (an :func:`~gflownet_measure.options.option`) of an experiment whose sampler may be a moving
    average of the policy's weights (:class:`~gflownet_measure.training.WeightAverage`, Polyak averaging), with that
    experiment's default."""
    return option(
        default,
        "decay of an exponential moving average of the policy's weights (horizon 1 / (1 - ema) updates); when on, the average is the sampler (scored, sampled, saved) and the last iterate is scored beside it (last_* metrics); 0 = off: the last iterate is the sampler",
        low=0.0,
        high=0.999999,
    )
