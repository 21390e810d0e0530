"""The ending every multi-run table writes in its folder, beside the metrics the command line writes last."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from gflownet_measure.run_files import RunFileError, write_file

__all__ = ["write_table"]


def write_table(out: Path, table: str | None, history: list[dict], first: Path | None, figures: tuple[str, ...] = ()) -> None:
    """``table.txt`` (the ``table``, also printed; none where ``None``), ``history.jsonl`` (one JSON object per row of
    ``history``), and from the sub-run folder ``first`` its ``samples.npz`` and the ``figures`` it drew (a figure that
    was not drawn is skipped: a warning said so); ``first=None``: no sub-run has samples. Every file is written
    atomically (:func:`~gflownet_measure.run_files.write_file`)."""
    if table is not None:
        write_file(out / "table.txt", lambda f: f.write(table.encode()))
        print(table)
    write_file(out / "history.jsonl", lambda f: f.write("".join(json.dumps(row) + "\n" for row in history).encode()))
    if first is None:
        return
    _copy(first / "samples.npz", out / "samples.npz")
    for name in figures:
        if (first / name).exists():
            _copy(first / name, out / name)


def _copy(src: Path, dst: Path) -> None:
    """``src`` (a sub-run's file, read through no symbolic link) copied to ``dst``."""
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        if src.is_symlink():
            raise RunFileError(f"{src} is a symbolic link: a run copies no file through one; remove it and run again (nothing was written)") from None
        raise
    with open(fd, "rb") as f:
        write_file(dst, lambda g: shutil.copyfileobj(f, g))
