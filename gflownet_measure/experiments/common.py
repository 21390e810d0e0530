"""Settings and helpers shared by every training experiment (one mechanism, parametrised).

Every file of a run folder is written through :mod:`gflownet_measure.run_files` (:func:`~gflownet_measure.run_files.write_file`,
:func:`write_json`): never through a symbolic link, never outside the run folder, and recorded in the folder's
``manifest.json``, which is what ``--overwrite`` deletes."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import multiprocessing
import os
import signal
import threading
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

import torch
from torch import nn

from gflownet_measure.checks import probe_contracts, saturation_warnings
from gflownet_measure.contract_error import ContractError
from gflownet_measure.densities import Policy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.heads import SquashedHead
from gflownet_measure.metrics import log_weight_summary, log_weights, log_z_bounds
from gflownet_measure.objectives import GFlowNet, Objective
from gflownet_measure.options import check_options, option, settings_of
from gflownet_measure.rollout import log_densities, sample_forward
from gflownet_measure.run_files import confined, is_confined, make_folder, record_file, write_text
from gflownet_measure.training import Trainer, TrainingDiverged, WeightAverage, has_checkpoint, make_optimizer, seed_everything, use_device
from gflownet_measure.trajectories import Trajectories

from .cluster import require_ray
from .registry import RunContext
from .run_folder import load_run_config, locked
from .settings import ConfigError, build, flatten
from .training_config import TrainingConfig, tensorboard_writer

__all__ = [
    "EXECUTION_SETTINGS",
    "ExecutionConfig",
    "SubRun",
    "WallClock",
    "TensorBoardRows",
    "run_id",
    "write_json",
    "write_text",
    "run_many",
    "make_scheduler",
    "train_gflownet",
    "watch_saturation",
    "configure",
    "learned_log_Z",
    "final_samples",
]

CONTRACT_STATES = 4
"""Random points per piece of nu and of the terminal measure at which a run probes the shape contracts of its space,
policies and state flow (:mod:`gflownet_measure.contracts`) once, before the first update: a log-reward ``[B, 1]``
would otherwise train silently to a wrong log Z."""


# How a multi-run experiment spreads its runs: processes on this machine, or tasks on a Ray cluster. Table-level
# settings: they are not passed to the runs, whose folders, seeds and results are the same either way.
@dataclass(frozen=True)
class ExecutionConfig:
    """Where and how many of a table's runs train at once: every table's settings, never passed to its runs."""

    jobs: int = option(
        1,
        "runs trained at once, each in its own process with --threads torch threads (e.g. 2 on two cores with --threads 1); with executor=ray, the runs in flight on the cluster",
        low=1,
    )
    executor: str = option(
        "local", "where the runs train: local (a process pool here) or ray (tasks on a Ray cluster; pip install -e '.[cluster]')", choices=("local", "ray")
    )
    address: str = option("", "Ray cluster to join with executor=ray (auto, ray://HOST:10001; empty: start a Ray instance on this machine)")

    def __post_init__(self):
        check_options(self)
        if self.executor == "ray":  # before the run folder is touched: one line naming the extra where Ray is absent
            require_ray()


EXECUTION_SETTINGS = settings_of(ExecutionConfig)


REPORTING_SETTINGS = ("logger",)
"""Settings that change where a run reports, never what it trains: left out of its identity (:func:`run_id`)."""


def run_id(cfg: dict, seed: int) -> dict:
    """What identifies a run, as its checkpoints record it (:class:`~gflownet_measure.training.Trainer`): the ``seed``
    (``--seed``, or a table's seed of the run), the resolved flat settings ``cfg``, and the SHA-256 of every file a setting names
    (``data=``: a resume refuses a checkpoint trained on other data, even under the same path). The command line and
    :func:`run_many` compute it where the flat settings are, into :attr:`~gflownet_measure.experiments.registry.RunContext.identity`.

    The settings but :data:`REPORTING_SETTINGS`: they say where the run reports, not what it trains, so a checkpoint
    written before one of them existed still resumes."""
    files = {k: _sha256(v) for k, v in cfg.items() if isinstance(v, str) and v and os.path.isabs(v) and os.path.isfile(v)}
    settings = {k: v for k, v in cfg.items() if k not in REPORTING_SETTINGS}
    return {"seed": seed, "settings": settings, "data": files or None}


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def write_json(path: Path, obj) -> None:
    """``obj`` as indented JSON at ``path``, written atomically (:func:`~gflownet_measure.run_files.write_text`)."""
    write_text(path, json.dumps(obj, indent=2) + "\n")


class SubRun(NamedTuple):
    """One run of a multi-run experiment: its folder, seed, flat settings (as ``config.json`` records them and a resume
    compares them), the typed settings class its run function takes (built from ``cfg`` when the run starts), and
    extra keyword arguments of the run function."""

    out: Path
    seed: int
    cfg: dict
    settings_type: type
    kwargs: dict = {}


def _one(run_fn: Callable, job: SubRun, resume: bool, diverged_ok: bool, worker: tuple[int, torch.device] | None = None) -> dict:
    """Train one :class:`SubRun` in its folder (kept if finished and ``resume``; continued from its checkpoint) and return its metrics.

    On resume a folder's ``config.json`` must hold the job's seed and settings (a run trained by ``gflownet-measure run``
    with the same seed and settings qualifies): anything else raises :class:`~gflownet_measure.experiments.settings.ConfigError`.

    The run holds an exclusive lock on its folder while it trains (:func:`~gflownet_measure.experiments.run_folder.locked`,
    as a run folder's), in whichever process trains it: a folder that another process holds is a ``ConfigError``.

    With ``diverged_ok`` a run that stops on a non-finite loss or gradient (:class:`~gflownet_measure.training.TrainingDiverged`)
    is finished with the metrics ``{"diverged": message}`` instead of raising.
    """
    if worker is not None:  # a fresh process: the parent's torch thread count and default device
        torch.set_num_threads(worker[0])
        use_device(worker[1])
    if not is_confined():  # a worker process (the parent made job.out inside its run folder): its writes stay in job.out
        with confined(job.out):
            return _one(run_fn, job, resume, diverged_ok)
    make_folder(job.out)
    busy = f"{job.out} is in use by another process of gflownet-measure (a run started in it on its own?); wait for it to end, then continue this table with --resume"
    with locked(job.out, busy):
        return _train_one(run_fn, job, resume, diverged_ok)


def _train_one(run_fn: Callable, job: SubRun, resume: bool, diverged_ok: bool) -> dict:
    """:func:`_one`'s work, in the locked folder ``job.out``."""
    done = job.out / "metrics.json"
    saved = job.out / "config.json"
    if resume and saved.exists():
        try:
            record = load_run_config(saved)
        except ValueError as e:
            raise ConfigError(f"--resume: {e}; move {job.out} away to train it afresh") from None
        if record.get("seed") != job.seed or record.get("settings") != json.loads(json.dumps(job.cfg)):
            raise ConfigError(f"--resume: {job.out} holds a run with another seed or other settings than this experiment's; move it away to train it afresh")
    if not (resume and done.exists()):
        seed_everything(job.seed)
        write_json(job.out / "config.json", {"seed": job.seed, "settings": job.cfg})
        try:
            context = RunContext(job.out, resume and has_checkpoint(job.out), job.seed, run_id(job.cfg, job.seed))
            metrics = run_fn(build(job.settings_type, job.cfg), context, **job.kwargs)
        except TrainingDiverged as e:
            if not diverged_ok:
                raise
            metrics = {"diverged": str(e)}
        write_json(done, metrics)
    return json.loads(done.read_text())


def run_many(
    run_fn: Callable, jobs: list[SubRun], resume: bool, workers: int = 1, diverged_ok: bool = False, executor: str = "local", address: str = ""
) -> list[dict]:
    """The metrics of every job, in order; ``workers`` at a time in fresh processes (``1``: here, one after the other),
    or, with ``executor="ray"``, as tasks of the Ray cluster at ``address`` (:func:`gflownet_measure.experiments.cluster.run_on_ray`).

    ``run_fn(cfg, out, resume, **kwargs) -> metrics`` must be a module-level function (it is pickled by name).
    Each worker runs with this process's torch thread count and default device; an error in any job is raised here
    once the jobs already handed to the workers have finished (the rest are dropped), except, with ``diverged_ok``, a diverged
    training, whose metrics are then ``{"diverged": message}`` (a table reports such a row as the paper reports an
    unstable one). Workers end with this process (:func:`_exit_with_parent`).
    """
    for job in jobs:  # made here, in the run folder's process: each new folder is recorded in its parent's manifest once
        make_folder(job.out)
    if executor == "ray":
        from .cluster import run_on_ray

        return run_on_ray(_one, run_fn, jobs, resume, diverged_ok, workers, address)
    if workers <= 1 or len(jobs) <= 1:
        return [_one(run_fn, job, resume, diverged_ok) for job in jobs]
    context = multiprocessing.get_context("spawn")
    lifeline, keep = context.Pipe(duplex=False)  # workers hold the read end; this process the write end, closed on exit or Ctrl-C
    pool = ProcessPoolExecutor(min(workers, len(jobs)), mp_context=context, initializer=_exit_with_parent, initargs=(lifeline,))
    worker = (torch.get_num_threads(), torch.get_default_device())
    futures = [pool.submit(_one, run_fn, job, resume, diverged_ok, worker) for job in jobs]
    try:
        return [f.result() for f in futures]
    except KeyboardInterrupt:  # Ctrl-C: the workers stop now; each run keeps its last checkpoint for --resume
        keep.close()
        raise
    finally:  # after an error: jobs already in the workers' queue still run (their folders stay resumable), the rest never start
        pool.shutdown(wait=True, cancel_futures=True)
        keep.close()


def _exit_with_parent(lifeline) -> None:
    """Worker initialiser: end this process as soon as the parent closes its end of ``lifeline`` (on Ctrl-C), or dies.

    A parent killed by a signal (``kill``, a scheduler's time limit) runs no clean-up, and a pool worker only reads its
    queue between jobs: without this it would train its current run to the end as an orphan. The kernel closes a dead
    process's descriptors, so the worker sees the end of the pipe either way. Killed mid-run, the run's folder keeps its
    last checkpoint (saved atomically), so ``--resume`` continues it. Ctrl-C reaches every process of the terminal's
    group: workers ignore it and leave the message to the parent, so one line is printed, not a traceback per worker.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def watch() -> None:
        try:
            lifeline.recv()  # nothing is ever sent: this returns, or raises EOFError, when the write end is closed
        except (EOFError, OSError):
            pass
        os._exit(1)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


class WallClock:
    """The wall-clock seconds a run folder has taken, summed over the invocations that a ``--resume`` joins.

    Kept in ``out/wall_clock.json``, rewritten atomically every ``every`` seconds by a daemon thread and on exit, so
    an invocation killed by a signal loses at most ``every`` seconds of its count. Use it as a context manager.
    """

    FILE = "wall_clock.json"

    def __init__(self, out: Path, resume: bool, every: float = 30.0):
        self._path, self._every = out / self.FILE, every
        self._before = self._read() if resume and self._path.exists() else 0.0
        self._stop = threading.Event()

    def _read(self) -> float:
        """The seconds saved by earlier invocations; an unreadable file (a disk that filled up) counts as 0, with a warning."""
        try:
            seconds = float(json.loads(self._path.read_text())["seconds"])
        except (ValueError, KeyError, TypeError, OSError) as e:
            warnings.warn(f"{self._path} cannot be read ({type(e).__name__}); the wall clock restarts from 0 for this folder", stacklevel=3)
            return 0.0
        return seconds

    def seconds(self) -> float:
        return self._before + time.perf_counter() - self._t0

    def _write(self) -> None:
        write_json(self._path, {"seconds": self.seconds()})

    def _tick(self) -> None:
        while not self._stop.wait(self._every):
            with contextlib.suppress(OSError):  # a full disk: tried again at the next tick, and on exit, where it is raised (naming the file)
                self._write()

    def __enter__(self) -> "WallClock":
        self._t0 = time.perf_counter()
        self._thread = threading.Thread(target=self._tick, name="wall-clock", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind, *exc) -> None:
        self._stop.set()
        self._thread.join()
        if kind is None:
            self._write()
        else:  # the run's own error is the one to report (a full disk: the file the run was writing)
            with contextlib.suppress(OSError):
                self._write()


class TensorBoardRows:
    """``logger=tensorboard``: each history row's finite numbers (every key but ``step``, under its own name: ``loss``,
    ``trajectories``, ``seconds``, the evaluation's metrics) as TensorBoard scalars at the row's ``step``, written by
    torch's ``SummaryWriter`` into ``out/tensorboard/`` and flushed at each row (each evaluation). Give it to
    :class:`~gflownet_measure.training.Trainer` as ``on_row``; :meth:`close` at the end.

    The writer is opened at the first row of each invocation (only the process that logs rows opens one: rank 0 of a
    data-parallel run), so a ``--resume`` adds an event file of its own. It is opened with ``purge_step`` that first
    row's step: TensorBoard then hides every event of the earlier files at that step or later, i.e. the rows that the
    resume dropped from ``history.jsonl`` (evaluated after the checkpoint it continues from), and shows the curves that
    the history holds. ``tensorboard/`` is made through :func:`~gflownet_measure.run_files.make_folder` (recorded in the
    run's manifest, refused where it is a link) and each event file is recorded in its manifest as soon as the writer has
    created it (:func:`~gflownet_measure.run_files.record_file`), so that ``--overwrite`` deletes them with the run.
    """

    FOLDER = "tensorboard"

    def __init__(self, out: Path):
        self.folder = Path(out) / self.FOLDER
        self.writer: Any = None  # a SummaryWriter once the first row comes

    def __call__(self, row: dict) -> None:
        step = row["step"]
        if self.writer is None:
            self.writer = self._open(step)
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def _open(self, step: int):
        SummaryWriter = tensorboard_writer()
        make_folder(self.folder)
        before = set(os.listdir(self.folder))
        writer = SummaryWriter(str(self.folder), purge_step=step)  # creates its event file, events.out.tfevents.<time>.<host>.<pid>.<n>
        try:
            for name in sorted(set(os.listdir(self.folder)) - before):
                record_file(self.folder / name)
        except BaseException:
            writer.close()
            raise
        return writer

    def close(self) -> None:
        """Flush and close the event file (nothing where no row was logged)."""
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def make_scheduler(optimizer: torch.optim.Optimizer, training: TrainingConfig):
    """Every learning rate (all groups, log Z included) times ``lr_gamma`` at each multiple of ``lr_milestone``, or ``None``.

    ``StepLR`` rather than a list of milestones: the same rates, without a list as long as ``steps / lr_milestone``
    (``steps=1e12 lr_milestone=1`` would not fit in memory).
    """
    if training.lr_milestone == 0:
        return None
    return torch.optim.lr_scheduler.StepLR(optimizer, training.lr_milestone, gamma=training.lr_gamma)


def zero_reward(batch: object, step: int) -> None:
    """A one-line :class:`~gflownet_measure.training.TrainingDiverged` naming the first terminal state of ``batch``
    (where it holds trajectories) whose :math:`\\log R` is :math:`-\\infty`: a reward of 0 there, which the theory
    allows, but where every trajectory objective's residual is infinite; nothing where no such state is in the batch
    (the trainer then reports the non-finite loss itself)."""
    traj = getattr(batch, "traj", None)
    if not isinstance(traj, Trajectories):
        return
    zero = traj.log_R == -math.inf
    if zero.any():
        i = int(zero.nonzero()[0])
        raise TrainingDiverged(
            f"log R is -inf (R = 0) at the terminal state x={traj.terminal[i].tolist()} ({int(zero.sum())} of {len(zero)} trajectories of step {step}): "
            "a trajectory objective's residual is infinite there; train on max(R, floor) (run MODULE:FACTORY --set reward_floor=1e-6, docs/tutorial.md) or keep such states out of the kernels' support"
        )


def train_gflownet(
    gfn: GFlowNet,
    graph: PointedGraph,
    objective: Objective,
    training: TrainingConfig,
    context: RunContext,
    evaluate: Callable[[], dict],
    batches: Callable[[int], object] | None = None,
    average: WeightAverage | None = None,
    lr_modules: Sequence[tuple[nn.Module | nn.Parameter, float]] = (),
) -> list[dict]:
    """Train ``gfn`` with ``objective`` (its hyper-parameters set: :func:`configure`) as ``training`` says, with the shared
    optimiser, schedule, clipping and checkpoints, in the folder ``context.out`` (continuing its checkpoint where
    ``context.resume``); ``context.identity`` is what the checkpoints record of the run (:func:`run_id`), ``context.revised``
    the evaluation settings a resume changed (:class:`~gflownet_measure.training.Trainer`'s ``revised``).

    ``batches(step)`` gives the batch of update ``step``, of the kind the objective declares (``objective.batch``). For
    ``"trajectories"`` the default is ``objective.sample``: ``training.batch_size`` fresh trajectories with
    ``training.epsilon``-uniform exploration (:meth:`~gflownet_measure.objectives.Objective.sample`); any other kind
    (``"data"``, ``"transitions"``) needs its source, e.g. :class:`gflownet_measure.jsp_gfn.dag_params.replay.EdgeReplay`. A source
    that is an ``nn.Module`` (a replay buffer, walkers) is checkpointed with the run, and restored on resume.

    ``average``: a :class:`~gflownet_measure.training.WeightAverage` of (part of) ``gfn``, updated after every step and
    checkpointed (:class:`~gflownet_measure.training.Trainer`). log Z trains at ``training.lr_logZ``, a state flow at
    ``training.lr_flow``, a learned P_B at ``training.lr_backward`` where it is not 0 (else at ``lr``); ``lr_modules``:
    (part of ``gfn``, rate) pairs, parts at their own rates (:func:`~gflownet_measure.training.make_optimizer`).

    Before anything else, the shape contracts of ``graph``, ``gfn.pf``, ``gfn.pb`` and ``gfn.log_F`` are probed at a few
    states (:data:`CONTRACT_STATES`; :class:`~gflownet_measure.contract_error.ContractError`, one line, where one fails).
    In training, a :class:`~gflownet_measure.contract_error.ContractError` (a NaN log-reward, at a state the policy made
    non-finite or not) and a non-finite loss from a reward of 0 (:func:`zero_reward`) stop with a one-line
    :class:`~gflownet_measure.training.TrainingDiverged`, the last good checkpoint kept.

    ``training.logger == "tensorboard"``: the history's rows also go to TensorBoard event files in ``out/tensorboard/``
    (:class:`TensorBoardRows`), closed when training ends, however it ends.

    Each evaluation also looks for heads whose squashed parameters sit at their cap (:func:`watch_saturation`): a
    ``warnings.warn`` per such head, once a run.
    """
    out = context.out
    with torch.random.fork_rng():  # the probe's draws leave the run's random stream as it was
        probe_contracts(graph, {"P_F": gfn.pf, "P_B": gfn.pb, "log_F": gfn.log_F}, CONTRACT_STATES)
    if batches is None:
        if objective.batch != "trajectories":
            raise ValueError(f"objective {objective.name!r} trains on {objective.batch}: train_gflownet needs their source as batches=")

        def batches(step: int):
            return objective.sample(graph, gfn, training.batch_size, training.epsilon)

    optimizer = make_optimizer(gfn, training.lr, training.lr_logZ, training.lr_flow, training.lr_backward or None, lr_modules)

    def diverged(e: ContractError, where: str) -> TrainingDiverged:
        return TrainingDiverged(f"{e} (met {where}); stopped, last good checkpoint kept in {out}")

    def step_fn(step: int):
        try:
            batch = batches(step)
            loss = objective(gfn, batch)
        except ContractError as e:  # a NaN reward met in training, or a state the policy made non-finite
            raise diverged(e, f"at step {step}") from None
        if not torch.isfinite(loss):
            zero_reward(batch, step)
        return loss

    def evaluate_or_stop() -> dict:
        try:
            return evaluate()
        except ContractError as e:  # a policy whose outputs diverged while its weights stayed finite (lr=1e30)
            raise diverged(e, "in an evaluation") from None

    held = {"gfn": gfn} | ({"batches": batches} if isinstance(batches, nn.Module) else {}) | ({"average": average} if average is not None else {})
    state = gfn if len(held) == 1 else nn.ModuleDict(held)  # what the checkpoint holds: the GFlowNet, and the source and average when there are
    rows = TensorBoardRows(out) if training.logger == "tensorboard" else None
    trainer = Trainer(
        state,
        optimizer,
        make_scheduler(optimizer, training),
        step_fn,
        watch_saturation(evaluate_or_stop, graph, gfn),
        out,
        training.steps,
        training.eval_every,
        training.batch_size,
        training.grad_clip,
        context.identity,
        average,
        on_row=rows,
        revised=context.revised,
    )
    try:
        return trainer.run(context.resume)
    finally:
        if rows is not None:
            rows.close()


SATURATION_TRAJECTORIES = 64
"""On-policy trajectories whose states :func:`watch_saturation` evaluates the heads at, after each evaluation."""


def watch_saturation(evaluate: Callable[[], dict], graph: PointedGraph, gfn: GFlowNet) -> Callable[[], dict]:
    """``evaluate``, followed at each evaluation by a look at the squashed heads of ``gfn.pf`` and ``gfn.pb``
    (:func:`~gflownet_measure.checks.saturation.saturation_warnings`) at the states of :data:`SATURATION_TRAJECTORIES`
    fresh trajectories of P_F: a head whose parameter sits at its cap at most of the states it is used at trains to the
    nearest law it has and a wrong log Z, without an error, so ``warnings.warn`` says which head, which parameter, how
    often and the remedy (raise ``c_span``): the line ``gflownet-measure check`` prints, once a run per head and bound.

    A head starts far from its bounds (network outputs near 0), so the look is repeated at every evaluation until each
    head has warned, not only at the first. Its draws come from a forked random stream (the run's stream, and so its
    updates, are those of a run without it), and it never stops a run: a rollout that raises here is skipped (the
    evaluation itself has just rolled out). ``evaluate`` itself where neither policy has a squashed head."""
    policies = {"P_F": gfn.pf, "P_B": gfn.pb}
    if not any(isinstance(m, SquashedHead) for p in policies.values() for m in p.modules()):
        return evaluate
    warned: set[tuple[str, str]] = set()

    def evaluate_and_watch() -> dict:
        row = evaluate()
        try:
            with torch.random.fork_rng(), torch.no_grad():
                traj = sample_forward(graph, gfn.pf, SATURATION_TRAJECTORIES)
                states = traj.states[:-1][traj.mask]
        except Exception:  # a diagnostic: the run's own evaluation and updates report real errors
            return row
        for found in saturation_warnings(policies, states, f"visited by {SATURATION_TRAJECTORIES} trajectories of P_F"):
            if (found.head, found.bound) not in warned:
                warned.add((found.head, found.bound))
                warnings.warn(found.message, stacklevel=2)
        return row

    return evaluate_and_watch


def configure(objective: Objective, settings: Any) -> Objective:
    """``objective`` with the hyper-parameters that the run's typed settings set, by name
    (:meth:`~gflownet_measure.objectives.Objective.options` of their :func:`~gflownet_measure.experiments.settings.flatten`);
    the others keep their defaults."""
    return dataclasses.replace(objective, hyper={**objective.hyper, **objective.options(flatten(settings))})


def learned_log_Z(objective: Objective, gfn: GFlowNet, graph: PointedGraph) -> dict:
    """``{"log_Z": value}`` read from ``gfn`` as ``objective`` defines it (:attr:`~gflownet_measure.objectives.Objective.log_Z`),
    or ``{}`` for an objective that learns no log Z (the divergences, VarGrad)."""
    return {} if objective.log_Z is None else {"log_Z": objective.log_Z(gfn, graph)}


def final_samples(graph: PointedGraph, gfn: GFlowNet, n: int, pf: Policy | None = None) -> tuple[Trajectories, float, float]:
    """``n`` on-policy trajectories of ``pf`` (default ``gfn.pf``; e.g. a weight average of it) and the two log Z estimates
    from them against ``gfn.pb``: (mean w, log-mean-exp w)."""
    pf = gfn.pf if pf is None else pf
    with torch.no_grad():
        traj = sample_forward(graph, pf, n)
        w = log_weights(traj.log_R, *log_densities(traj, pf, gfn.pb), traj.mask)
    return (traj, *log_z_bounds(w))


def start_metrics(out: Path, resume: bool, measure: Callable[[], dict]) -> dict:
    """The untrained policy's metrics (steps = 0), ``measure()``, taken once before training on a forked random stream (so
    the run's own draws are those it would make without them) and kept in ``start.json``; a resumed run reads them back."""
    path = out / "start.json"
    if resume and path.exists():
        return json.loads(path.read_text())
    with torch.random.fork_rng():
        start = measure()
    write_text(path, json.dumps(start) + "\n")
    return start


def balance_metrics(graph: PointedGraph, pf: Policy, pb: Policy, n: int, chunk: int = 100) -> dict[str, float]:
    """:func:`~gflownet_measure.metrics.log_weight_summary` of ``n`` on-policy trajectories of ``pf`` against ``pb``, drawn and
    scored ``chunk`` at a time (ELBO, log-weight sd, ESS, importance-weighted log Z): how close ``pf`` is to balance."""
    ws = []
    with torch.no_grad():
        for k in range(0, n, chunk):
            traj = sample_forward(graph, pf, min(chunk, n - k))
            ws.append(log_weights(traj.log_R, *log_densities(traj, pf, pb), traj.mask))
    return log_weight_summary(torch.cat(ws))
