"""The ending every multi-run table writes in its folder, beside the metrics the command line writes last."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from .common import write_atomic

__all__ = ["write_table"]


def write_table(out: Path, table: str | None, history: list[dict], first: Path | None, figures: tuple[str, ...] = ()) -> None:
    """``table.txt`` (the ``table``, also printed; none where ``None``), ``history.jsonl`` (one JSON object per row of
    ``history``), and from the sub-run folder ``first`` its ``samples.npz`` and the ``figures`` it drew (a figure that
    was not drawn is skipped: a warning said so); ``first=None``: no sub-run has samples. Every file is written
    atomically (:func:`~gflownet_measure.experiments.common.write_atomic`)."""
    if table is not None:
        write_atomic(out / "table.txt", lambda tmp: tmp.write_text(table))
        print(table)
    write_atomic(out / "history.jsonl", lambda tmp: tmp.write_text("".join(json.dumps(row) + "\n" for row in history)))
    if first is None:
        return
    _copy(first / "samples.npz", out / "samples.npz")
    for name in figures:
        if (first / name).exists():
            _copy(first / name, out / name)


def _copy(src: Path, dst: Path) -> None:
    write_atomic(dst, lambda tmp: shutil.copyfile(src, tmp))
