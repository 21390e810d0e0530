"""Categorical data simulated from a discrete Bayesian network that pgmpy ships (``data=pgmpy:NAME``).

The networks are the bnlearn repository's (Scutari), bundled in the pgmpy package as BIF files: ``pgmpy:sachs`` is the
3-state (LOW / AVG / HIGH) network of the 11 proteins of Sachs et al. 2005 with its 17 edges. Simulating from it gives
data whose graph is known, so structure recovery with the categorical CPDs can be checked where the real Sachs data
only has a consensus graph (Deleu et al. 2023, section 5.3). pgmpy reads the BIF file and draws the rows by forward
(ancestral) sampling; it is an optional extra (``pip install -e '.[pgmpy]'``), imported only here.

States are coded ``0 .. k-1`` in the order the BIF file lists them; variables keep pgmpy's node order.
"""

from __future__ import annotations

import gzip
import importlib.resources
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["PREFIX", "DiscreteNetworkData", "simulate_pgmpy"]

PREFIX = "pgmpy:"
"""``data=pgmpy:NAME`` names a network of :func:`simulate_pgmpy`."""


@dataclass(frozen=True)
class DiscreteNetworkData:
    """Rows simulated from a known discrete network: ``train [N, d]`` and ``valid [N', d]`` int64 state codes, the true
    ``adj [d, d]`` bool (``adj[i, j]``: i -> j), the variable ``names``, each variable's ``states``, and
    ``valid_nll``: :math:`-\\sum_{rows} \\sum_j \\log P(x_j | x_{Pa(j)})` of the held-out rows under the network itself,
    the held-out NLL that a sampler's ``heldout_nll`` approaches from above."""

    train: Tensor
    valid: Tensor
    adj: Tensor
    names: tuple[str, ...]
    states: tuple[tuple[str, ...], ...]
    valid_nll: float


def _bundled(name: str) -> str:
    """The BIF text of pgmpy's bundled network ``name``; ``ValueError`` if pgmpy has no such network."""
    folder = importlib.resources.files("pgmpy") / "utils" / "example_models"
    path = folder / f"{name}.bif.gz"
    if not path.is_file():
        known = sorted(p.name[: -len(".bif.gz")] for p in folder.iterdir() if p.name.endswith(".bif.gz"))
        raise ValueError(f"data={PREFIX}{name}: pgmpy ships no network {name!r}; valid: {', '.join(known)}")
    return gzip.decompress(path.read_bytes()).decode()


def simulate_pgmpy(name: str, n_train: int, n_valid: int, seed: int = 0) -> DiscreteNetworkData:
    """``n_train + n_valid`` rows forward-sampled (seeded) from pgmpy's network ``name``, split into training and
    held-out rows; ``ValueError`` (one line) for a missing pgmpy, an unknown name or a simulated state outside its
    variable's state list."""
    try:
        from pgmpy.readwrite import BIFReader
    except ModuleNotFoundError:
        raise ValueError(f"data={PREFIX}{name} simulates from pgmpy's networks: install the extra with pip install -e '.[pgmpy]'") from None
    model = BIFReader(string=_bundled(name)).get_model()
    names = tuple(model.nodes())
    states = tuple(tuple(model.get_cpds(v).state_names[v]) for v in names)
    rows = model.simulate(n_train + n_valid, seed=seed, show_progress=False)
    codes = np.stack([rows[v].map({s: k for k, s in enumerate(st)}).to_numpy() for v, st in zip(names, states)], 1)
    if np.isnan(codes.astype(float)).any():
        raise ValueError(f"data={PREFIX}{name}: a simulated state is missing from its variable's state list")
    index = {v: i for i, v in enumerate(names)}
    adj = torch.zeros(len(names), len(names), dtype=torch.bool)
    for u, v in model.edges():
        adj[index[u], index[v]] = True
    codes = codes.astype(np.int64)
    valid_nll = 0.0
    for v in names:
        cpd = model.get_cpds(v)
        table = np.asarray(cpd.values, dtype=np.float64)  # P(v | parents), indexed by the codes of cpd.variables (v first)
        valid_nll -= float(np.log(table[tuple(codes[n_train:, index[u]] for u in cpd.variables)]).sum())
    data = torch.from_numpy(codes)
    return DiscreteNetworkData(data[:n_train], data[n_train:], adj, names, states, valid_nll)
