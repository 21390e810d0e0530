"""Experiments registered by name: settings, presets, a check of the resolved settings, and a run function writing the run-folder contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, NamedTuple

from gflownet_measure.options import Setting, lookup

from .settings import ConfigError, build

__all__ = ["Experiment", "RunContext", "EXPERIMENTS", "register", "get_experiment"]


class RunContext(NamedTuple):
    """Where and how a run runs, beside its settings: its folder ``out``, whether it continues the checkpoint there
    (``resume``), its ``seed`` (``--seed``, or a table's seed of the run), from which every generator of the run is made,
    and its ``identity`` (:func:`~gflownet_measure.experiments.common.run_id`: the seed, the flat settings and a digest
    of the files they name), which its checkpoints record; ``revised``: the settings a resume changed from those the
    run trained with (``--resume --set``, only :attr:`Experiment.evaluation_settings`), which
    :class:`~gflownet_measure.training.Trainer` accepts only once no evaluation is left before the last one."""

    out: Path
    resume: bool
    seed: int
    identity: dict
    revised: tuple[str, ...] = ()


def _accept(settings: Any) -> None:
    """The default check: the settings' own types and ranges (:func:`~gflownet_measure.experiments.settings.resolve`) are all there is."""


@dataclass(frozen=True)
class Experiment:
    """``run(settings, context)`` writes config.json, history.jsonl, samples.npz, checkpoint.pt, PNGs, then metrics.json
    last; ``settings`` is the typed ``settings_type`` built from the resolved command-line settings
    (:func:`~gflownet_measure.experiments.settings.build`: ``settings`` here is their flat schema, the keys ``--set``
    takes), ``context`` a :class:`RunContext`.

    ``validate(settings)`` raises :class:`~gflownet_measure.experiments.settings.ConfigError` for settings that are each
    in range but do not go together, inputs that cannot be read, or a batch that cannot fit in memory; the command line
    calls it before it touches the run folder, so a bad setting never costs a finished run. ``multi_run``: the run
    trains sub-runs in sub-folders (their checkpoints are there, not in ``out``).

    ``evaluation_settings``: the settings only evaluation reads (sample counts of the metrics, baselines run after
    training), never the updates: a run that failed after training (out of memory in its last evaluation, say) is
    finished with other values of them (``--resume --set eval_samples=...``), its trained model unchanged.
    """

    name: str
    description: str
    settings: dict[str, Setting]
    presets: dict[str, dict]
    run: Callable[[Any, RunContext], dict]
    validate: Callable[[Any], None] = _accept
    multi_run: bool = False
    settings_type: type = field(kw_only=True)
    evaluation_settings: tuple[str, ...] = field(default=(), kw_only=True)

    def typed(self, cfg: dict) -> Any:
        """The settings ``run`` and ``validate`` take, from the resolved flat ``cfg``."""
        return build(self.settings_type, cfg)


EXPERIMENTS: dict[str, Experiment] = {}


def register(exp: Experiment) -> Experiment:
    EXPERIMENTS[exp.name] = exp
    return exp


def get_experiment(name: str) -> Experiment:
    try:
        return lookup(EXPERIMENTS, name, "experiment")
    except ValueError as e:
        raise ConfigError(str(e)) from None
