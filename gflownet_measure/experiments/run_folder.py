"""A run folder is owned by one run: the checks and the lock that the command line takes before it writes there.

- A new run starts only in a new or empty folder, or, with ``overwrite``, in a folder that holds a run: a
  ``config.json`` with a seed and settings, and nothing but the files a run writes (:data:`RUN_FILES`, in it and in its
  sub-runs' folders), which are then deleted. A folder that holds anything else is never written to.
- ``--resume`` continues only the run that the folder holds.
- One process at a time: an exclusive ``flock`` on the folder itself, held while the run writes. The kernel drops it
  when the process ends, however it ends, so a killed run never leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import fnmatch
import json
import os
import shutil
from pathlib import Path

from gflownet_measure.training import CHECKPOINTS

from .settings import ConfigError

__all__ = ["RunFolder", "RUN_FILES", "load_run_config"]

# what a run writes in its folder and its sub-runs' folders (the run-folder contract, figures, tables, temporary files)
RUN_FILES = (
    "config.json",
    "metrics.json",
    "history.jsonl",
    "samples.npz",
    *CHECKPOINTS,
    "wall_clock.json",
    "table.txt",
    "*.png",
    "*.tmp",
    "start.json",
    "baselines.json",
    "baseline_*.npz",
)


class RunFolder:
    """Context manager: create ``out`` if needed, lock it, check who owns it, and (``overwrite``) empty it."""

    def __init__(self, out: Path, experiment: str, resume: bool, overwrite: bool):
        self.out, self.experiment, self.resume, self.overwrite = Path(out), experiment, resume, overwrite
        self._fd: int | None = None

    def __enter__(self) -> "RunFolder":
        try:
            self.out.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.out, os.O_RDONLY)
        except OSError as e:
            raise ConfigError(f"--out {self.out}: cannot create or open the run folder ({e.strerror}); choose a folder you can write to") from None
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._release()
            raise ConfigError(
                f"--out {self.out} is in use by another {'run' if self.resume else 'process'} of gflownet-measure; wait for it to end, or choose another folder"
            ) from None
        try:
            self._claim()
        except BaseException:
            self._release()
            raise
        return self

    def _claim(self) -> None:
        entries = list(self.out.iterdir())
        if self.resume or not entries:
            return
        try:
            saved = load_run_config(self.out / "config.json")
        except ValueError:
            raise ConfigError(f"--out {self.out} is not empty and holds no run (no run's config.json); choose a new or empty folder") from None
        if not self.overwrite:
            state = "a finished" if (self.out / "metrics.json").is_file() else "an unfinished"
            of = f"of {saved['experiment']} " if "experiment" in saved else ""
            raise ConfigError(
                f"--out {self.out} holds {state} run {of}(seed {saved['seed']}); continue it with --resume, replace it with --overwrite, or choose another folder"
            )
        foreign = next((p for p in sorted(self.out.rglob("*")) if not p.is_dir() and not any(fnmatch.fnmatch(p.name, pattern) for pattern in RUN_FILES)), None)
        if foreign is not None:
            raise ConfigError(f"--overwrite: {self.out} holds {foreign.relative_to(self.out)}, which no run writes; move it away first (nothing was deleted)")
        for entry in entries:  # only the run's files are left: delete them
            try:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            except OSError as e:
                raise ConfigError(f"--overwrite: cannot delete {entry} ({e.strerror}); remove it by hand") from None

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None

    def __exit__(self, *exc) -> None:
        self._release()


def load_run_config(path: Path) -> dict:
    """A run's ``config.json``: a JSON object with a ``seed`` and ``settings``; a ``ValueError`` saying why not otherwise."""
    try:
        saved = json.loads(path.read_text())
    except (ValueError, OSError) as e:
        raise ValueError(f"{path} cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(saved, dict) or "seed" not in saved or not isinstance(saved.get("settings"), dict):
        raise ValueError(f"{path} is not a run's config (it lacks seed or settings)")
    return saved
