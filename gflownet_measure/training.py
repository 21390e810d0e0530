"""One training loop for every objective and space: optimiser groups, schedule, clipping, evaluation,
checkpoint and resume, and a guard that stops on a non-finite loss, gradient or weight.

Checkpoints and ``history.jsonl`` are written through :mod:`gflownet_measure.run_files` (never through a symbolic
link, never outside the run folder); a checkpoint is written only from finite weights, with a SHA-256 digest of its
content. A resume uses a checkpoint only when it is intact and fits the run: readable, its digest matching (one of an
earlier version has none: a warning), its run id this run's, its step, time, states and random states well-formed, its
weights finite; it skips one that is not, falling back to the one before it, so a damaged or crafted file ends in one
line (a warning, or a :class:`CheckpointError`), never in a traceback or in a run resumed from wrong weights."""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import random
import time
import warnings
import zipfile
from pathlib import Path
from typing import Callable, Mapping, Sequence, cast

import numpy as np
import torch
from torch import Tensor, nn
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn
from tqdm import tqdm

from .distributed import ReplicaFinished, average_gradients, broadcast_parameters, gather_objects, is_main, replica_seed, world
from .run_files import append_text, write_file, write_text

__all__ = [
    "TrainingDiverged",
    "CheckpointError",
    "HistoryError",
    "read_history",
    "evaluation_before_end",
    "CHECKPOINTS",
    "TRUST_CHECKPOINTS",
    "has_checkpoint",
    "seed_everything",
    "use_device",
    "seeded_generator",
    "make_optimizer",
    "WeightAverage",
    "Trainer",
]

CHECKPOINTS = ("checkpoint.pt", "checkpoint.prev.pt")  # a run folder's last checkpoint and the one before it, newest first
TRUST_CHECKPOINTS = "GFLOWNET_MEASURE_TRUST_CHECKPOINTS"
"""Environment variable: set to 1 to resume from a checkpoint that holds pickled objects (one written before checkpoints
became tensors and plain values). Unpickling such a file can run any code it carries: only for files you made."""
_DIGEST = "sha256"  # the key of a checkpoint's digest of the rest of its content (:func:`_digest`)
_MT_KEY = 624  # the Mersenne Twister's key: numpy's state holds that many numbers and a position from 0 to 624


class TrainingDiverged(RuntimeError):
    """The loss, a gradient or a weight became NaN or infinite; the last good checkpoint is kept."""


class CheckpointError(ValueError):
    """No checkpoint can be resumed: none is readable, or the one there belongs to another run (one line, naming the file)."""


class HistoryError(CheckpointError):
    """``history.jsonl`` cannot be continued: not UTF-8 text, or a row whose ``step`` is not a step (one line, naming the file, line and key)."""


def has_checkpoint(out_dir: Path) -> bool:
    """Whether ``out_dir`` holds a checkpoint to resume (:data:`CHECKPOINTS`): a run killed before its first starts afresh."""
    return any((Path(out_dir) / name).exists() for name in CHECKPOINTS)


def _random_states() -> dict:
    """This process's random states as tensors and plain values, so that a checkpoint loads with ``weights_only=True``."""
    name, keys, pos, has_gauss, cached = cast("tuple[str, np.ndarray, int, int, float]", np.random.get_state())  # legacy=True: the tuple
    return {"torch": torch.get_rng_state(), "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached], "python": random.getstate()}


def _numpy_state(saved: list) -> tuple:
    """numpy's legacy state tuple from what :func:`_random_states` saved of it."""
    name, keys, pos, has_gauss, cached = saved
    return name, keys.numpy().astype(np.uint32), pos, has_gauss, cached


def _set_random_states(states: dict) -> None:
    """Restore what :func:`_random_states` saved (checked by :func:`_random_states_problem`)."""
    torch.set_rng_state(states["torch"])
    np.random.set_state(_numpy_state(states["numpy"]))
    random.setstate(states["python"])


def _random_states_problem(states: object) -> str | None:
    """Why ``states`` (what :func:`_random_states` saved) cannot be restored, or ``None``. Each state is restored into a
    fresh generator of its own, which checks it as restoring this process's would, without touching this process's;
    numpy's position in its key is checked first: numpy takes any, and one outside the key reads memory outside it (a
    crash, found by a probe)."""
    if not isinstance(states, Mapping):
        return f"a {type(states).__name__}, not the states of torch, numpy and python"
    try:
        _, keys, pos, _, _ = states["numpy"]
        if not (isinstance(keys, Tensor) and tuple(keys.shape) == (_MT_KEY,) and isinstance(pos, int) and 0 <= pos <= _MT_KEY):
            return f"numpy's is not a key of {_MT_KEY} numbers and a position from 0 to {_MT_KEY}"
        torch.Generator().set_state(states["torch"])
        np.random.RandomState().set_state(_numpy_state(states["numpy"]))
        random.Random().setstate(states["python"])
    except Exception as e:  # whatever the generators raise on a malformed state (KeyError, TypeError, ValueError, RuntimeError)
        return f"{type(e).__name__}: {_one_line(e)}"
    return None


def _feed(h: hashlib._Hash, value: object) -> None:
    """Feed ``value`` (tensors and plain values, nested in mappings, lists and tuples: what a checkpoint holds) to the
    hash ``h``, each value as its type, then its length or shape, then its content, so that different values never feed
    the same bytes; a tensor as its dtype, shape and raw bytes (read on the CPU). ``TypeError`` for anything else (a
    checkpoint never holds it)."""
    if isinstance(value, Tensor):
        flat = value.detach().cpu().contiguous().reshape(-1)
        h.update(f"T{value.dtype}{tuple(value.shape)}:".encode())
        h.update(flat.view(torch.uint8).numpy().data)
    elif isinstance(value, Mapping):
        h.update(f"D{len(value)}:".encode())
        for k, v in value.items():
            _feed(h, k)
            _feed(h, v)
    elif isinstance(value, (list, tuple)):
        h.update(f"{'L' if isinstance(value, list) else 'U'}{len(value)}:".encode())
        for v in value:
            _feed(h, v)
    elif isinstance(value, (str, bytes)):
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        h.update(f"{type(value).__name__}{len(data)}:".encode() + data)
    elif value is None or isinstance(value, (bool, int, float, complex, torch.dtype, torch.device)):
        h.update(f"{type(value).__name__}:{value!r};".encode())  # repr: exact for a float (it reads back the same)
    else:
        raise TypeError(f"a checkpoint holds tensors and plain values, not {type(value).__name__}")


def _digest(state: Mapping) -> str:
    """The SHA-256 digest (hex) of ``state``'s content, its digest aside (:func:`_feed`): saved in each checkpoint and
    checked on resume, so a damaged file (a flipped bit on a disk, a copy cut short) is found before any of it is used.
    Over the content rather than the file's bytes, so the digest travels inside the file (through the rename to
    ``checkpoint.prev.pt``) and the file stays what ``torch.load`` reads."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in state.items() if k != _DIGEST})
    return h.hexdigest()


def _digest_matches(state: Mapping) -> bool:
    """Whether ``state``'s saved digest is the digest of its content; not where its content holds something a
    checkpoint never holds (it cannot be the content that was digested)."""
    try:
        return state[_DIGEST] == _digest(state)
    except Exception:  # a type, layout or device that _feed cannot read: nothing a checkpoint holds
        return False


def _state_problem(state: Mapping, steps: int) -> str | None:
    """What makes ``state`` unfit to resume a run of ``steps`` updates, phrased after the file's name, or ``None``: a
    step that is not a whole number from 0 to ``steps`` (1e9 would report a run finished, -50 would run 50 updates too
    many), a time that is not a finite number >= 0, states that are not mappings, random states that cannot be
    restored. Checked before anything is restored, so a crafted or damaged file is skipped, not a traceback."""
    step, seconds = state.get("step"), state.get("seconds")
    if not (isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= steps):
        return f"holds step {step!r}, not a whole number from 0 to {steps} (the run's steps)"
    if not (isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and math.isfinite(seconds) and seconds >= 0):
        return f"holds seconds {seconds!r}, not a finite number >= 0"
    for key in ("model", "optimizer", "scheduler"):
        if not (isinstance(state.get(key), Mapping) or (key == "scheduler" and state.get(key) is None)):
            return f"holds a {type(state.get(key)).__name__} as its {key} state, not a mapping"
    replicas = state.get("replica_rng", [])
    if not isinstance(replicas, list):
        return f"holds replica_rng of type {type(replicas).__name__}, not a list"
    for rank, states in enumerate([state.get("rng"), *replicas]):
        problem = _random_states_problem(states)
        if problem:
            return f"holds a random state (rank {rank}) that cannot be restored ({problem})"
    return None


def _run_id_problem(saved: object, current: dict) -> str | None:
    """Why a checkpoint that saved the run id ``saved`` is not the run ``current``'s, or ``None``: ``saved`` must be
    ``current`` (a checkpoint without one cannot be shown to be this run's)."""
    if saved is None:
        return "holds no run id (a checkpoint of an earlier version, or one made elsewhere), so it cannot be shown to be this run's"
    if saved != current:
        return f"belongs to another run (it differs in {', '.join(_differences(saved, current)) or 'its identity'})"
    return None


def _intact_archive(path: Path) -> bool:
    """Whether ``path`` is a zip archive (what ``torch.save`` writes) whose every member matches its CRC-32: it tells a
    file that really needs unpickling of other objects from one that is damaged (random bytes, a cut, a flipped bit)."""
    try:
        with zipfile.ZipFile(path) as archive:
            return archive.testzip() is None
    except Exception:  # not a zip archive, or a damaged one: whatever zipfile raises on it
        return False


def _read_checkpoint(path: Path) -> dict:
    """``torch.load`` of ``path`` with ``weights_only=True``: tensors and plain values only, so reading a run folder from
    elsewhere cannot run code. An intact archive that needs more is a :class:`CheckpointError`, unless
    :data:`TRUST_CHECKPOINTS` is set; any other failure is raised as it is (a damaged file)."""
    try:
        with warnings.catch_warnings():  # torch's own, on a damaged file (e.g. "pickle protocol 103"): the user gets one line of ours
            warnings.simplefilter("ignore")
            return torch.load(path, weights_only=True)
    except pickle.UnpicklingError as e:
        if "Weights only load failed" not in str(e) or not _intact_archive(path):
            raise  # a corrupt file: the weights-only unpickler also refuses random bytes and a damaged archive
        if os.environ.get(TRUST_CHECKPOINTS) == "1":
            return torch.load(path, weights_only=False)
        raise CheckpointError(
            f"--resume: {path} holds pickled objects (a checkpoint of an earlier version, or a file from elsewhere), and unpickling them can run code: refused; if you wrote it, resume with {TRUST_CHECKPOINTS}=1"
        ) from None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def use_device(device: str | torch.device) -> None:
    """Make ``device`` the default for new tensors; for CPU, torch's own default, no default-device mode is left installed.

    A default device is a ``TorchFunctionMode`` that intercepts every torch call: on CPU it made a JSP-GFN update
    13% slower (measured at the paper preset, one thread) for no effect.
    """
    if torch.device(device).type != "cpu":
        torch.set_default_device(device)
    elif torch.get_default_device().type != "cpu":
        torch.set_default_device(None)  # an earlier call in this process set another device: drop its mode


def seeded_generator(seed: int) -> torch.Generator:
    """A generator seeded with ``seed`` on torch's default device (:func:`use_device`), so that the tensors it draws live
    where the run computes. On CPU the same stream as ``torch.Generator().manual_seed(seed)``; on a GPU another one (CUDA
    has its own generator), so draws from the same seed differ between devices."""
    return torch.Generator(torch.get_default_device()).manual_seed(seed)


def make_optimizer(
    model: nn.Module,
    lr: float,
    lr_logZ: float,
    lr_flow: float | None = None,
    lr_backward: float | None = None,
    lr_modules: Sequence[tuple[nn.Module | nn.Parameter, float]] = (),
) -> torch.optim.Adam:
    """Adam with separate groups: ``log_Z`` at ``lr_logZ``, a state-flow network ``model.log_F`` at ``lr_flow``
    (default ``lr``), with ``lr_backward`` a learned backward policy ``model.pb`` at that rate (default: in the policy
    group), with ``lr_modules`` other parts of ``model`` (a submodule or a parameter, e.g.
    ``[(gfn.pf.network.theta_head, 1e-3)]``) each at its own rate; the rest at ``lr``. A parameter joins the group of the
    first part its qualified name falls under (a layer shared with another module counts where ``model`` names it),
    and each group is named by its part's qualified name. A part that is not in ``model`` is a ``ValueError``."""
    names = {id(m): name for name, m in model.named_modules()} | {id(p): name for name, p in model.named_parameters()}
    own = [(part, lr if lr_flow is None else lr_flow) for part in [getattr(model, "log_F", None)] if isinstance(part, nn.Module)]
    own += [(part, lr_backward) for part in [getattr(model, "pb", None)] if isinstance(part, nn.Module) and lr_backward is not None]
    groups: dict[str, list] = {"policy": [], "log_Z": []}
    lrs = {"policy": lr, "log_Z": lr_logZ}
    for part, rate in [*own, *lr_modules]:
        if id(part) not in names:
            raise ValueError(f"make_optimizer: a {type(part).__name__} given a rate of its own is not a part of the {type(model).__name__} trained")
        groups.setdefault(names[id(part)], [])
        lrs.setdefault(names[id(part)], rate)
    parts = list(groups)[2:]
    for name, p in model.named_parameters():  # a weight shared by two parts is named once, under the part that owns it
        groups["log_Z" if name == "log_Z" else next((k for k in parts if name == k or name.startswith(k + ".")), "policy")].append(p)
    return torch.optim.Adam(
        [{"params": v, "lr": lrs[k], "name": k} for k, v in groups.items() if v], fused=True
    )  # one kernel for all tensors: 3.6x faster steps on CPU


class WeightAverage(nn.Module):
    """An exponential moving average of a module's weights (Polyak averaging): after each optimiser step,
    :math:`\\bar w \\leftarrow \\beta \\bar w + (1 - \\beta) w` with ``decay`` :math:`\\beta`, starting from the weights after the
    first step (torch's :class:`~torch.optim.swa_utils.AveragedModel`). Steadier than the last iterate of a noisy
    optimiser; its horizon is :math:`1 / (1 - \\beta)` steps.

    :attr:`module` is the averaged copy (sample and score with it); the source module is held, not owned, so a checkpoint
    holding both saves the source once. Give it to :class:`Trainer` as ``average``.
    """

    def __init__(self, module: nn.Module, decay: float):
        super().__init__()
        if not 0.0 < decay < 1.0:
            raise ValueError(f"WeightAverage: decay must be in (0, 1), got {decay!r}")
        self.averaged = AveragedModel(module, multi_avg_fn=get_ema_multi_avg_fn(decay), use_buffers=False)
        self._source = (module,)  # a tuple keeps the source out of this module's state

    @property
    def module(self) -> nn.Module:
        return self.averaged.module

    def update(self) -> None:
        """Fold the source's current weights into the average."""
        self.averaged.update_parameters(self._source[0])


class Trainer:
    """Runs ``step_fn`` for ``steps`` updates, evaluating and checkpointing every ``eval_every``.

    Args:
        model: every trained parameter (saved in ``checkpoint.pt``).
        optimizer, scheduler: stepped once per update (the scheduler may be ``None``).
        step_fn: ``step -> loss`` (samples its own batch).
        evaluate: ``() -> {metric: float}``, called at each evaluation.
        out_dir: holds ``checkpoint.pt`` and ``history.jsonl``.
        items_per_step: trajectories (or transitions) per update, for the ``trajectories`` column.
        grad_clip: max global gradient norm (``0``: off).
        run_id: what identifies the run (its seed, settings, a digest of its data): saved in every checkpoint, and a
            resume refuses a checkpoint saved with another one (:class:`CheckpointError`), so a folder cannot hand one
            run's weights to another; its ``seed`` (0 where it has none) is the seed the replicas' random streams
            derive from in a process group. ``None``: not recorded or checked.
        average: a :class:`WeightAverage` updated after every optimiser step (it must be part of ``model`` to be
            checkpointed), or ``None``.
        on_row: called with each history row once it is appended to ``history.jsonl`` (rank 0 alone), e.g. to send it
            to TensorBoard, or ``None``.
        revised: the names of evaluation settings that differ from those the checkpoints were trained with (a run
            finished with other evaluation settings, ``--resume --set``). An evaluation draws from the run's random
            stream, so the updates after it depend on its settings: a resume with ``revised`` is refused
            (:class:`CheckpointError`) unless no evaluation lies between its checkpoint and the last step
            (:func:`evaluation_before_end`); then every update replays as trained, and only the last evaluation and
            the metrics after it see the new values.

    Each checkpoint is written to a temporary file and renamed into place; the one before it is kept as
    ``checkpoint.prev.pt``, so a resume falls back to it when the last one cannot be used (a truncated or damaged file,
    a disk that filled up, a crafted one: see the module's docstring).

    In a process group of ``W`` replicas (:mod:`~gflownet_measure.distributed`), each update averages the replicas'
    gradients (an update of ``W * items_per_step`` items), every replica draws from its own random stream, and rank 0
    alone evaluates and writes; the checkpoint keeps every replica's random state, so a resume at the same ``W``
    continues each stream exactly, and one at another ``W`` (1 included) continues from rank 0's weights and optimiser
    with fresh streams :func:`~gflownet_measure.distributed.replica_seed` ``(seed, rank, step)``. On ranks other than 0,
    :meth:`run` ends with :class:`~gflownet_measure.distributed.ReplicaFinished`.
    """

    def __init__(
        self,
        model: nn.Module,
        optimizer,
        scheduler,
        step_fn: Callable[[int], Tensor],
        evaluate: Callable[[], dict],
        out_dir: Path,
        steps: int,
        eval_every: int,
        items_per_step: int,
        grad_clip: float = 0.0,
        run_id: dict | None = None,
        average: WeightAverage | None = None,
        on_row: Callable[[dict], None] | None = None,
        revised: tuple[str, ...] = (),
    ):
        self.model, self.optimizer, self.scheduler, self.average = model, optimizer, scheduler, average
        self.step_fn, self.evaluate = step_fn, evaluate
        self.out_dir, self.steps, self.eval_every = Path(out_dir), steps, eval_every
        self.items_per_step, self.grad_clip = items_per_step, grad_clip
        self.run_id = None if run_id is None else json.loads(json.dumps(run_id))  # as it reads back from a checkpoint
        self.checkpoint, self.previous = (self.out_dir / name for name in CHECKPOINTS)
        self.history_path = self.out_dir / "history.jsonl"
        self.seed = self.run_id.get("seed", 0) if isinstance(self.run_id, dict) else 0  # the replicas' streams derive from it
        self.on_row = on_row
        self.revised = revised

    def _non_finite(self, state: Mapping[str, Tensor] | None = None) -> list[str]:
        """The names of the parameters of ``model`` that hold a NaN or an infinity, in the model or in its saved ``state``."""
        named = [
            (name, p if state is None else state[name]) for name, p in self.model.named_parameters() if state is None or isinstance(state.get(name), Tensor)
        ]
        return [name for (name, _), ok in zip(named, _all_finite([p for _, p in named])) if not ok]

    def _diverged(self, names: list[str], step: int) -> TrainingDiverged:
        which = f" ({names[0]}{f' and {len(names) - 1} more' if len(names) > 1 else ''})" if names else ""
        return TrainingDiverged(f"weights are non-finite after the update of step {step}{which}; stopped, last good checkpoint kept at {self.checkpoint}")

    def _save(self, step: int, seconds: float) -> None:
        """Rank 0 writes ``checkpoint.pt`` with every replica's random state (a collective: every replica calls it); from
        finite weights only (:class:`TrainingDiverged` otherwise: every replica holds the same weights and stops)."""
        bad = self._non_finite()
        if bad:
            raise TrainingDiverged(f"weights are non-finite at step {step} ({bad[0]}); not checkpointed, last good checkpoint kept at {self.checkpoint}")
        rngs = gather_objects(_random_states())
        if not is_main():
            return
        state = {
            "step": step,
            "seconds": seconds,
            "run_id": self.run_id,
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict() if self.scheduler else None,
            "rng": rngs[0],
            "replica_rng": rngs[1:],  # ranks 1..W-1 (empty for one process)
        }
        state[_DIGEST] = _digest(state)
        write_file(self.checkpoint, lambda f: torch.save(state, f), previous=self.previous.name)  # the last one becomes the previous

    def _load(self) -> tuple[Path, dict]:
        """The newest usable checkpoint (the last, else the one before it) and its path: readable, its digest matching
        its content (:func:`_digest`; a warning where it has none), its run id ``run_id`` (a refusal otherwise), its
        fields sane (:func:`_state_problem`), its weights finite. A skipped one is a warning naming the file and why."""
        errors = []
        for path in (self.checkpoint, self.previous):
            if not path.exists():
                continue
            try:
                state = _read_checkpoint(path)
            except CheckpointError:
                raise
            except Exception as e:  # a truncated or corrupt file: torch raises RuntimeError, EOFError or an unpickling error
                errors.append(f"{path.name} cannot be read (corrupt: {type(e).__name__})")
                continue
            if not isinstance(state, dict):
                errors.append(f"{path.name} is not a checkpoint (it holds a {type(state).__name__})")
                continue
            if _DIGEST in state and not _digest_matches(state):
                errors.append(f"{path.name} does not match its SHA-256 digest (corrupt)")
                continue
            problem = None if self.run_id is None else _run_id_problem(state.get("run_id"), self.run_id)
            if problem:
                raise CheckpointError(f"--resume: {path} {problem}; start this run afresh in another folder, or with --overwrite")
            problem = _state_problem(state, self.steps)
            if problem:
                errors.append(f"{path.name} {problem}")
                continue
            bad = self._non_finite(state["model"])
            if bad:
                errors.append(f"{path.name} holds non-finite weights ({bad[0]})")
                continue
            if errors:
                warnings.warn(f"{self.out_dir / errors[0]}; resuming from {path.name} (step {state['step']})", stacklevel=3)
            if _DIGEST not in state:
                warnings.warn(f"{path} has no SHA-256 digest (a checkpoint of an earlier version): resumed from it unverified", stacklevel=3)
            return path, state
        if errors:
            raise CheckpointError(f"--resume: no usable checkpoint in {self.out_dir} ({'; '.join(errors)}); start the run afresh with --overwrite")
        raise CheckpointError(f"--resume: no checkpoint in {self.out_dir}; start the run afresh with --overwrite")

    def _restore(self) -> tuple[int, float]:
        path, state = self._load()
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            if self.scheduler and state["scheduler"]:
                self.scheduler.load_state_dict(state["scheduler"])
        except (RuntimeError, ValueError, KeyError, TypeError) as e:  # what load_state_dict raises on states of another shape
            raise CheckpointError(
                f"--resume: {path} does not fit this run's model or optimizer ({type(e).__name__}: {_one_line(e)}); start the run afresh with --overwrite"
            ) from None
        rank, size = world()
        rngs = [state["rng"], *state.get("replica_rng", [])]
        if rank == 0 or len(rngs) == size:  # this replica's own streams
            _set_random_states(rngs[rank])
        else:  # a resume at another world size: fresh, reproducible streams
            seed_everything(replica_seed(self.seed, rank, state["step"]))
        if is_main() and self.history_path.exists():  # drop evaluations logged after the checkpoint, and a line cut short by a kill
            rows = [r for r in read_history(self.history_path) if r["step"] <= state["step"]]
            write_text(self.history_path, "".join(json.dumps(r) + "\n" for r in rows))
        return state["step"], state["seconds"]

    def _log(self, step: int, seconds: float, loss: float) -> dict:
        row = {"step": step, "trajectories": step * self.items_per_step * world()[1], "seconds": round(seconds, 3), "loss": loss}
        row.update(self.evaluate())
        append_text(self.history_path, json.dumps(row) + "\n")
        if self.on_row is not None:
            self.on_row(row)
        return row

    def run(self, resume: bool = False) -> list[dict]:
        """Train to ``steps``; returns the history rows. Raises :class:`TrainingDiverged` on a non-finite loss, gradient
        norm or weight (checked after every update), keeping the last checkpoint, saved at a step before."""
        rank, size = world()
        start, seconds = self._restore() if resume else (0, 0.0)
        later = evaluation_before_end(start, self.steps, self.eval_every)
        if self.revised and later is not None:
            raise CheckpointError(
                f"--resume --set {', '.join(self.revised)}: the last checkpoint in {self.out_dir} is at step {start}, and the evaluation at step {later}"
                " comes before the end: its draws steer the updates after it, so another value would train another model; start the run afresh with these settings (--overwrite)"
            )
        if not resume:
            if size > 1:
                seed_everything(replica_seed(self.seed, rank))
            if rank == 0:
                write_text(self.history_path, "")
            self._save(0, 0.0)
        broadcast_parameters(self.model)
        t0 = time.perf_counter() - seconds
        bar = tqdm(range(start, self.steps), initial=start, total=self.steps, desc="train", mininterval=2.0, dynamic_ncols=True, disable=rank > 0)
        loss_value = float("nan")
        weights = [p for g in self.optimizer.param_groups for p in g["params"]]  # what an update changes
        for step in bar:
            loss = self.step_fn(step)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            loss_value = average_gradients([p for g in self.optimizer.param_groups for p in g["params"]], loss)
            if not np.isfinite(loss_value):
                raise TrainingDiverged(f"loss is {loss_value} at step {step}; stopped, last good checkpoint kept at {self.checkpoint}")
            params = [p for g in self.optimizer.param_groups for p in g["params"] if p.grad is not None]
            norm = torch.nn.utils.clip_grad_norm_(params, self.grad_clip if self.grad_clip > 0 else float("inf"))
            if not torch.isfinite(norm):
                raise TrainingDiverged(f"gradient norm is {float(norm)} at step {step}; stopped, last good checkpoint kept at {self.checkpoint}")
            self.optimizer.step()
            if not _sums_finite(weights):  # e.g. a learning rate so large that the update itself overflows
                bad = self._non_finite()  # exact: a finite tensor's sum can overflow
                if bad:
                    raise self._diverged(bad, step)
            if self.scheduler:
                self.scheduler.step()
            if self.average is not None:
                self.average.update()
            done = step + 1
            if done % self.eval_every == 0 or done == self.steps:
                if rank == 0:
                    row = self._log(done, time.perf_counter() - t0, loss_value)
                    bar.set_postfix({k: f"{v:.4g}" for k, v in row.items() if k not in ("step", "trajectories", "seconds")}, refresh=False)
                self._save(done, time.perf_counter() - t0)
        bar.close()
        if rank > 0:
            raise ReplicaFinished(f"replica {rank} of {size} finished {self.steps} updates; rank 0 evaluates and writes {self.out_dir}")
        rows = read_history(self.history_path)
        if not rows or rows[-1]["step"] != self.steps:  # a finished run resumed after its history was emptied or cut
            raise HistoryError(
                f"{self.history_path} has no row for step {self.steps}, the last of this run (emptied or cut after it was written);"
                " restore the file, or start the run afresh with --overwrite"
            )
        return rows


def evaluation_before_end(step: int, steps: int, eval_every: int) -> int | None:
    """The first evaluation after ``step`` that comes before the last step ``steps`` (a multiple of ``eval_every``
    strictly between them), or ``None`` when only the last step's is left."""
    after = (step // eval_every + 1) * eval_every
    return after if after < steps else None


def read_history(path: Path) -> list[dict]:
    """The rows of a run's ``history.jsonl`` at ``path``, without blank lines and a last line that a killed process left
    unfinished; a :class:`HistoryError` (one line, naming the file and line) where the file is not UTF-8 or a row's
    ``step`` is not a whole number >= 0."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise HistoryError(
            f"{path} is not UTF-8 text (byte {e.start} is {e.object[e.start : e.start + 1]!r}), so not a run's history; restore it, or start the run afresh with --overwrite"
        ) from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        row = _parse_row(line)
        if row is None:
            continue
        step = row["step"]
        if not isinstance(step, int) or isinstance(step, bool) or step < 0:
            raise HistoryError(
                f"{path} line {number}: step is {json.dumps(step)}; valid: a whole number >= 0 (the update the row was logged after); restore the file, or start the run afresh with --overwrite"
            )
        rows.append(row)
    return rows


def _all_finite(tensors: list[Tensor]) -> list[bool]:
    """Whether each tensor holds finite values only, read back at once (one device synchronisation)."""
    if not tensors:
        return []
    with torch.no_grad():
        return torch.stack([torch.isfinite(t).all() for t in tensors]).tolist()


def _sums_finite(tensors: list[Tensor]) -> bool:
    """``True`` only if every tensor holds finite values only: a sum is finite only where every term is (a NaN or an
    infinity makes it non-finite), so a finite sum settles it at a quarter of the cost of :func:`_all_finite` (about
    20 us on the hypergrid's policy, one CPU thread); ``False`` where a sum is not finite, which overflow alone can cause."""
    if not tensors:
        return True
    with torch.no_grad():
        return bool(torch.isfinite(torch.stack([t.sum() for t in tensors])).all())


def _differences(saved: object, current: dict) -> list[str]:
    """The settings (then ``seed``, ``data``) in which two run ids differ; none where ``saved`` is not a run id at all."""
    if not isinstance(saved, dict):
        return []
    a, b = saved.get("settings", {}), current.get("settings", {})
    settings = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k)) if isinstance(a, dict) else ["settings"]
    return settings + [k for k in ("seed", "data") if saved.get(k) != current.get(k)]


def _one_line(error: BaseException, limit: int = 200) -> str:
    """``error``'s message on one line (its whitespace runs made single spaces), cut to ``limit`` characters."""
    text = " ".join(str(error).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _parse_row(line: str) -> dict | None:
    """One ``history.jsonl`` row, or ``None`` for a blank line or one that a killed process left unfinished."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError:
        return None
    return row if isinstance(row, dict) and "step" in row else None
