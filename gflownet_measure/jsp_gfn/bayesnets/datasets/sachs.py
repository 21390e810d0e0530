"""The Sachs et al. (2005) flow-cytometry data: 11 phospho-proteins of human T cells under 9 experimental conditions,
the interventions of each condition, their discretisation and the consensus graph (Deleu et al. 2023, section 5.3).

The measurements ship with this package (``data/sachs_cyto_full_data.csv.gz``, a gzip copy of
``cdt/data/resources/cyto_full_data.csv`` of the Causal Discovery Toolbox, MIT licence; ``data/README.md``): 7,466 rows
of raw intensities, the 9 conditions concatenated in the order of Sachs et al.'s files (1. ``cd3cd28.xls`` ...
9. ``b2camp.xls``). The row blocks are :data:`BLOCK_SIZES`; :func:`boundary_jumps` recovers the boundaries from the
data alone (docs/sachs.md: 7 of the 8 exactly, the last within 3 rows).

Each condition is a stimulus (anti-CD3/CD28, or PMA, or beta2-cAMP) with at most one small-molecule reagent; the
reagent's *intended target* (Sachs et al. 2005, Fig. 1 and Table 1; Eaton & Murphy 2007, section 5) is modelled as
a perfect intervention on that protein (:data:`CONDITIONS`). Conditions 1 and 2 are general stimuli, observational.

Discretisation (:func:`discretise`): per protein, the tertiles of the *training* rows (the cut points at its 1/3 and
2/3 quantiles; as Eaton & Murphy 2007 discretise into low / medium / high), applied unchanged to the held-out rows.
"""

from __future__ import annotations

import csv
import gzip
from dataclasses import dataclass
from importlib import resources

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "PROTEINS",
    "BLOCK_SIZES",
    "CONDITIONS",
    "Condition",
    "load_raw",
    "consensus_graph",
    "block_of_rows",
    "boundary_jumps",
    "discretise",
    "intervention_mask",
    "SachsSplit",
    "sachs_split",
    "parse_conditions",
]

PROTEINS = ("praf", "pmek", "plcg", "PIP2", "PIP3", "p44/42", "pakts473", "PKA", "PKC", "P38", "pjnk")
"""The 11 columns, in the file's order."""

BLOCK_SIZES = (853, 902, 911, 723, 810, 799, 848, 913, 707)
"""Rows of the 9 conditions in file order (sum 7,466)."""


@dataclass(frozen=True)
class Condition:
    """One experimental condition: ``key`` (the setting's name), the reagents, and the protein it intervenes on (``None``: observational)."""

    key: str
    reagents: str
    target: str | None


CONDITIONS = (
    Condition("cd3cd28", "anti-CD3/CD28", None),
    Condition("icam2", "anti-CD3/CD28 + ICAM-2", None),
    Condition("akt", "anti-CD3/CD28 + AKT inhibitor", "pakts473"),
    Condition("g0076", "anti-CD3/CD28 + G06976 (PKC inhibitor)", "PKC"),
    Condition("psitect", "anti-CD3/CD28 + psitectorigenin (PIP2 inhibitor)", "PIP2"),
    Condition("u0126", "anti-CD3/CD28 + U0126 (MEK inhibitor)", "pmek"),
    Condition("ly294002", "anti-CD3/CD28 + LY294002 (PI3K inhibitor: PIP3)", "PIP3"),
    Condition("pma", "PMA (PKC activator)", "PKC"),
    Condition("b2camp", "beta2-cAMP (PKA activator)", "PKA"),
)
"""The 9 conditions in file order with their intervention targets (Sachs et al. 2005; docs/sachs.md gives the evidence in the data)."""


def _resource(name: str):
    return resources.files("gflownet_measure.jsp_gfn.bayesnets.datasets").joinpath("data").joinpath(name)


def load_raw() -> np.ndarray:
    """``[7466, 11]`` float64 raw intensities (all > 0), columns :data:`PROTEINS`, rows in file order."""
    with _resource("sachs_cyto_full_data.csv.gz").open("rb") as f, gzip.open(f, "rt") as text:
        header = text.readline().strip().split(",")
        values = np.loadtxt(text, delimiter=",")
    if tuple(header) != PROTEINS or values.shape != (sum(BLOCK_SIZES), len(PROTEINS)):
        raise RuntimeError(f"the shipped Sachs data is damaged: header {header}, shape {values.shape}")
    return values


def consensus_graph() -> Tensor:
    """``[11, 11]`` bool, ``A[i, j]`` iff i -> j among the 18 edges of the consensus network shipped with the data (Sachs et al. 2005, Fig. 2, as listed by the Causal Discovery Toolbox)."""
    adj = torch.zeros(len(PROTEINS), len(PROTEINS), dtype=torch.bool)
    with _resource("sachs_consensus_edges.csv").open("r") as f:
        for cause, effect in list(csv.reader(f))[1:]:
            adj[PROTEINS.index(cause), PROTEINS.index(effect)] = True
    return adj


def block_of_rows() -> np.ndarray:
    """``[7466]`` int: the condition index (0..8) of every row."""
    return np.repeat(np.arange(len(BLOCK_SIZES)), BLOCK_SIZES)


def boundary_jumps(log_x: np.ndarray, candidates: np.ndarray, window: int = 50) -> np.ndarray:
    """``[len(candidates)]``: :math:`\\sum_j |\\mathrm{median}(x_{c-w:c, j}) - \\mathrm{median}(x_{c:c+w, j})|`, the jump of the
    per-protein medians of ``log_x [N, d]`` across each candidate boundary ``c`` (window ``w`` rows each side); a block
    boundary is where this peaks."""
    return np.array([np.abs(np.median(log_x[c - window : c], 0) - np.median(log_x[c : c + window], 0)).sum() for c in candidates])


def discretise(train: np.ndarray, other: np.ndarray | None = None, n_states: int = 3, names=None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
    """Per-column quantile bins of the training rows: ``(train states, other states, cuts [d, K - 1])``.

    State ``s`` of column ``j`` is :math:`\\{x : c_{j,s} \\le x < c_{j,s+1}\\}` with :math:`c_{j,s}` the ``s / K`` quantile of
    ``train[:, j]`` (``K = n_states``; tertiles for 3). ``other`` (held-out rows) is binned with the same cuts. A
    ``ValueError`` (one line) if a state is empty in the training rows (ties at a cut: too few distinct values).
    """
    if int(n_states) != n_states or n_states < 2:
        raise ValueError(f"discretise: n_states must be an integer >= 2; got {n_states!r}")
    cuts = np.quantile(train, np.arange(1, n_states) / n_states, axis=0).T  # [d, K - 1]

    def bins(x):
        return np.stack([np.searchsorted(cuts[j], x[:, j], side="right") for j in range(x.shape[1])], 1)

    states = bins(train)
    for j in range(train.shape[1]):
        counts = np.bincount(states[:, j], minlength=n_states)
        if (counts == 0).any():
            name = names[j] if names is not None else j
            raise ValueError(
                f"discretise: column {name!r} leaves state {int(np.flatnonzero(counts == 0)[0])} of {n_states} empty (too few distinct values for {n_states} quantile bins); lower the number of states or drop the column"
            )
    return states, None if other is None else bins(other), cuts


def parse_conditions(text: str) -> list[int]:
    """Condition indices from ``"u0126,ly294002"`` (keys of :data:`CONDITIONS`) or numbers 1..9; ``ValueError`` naming the valid keys."""
    keys = [c.key for c in CONDITIONS]
    out = []
    for item in (v.strip() for v in str(text).split(",") if v.strip()):
        if item.isdigit() and 1 <= int(item) <= len(keys):
            out.append(int(item) - 1)
        elif item in keys:
            out.append(keys.index(item))
        else:
            raise ValueError(f"sachs_heldout: unknown condition {item!r}; valid: {', '.join(keys)} (or 1..{len(keys)})")
    return sorted(set(out))


@dataclass(frozen=True)
class SachsSplit:
    """Discretised train / held-out rows with their interventions (``[N, d]`` bool, ``True`` where the node is intervened on)."""

    train: Tensor
    train_interventions: Tensor
    heldout: Tensor
    heldout_interventions: Tensor
    names: tuple[str, ...]
    cuts: np.ndarray


def intervention_mask(conditions: np.ndarray) -> Tensor:
    """``[N, 11]`` bool: row ``n`` intervenes on the target of its condition ``conditions[n]``."""
    mask = np.zeros((len(conditions), len(PROTEINS)), dtype=bool)
    for k, cond in enumerate(CONDITIONS):
        if cond.target is not None:
            mask[conditions == k, PROTEINS.index(cond.target)] = True
    return torch.from_numpy(mask)


def sachs_split(heldout: str = "u0126,ly294002", rows_per_condition: int = 600, n_states: int = 3, seed: int = 0) -> SachsSplit:
    """The held-out protocol of Deleu et al. 2023, Fig. 4c: ``rows_per_condition`` random rows of each condition
    (0: all), the conditions ``heldout`` held out (their rows scored by the interventional NLL), the others trained on
    (7 x 600 = 4,200 rows with the defaults), discretised by :func:`discretise` on the training rows."""
    held = parse_conditions(heldout)
    if not held or len(held) == len(CONDITIONS):
        raise ValueError(f"sachs_heldout={heldout!r}: hold out at least one and at most {len(CONDITIONS) - 1} of the {len(CONDITIONS)} conditions")
    raw, blocks = load_raw(), block_of_rows()
    rng = np.random.default_rng(seed)
    keep = []
    for k, size in enumerate(BLOCK_SIZES):
        rows = np.flatnonzero(blocks == k)
        if rows_per_condition and rows_per_condition < size:
            rows = np.sort(rng.choice(rows, rows_per_condition, replace=False))
        keep.append(rows)
    train_rows = np.concatenate([keep[k] for k in range(len(CONDITIONS)) if k not in held])
    held_rows = np.concatenate([keep[k] for k in held])
    train, other, cuts = discretise(raw[train_rows], raw[held_rows], n_states, PROTEINS)
    return SachsSplit(
        torch.from_numpy(train), intervention_mask(blocks[train_rows]), torch.from_numpy(other), intervention_mask(blocks[held_rows]), PROTEINS, cuts
    )
