"""A run folder is owned by one run: the checks and the lock that the command line takes before it writes there.

- A new run starts only in a new or empty folder, or, with ``overwrite``, in a folder that holds a run: a
  ``config.json`` with a seed and settings, and nothing but the files and folders that its ``manifest.json`` lists
  (:mod:`gflownet_measure.run_files`: every folder a run writes lists what the run wrote in it), which are then
  deleted. A folder that holds anything else, or a run of an earlier version (no manifest), is never written to.
- ``--resume`` continues only the run that the folder holds, and refuses a folder where a run file (:data:`RUN_FILES`,
  a name its manifests list) is a symbolic link.
- While the run writes, its process is confined to the folder (:func:`gflownet_measure.run_files.confined`): no
  write goes through a link or outside it. A new run's folder starts with an empty manifest.
- One process at a time: an exclusive ``flock`` on the folder itself, held while the run writes. The kernel drops it
  when the process ends, however it ends, so a killed run never leaves a stale lock behind. Each run of a table (a
  multi-run experiment) holds the same lock on its own folder while it trains (:func:`locked`), in whichever process
  trains it.
- A table's runs are its own: a run is never started or resumed on its own in the folder of one of them
  (:func:`table_of`), which the table would then find changed (and refuse to resume).
"""

from __future__ import annotations

import contextlib
import fcntl
import fnmatch
import json
import os
from pathlib import Path
from typing import Iterator

from gflownet_measure.run_files import MANIFEST, RunFileError, confined, inventory, start_manifest
from gflownet_measure.training import CHECKPOINTS

from .settings import ConfigError

__all__ = ["RunFolder", "RUN_FILES", "load_run_config", "locked", "table_of", "refuse_table_run"]

# what a run writes in its folder and its sub-runs' folders (the run-folder contract, figures, tables, temporary files,
# the manifest): a symbolic link by one of these names makes --resume refuse the folder
RUN_FILES = (
    MANIFEST,
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
        self._confined = contextlib.ExitStack()

    def __enter__(self) -> "RunFolder":
        refuse_table_run(self.out)
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
            self._confined.enter_context(confined(self.out))
            if not self.resume:
                start_manifest(self.out)
        except RunFileError as e:
            self._release()
            raise ConfigError(str(e)) from None
        except BaseException:
            self._release()
            raise
        return self

    def _claim(self) -> None:
        entries = list(self.out.iterdir())
        if self.resume:
            self._refuse_links()
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
        try:
            written = inventory(self.out)
        except RunFileError as e:
            raise ConfigError(f"--overwrite: {e} (nothing was deleted)") from None
        if written is None:
            raise ConfigError(
                f"--overwrite: {self.out} holds a run of an earlier version of gflownet-measure, without the {MANIFEST} that lists the files it wrote; delete the folder by hand to replace it (nothing was deleted)"
            )
        if written.foreign:
            path, kind = written.foreign[0]
            raise ConfigError(
                f"--overwrite: {self.out} holds {path.relative_to(self.out)}, {kind} that the run did not write (its {MANIFEST} does not list it); move it away first (nothing was deleted)"
            )
        last = [self.out / "config.json", self.out / MANIFEST]  # a folder stays a run, or at least a manifest's, until the end
        for path in [p for p in written.files if p not in last] + written.folders + [p for p in last if p in written.files]:
            try:
                path.rmdir() if path in written.folders else path.unlink()
            except OSError as e:
                raise ConfigError(f"--overwrite: cannot delete {path} ({e.strerror}); remove it by hand") from None

    def _refuse_links(self) -> None:
        """``--resume``: a run file that is a symbolic link (a run never writes one) stops the run before anything is written."""
        for folder, dirs, files in os.walk(self.out):
            listed = _listed(Path(folder))
            for name in sorted(dirs + files):
                path = Path(folder) / name
                if path.is_symlink() and (name in listed or any(fnmatch.fnmatch(name, pattern) for pattern in RUN_FILES)):
                    raise ConfigError(
                        f"--resume: {self.out} holds {path.relative_to(self.out)}, a symbolic link where a run writes a file; a run never writes through one: remove it (nothing was written)"
                    )

    def _release(self) -> None:
        self._confined.close()
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the lock
            self._fd = None

    def __exit__(self, *exc) -> None:
        self._release()


def _listed(folder: Path) -> set[str]:
    """The names that ``folder``'s manifest lists (none where it has no readable one)."""
    path = folder / MANIFEST
    if path.is_symlink() or not path.is_file():
        return set()
    try:
        manifest = json.loads(path.read_text())
        return {name for key in ("files", "folders") for name in manifest[key] if isinstance(name, str)}
    except (OSError, ValueError, KeyError, TypeError):
        return set()


SUB_RUN_DEPTH = 3  # a table's runs lie at most this many folders below its own (sde-table: out/<target>/<row>/seed<k>)


@contextlib.contextmanager
def locked(folder: Path, busy: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` itself (reached through no link) while the context lasts; a
    :class:`~gflownet_measure.experiments.settings.ConfigError` ``busy`` where another process holds it. Dropped by
    the kernel when the process ends, however it ends."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise ConfigError(busy) from None
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the lock


def _run_config(folder: Path) -> dict | None:
    """``folder``'s ``config.json`` where it is a run's (:func:`load_run_config`; not through a link), else ``None``."""
    path = folder / "config.json"
    if path.is_symlink() or not path.is_file():
        return None
    try:
        return load_run_config(path)
    except ValueError:
        return None


def _folders(folder: Path) -> list[str]:
    """The folders that ``folder``'s manifest lists: those a table made there (none where it has no readable manifest)."""
    path = folder / MANIFEST
    if path.is_symlink() or not path.is_file():
        return []
    try:
        folders = json.loads(path.read_text())["folders"]
        return [name for name in folders if isinstance(name, str)] if isinstance(folders, list) else []
    except (OSError, ValueError, KeyError, TypeError):
        return []


def table_of(folder: Path) -> tuple[Path, str] | None:
    """The run folder of the table (a multi-run experiment) of which ``folder`` is, or lies inside, the folder of one
    run, and the table's experiment; ``None`` where there is none.

    The table is the nearest folder above ``folder`` (at most :data:`SUB_RUN_DEPTH` up) whose ``config.json`` names an
    experiment, reached through folders that the table made: each is listed in its parent's manifest, or, for a table
    of an earlier version (no manifests), ``folder`` holds a run's ``config.json`` without an experiment (what a table
    writes in each of its runs' folders)."""
    here = Path(os.path.realpath(folder))  # through links: a link to a table's run is that run
    saved = _run_config(here)
    earlier = saved is not None and "experiment" not in saved
    child = here
    for parent in list(here.parents)[:SUB_RUN_DEPTH]:
        if not earlier and child.name not in _folders(parent):
            return None
        table = _run_config(parent)
        if table is not None and "experiment" in table:
            return parent, str(table["experiment"])
        child = parent
    return None


def refuse_table_run(out: Path) -> None:
    """A :class:`~gflownet_measure.experiments.settings.ConfigError` naming the table where ``out`` is the folder of one
    of its runs (:func:`table_of`): the table trains, resumes and replaces its runs itself."""
    owner = table_of(out)
    if owner is not None:
        table, name = owner
        raise ConfigError(
            f"--out {out} is a folder of the multi-run experiment {name} in {table}: its runs are trained, resumed and replaced by that table alone; continue it with `run {name} --out {table} --resume`, or choose a folder outside it (nothing was written)"
        )


def load_run_config(path: Path) -> dict:
    """A run's ``config.json``: a JSON object with a ``seed`` and ``settings``; a ``ValueError`` saying why not otherwise."""
    try:
        saved = json.loads(path.read_text())
    except (ValueError, OSError) as e:
        raise ValueError(f"{path} cannot be read ({type(e).__name__}: {e})") from None
    if not isinstance(saved, dict) or "seed" not in saved or not isinstance(saved.get("settings"), dict):
        raise ValueError(f"{path} is not a run's config (it lacks seed or settings)")
    return saved
