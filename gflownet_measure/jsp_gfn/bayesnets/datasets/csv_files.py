"""Interventional data for any data set: which rows intervene on which nodes (perfect interventions, Eaton & Murphy 2007).

A data file may carry a column named ``intervention`` (any case), or a separate file may be given (setting
``interventions``). Either gives, per data row, the **targets**: node names (the data's column names) separated by
``;`` (``PKC;PKA``), or an empty cell / ``none`` / ``observational`` for a row observed without intervention. A separate
file may instead be a 0/1 matrix with one column per node, headed by the data's column names. The result is an
``[N, d]`` bool mask: row ``n`` intervenes on node ``j``, so the CPD term of node ``j`` is dropped from row ``n``'s
likelihood (:class:`~gflownet_measure.jsp_gfn.bayesnets.cpd_base.CPDModel`). Every problem is a one-line ``ValueError`` naming the file, row and value.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = ["INTERVENTION_COLUMN", "OBSERVATIONAL", "SUM_OF_SQUARES_LIMIT", "load_csv", "parse_targets", "load_data", "load_interventions"]

SUM_OF_SQUARES_LIMIT = 1e300
"""The largest sum of squares of a column that :func:`load_csv` accepts. The models score the data through its sums of
squares and products (the linear-Gaussian Gram matrix :math:`X^\\top X / \\sigma^2`, a Gaussian CPD's squared residuals), in
float64, whose largest number is about 1.8e308: below 1e300, they stay finite for every noise variance a run accepts
(``obs_var >= 1e-8``); beyond, the Cholesky factor of an infinite precision fails (a ``LinAlgError``), after the run
has started. A single value is thus at most 1e150 in magnitude; rescale a column beyond (a smaller unit, or standardised).
Values much smaller than that limit may still make the training's float32 loss overflow (``obs_var`` scales every
squared residual): such a run stops at its first step with a one-line ``loss is nan``."""

INTERVENTION_COLUMN = "intervention"
OBSERVATIONAL = ("", "none", "observational")
"""Cells that mean: no intervention in this row."""


def parse_targets(cells: list[str], names: list[str], where: str) -> Tensor:
    """``[N, d]`` bool from one cell of targets per row (module docstring); a name outside ``names`` is a ``ValueError``."""
    index = {n: j for j, n in enumerate(names)}
    mask = torch.zeros(len(cells), len(names), dtype=torch.bool)
    for r, cell in enumerate(cells):
        if cell.strip().lower() in OBSERVATIONAL:
            continue
        for target in (t.strip() for t in cell.split(";")):
            if target not in index:
                raise ValueError(
                    f"interventions: unknown target {target!r} at data row {r + 1} of {where}; targets are the data's column names {names}, separated by ';', or empty / none for an observational row"
                )
            mask[r, index[target]] = True
    if mask.all(0).any():
        j = int(mask.all(0).nonzero()[0])
        raise ValueError(
            f"interventions: every row of {where} intervenes on {names[j]!r}, so nothing is learned about its CPD; keep some rows without that intervention"
        )
    return mask


def _read_rows(path: Path) -> list[list[str]]:
    where = repr(str(path))
    if not path.is_file():
        raise ValueError(f"interventions: no such file {where}")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            return [row for row in csv.reader(f)]
    except (UnicodeDecodeError, OSError) as e:
        raise ValueError(f"interventions: cannot read {where} as UTF-8 CSV ({type(e).__name__})") from None


def load_interventions(path, names: list[str], n_rows: int) -> Tensor:
    """``[N, d]`` bool from a separate file: one column of targets, or one 0/1 column per node headed by ``names``."""
    path = Path(path)
    where = repr(str(path))
    lines = _read_rows(path)
    if len(lines) - 1 != n_rows:
        raise ValueError(f"interventions: {where} has {len(lines) - 1} data rows, the data has {n_rows}; give one row per data row (after a header)")
    header = [h.strip() for h in lines[0]]
    if len(header) == 1:
        return parse_targets([row[0] if row else "" for row in lines[1:]], names, where)
    if sorted(header) != sorted(names):
        raise ValueError(f"interventions: {where} must have one column of targets, or one 0/1 column per node named {names}; got header {header}")
    mask = torch.zeros(n_rows, len(names), dtype=torch.bool)
    for r, row in enumerate(lines[1:]):
        for h, cell in zip(header, row):
            if cell.strip() not in ("0", "1"):
                raise ValueError(f"interventions: cell {cell!r} in column {h!r}, data row {r + 1} of {where} is not 0 or 1")
            mask[r, names.index(h)] = cell.strip() == "1"
    return mask


def load_data(path, interventions: str = "") -> tuple[Tensor, list[str], Tensor | None]:
    """``(data [N, d], names, mask [N, d] or None)`` of a CSV (:func:`~gflownet_measure.jsp_gfn.bayesnets.datasets.csv_files.load_csv`), its ``intervention`` column or the
    separate ``interventions`` file giving the mask (both at once is a ``ValueError``); ``None`` for observational data."""
    data, names = load_csv(path, skip=(INTERVENTION_COLUMN,))
    with Path(path).open(newline="", encoding="utf-8") as f:
        header = [h.strip().lower() for h in next(csv.reader(f))]
    mask = None
    if INTERVENTION_COLUMN in header:
        if interventions:
            raise ValueError(f"interventions={interventions!r}: the data file {str(path)!r} has its own {INTERVENTION_COLUMN!r} column; give one or the other")
        c = header.index(INTERVENTION_COLUMN)
        rows = [row for row in _read_rows(Path(path))[1:] if row]
        mask = parse_targets([row[c] for row in rows], names, repr(str(path)))
    elif interventions:
        mask = load_interventions(interventions, names, data.shape[0])
    return data, names, mask


def load_csv(path, skip: tuple[str, ...] = ()) -> tuple[Tensor, list[str]]:
    """``(data [N, d] float64, names)`` from a comma-separated UTF-8 file with a header row of variable names and one column per variable.

    Columns whose name (case-insensitive) is in ``skip`` are not variables and are left out (e.g. an ``intervention``
    column, read by :func:`~gflownet_measure.jsp_gfn.bayesnets.datasets.csv_files.load_data`).

    Every problem is a ``ValueError`` of one line naming the file and what to change: a missing file or a folder, an
    unreadable or non-UTF-8 file, another separator, a first row of numbers (no header), ragged rows, cells that are not
    finite numbers, a column too large to score in float64 (its squares summing past
    :data:`~gflownet_measure.jsp_gfn.bayesnets.datasets.csv_files.SUM_OF_SQUARES_LIMIT`; the message names the column and the row).
    A constant column is accepted (no model divides by a column's spread).
    """
    path = Path(path)
    where = repr(str(path))
    if path.is_dir():
        raise ValueError(f"load_csv: {where} is a folder; give the path of a CSV file")
    if not path.is_file():
        raise ValueError(f"load_csv: no such file {where}")
    try:
        with path.open(newline="", encoding="utf-8") as f:
            lines = [row for row in csv.reader(f) if row]
    except UnicodeDecodeError as e:
        raise ValueError(f"load_csv: {where} is not UTF-8 text (byte {e.object[e.start]:#04x} at offset {e.start}); save it as UTF-8") from None
    except OSError as e:
        raise ValueError(f"load_csv: cannot read {where}: {e.strerror}") from None
    if not lines:
        raise ValueError(f"load_csv: {where} is empty; expected a header row of variable names")
    names, rows = [n.strip() for n in lines[0]], lines[1:]
    kept = [c for c, n in enumerate(names) if n.lower() not in skip]
    if len(kept) < len(names):
        if any(len(row) != len(names) for row in rows):
            r = next(r for r, row in enumerate(rows, start=1) if len(row) != len(names))
            raise ValueError(f"load_csv: data row {r} has {len(rows[r - 1])} cells, the header has {len(names)} (in {where})")
        names, rows = [names[c] for c in kept], [[row[c] for c in kept] for row in rows]
    if len(names) < 2:
        other = next((sep for sep in (";", "\t", "|") if sep in lines[0][0]), None)
        hint = f"; its header contains {other!r}: the file must be comma-separated" if other else ""
        raise ValueError(f"load_csv: need at least 2 columns (variables); got {len(names)} in {where}{hint}")
    if all(_is_number(n) for n in names):
        raise ValueError(f"load_csv: the first row of {where} is numbers, not variable names; add a header row (one name per column)")
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise ValueError(f"load_csv: duplicate column names {dup} in {where}")
    if len(rows) < 2:
        raise ValueError(f"load_csv: need at least 2 data rows; got {len(rows)} in {where}")
    values = np.empty((len(rows), len(names)))
    for r, row in enumerate(rows, start=1):
        if len(row) != len(names):
            raise ValueError(f"load_csv: data row {r} has {len(row)} cells, the header has {len(names)} (in {where})")
        for c, cell in enumerate(row):
            try:
                value = float(cell) if cell.strip() else math.nan
            except ValueError:
                raise ValueError(f"load_csv: non-numeric cell {cell!r} in column {names[c]!r}, data row {r} of {where}") from None
            if math.isnan(value):
                raise ValueError(f"load_csv: missing value (empty or NaN) in column {names[c]!r}, first at data row {r} of {where}")
            if math.isinf(value):
                raise ValueError(f"load_csv: infinite cell {cell!r} in column {names[c]!r}, data row {r} of {where}")
            values[r - 1, c] = value
    _check_magnitude(values, rows, names, where)
    return torch.from_numpy(values), names


def _check_magnitude(values: np.ndarray, rows: list[list[str]], names: list[str], where: str) -> None:
    """A one-line ``ValueError`` naming the first data row at which a column's squares sum past :data:`SUM_OF_SQUARES_LIMIT`."""
    with np.errstate(over="ignore"):
        squares = np.square(values)
        over = ~(np.cumsum(squares, axis=0) <= SUM_OF_SQUARES_LIMIT)  # an overflow to inf counts too
    if not over.any():
        return
    r, c = np.argwhere(over)[0]  # the first row, then the first column in it
    fix = "rescale the column (a smaller unit, or standardised)"
    if not squares[r, c] <= SUM_OF_SQUARES_LIMIT:
        raise ValueError(
            f"load_csv: cell {rows[r][c].strip()!r} in column {names[c]!r}, data row {r + 1} of {where} is too large to score in float64 "
            f"(the models sum the squares of a column; each value must be at most 1e150 in magnitude): {fix}"
        )
    raise ValueError(
        f"load_csv: the squares of column {names[c]!r} sum past {SUM_OF_SQUARES_LIMIT:g} at data row {r + 1} of {where}, too large to score in float64 "
        f"(the models sum the squares of a column): {fix}"
    )


def _is_number(cell: str) -> bool:
    try:
        float(cell)
    except ValueError:
        return False
    return True
