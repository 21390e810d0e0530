"""Shared helpers for the core tests: random pointed DAGs built from :class:`FiniteKernel`.

A DAG here is the discrete special case of a measurable pointed graph (Lahlou et al. 2023,
Definition 1): nodes ``0..n-1`` are the states ``[i]`` (``0`` is :math:`s_0`), every edge goes
``i -> j`` with ``i < j``, every node is reachable from ``0``, and a random subset of *terminable*
nodes (all childless nodes included) carries the sink atom. ``nu`` is counting measure on all
nodes, ``kappa`` counting measure on children (+ sink), ``kappa_b`` counting measure on parents
(the mirror of ``kappa``, so eq. 4 holds), and ``terminal`` counting measure on terminable nodes.

Test modules import from here (``from conftest import ...``): ``tests/`` is on ``sys.path`` because
pytest's default ``prepend`` import mode inserts a rootdir conftest's folder when it has no
``__init__.py``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from gflownet_measure import run_files
from gflownet_measure.graph import PointedGraph
from gflownet_measure.jsp_gfn.baselines.structure import Budget
from gflownet_measure.jsp_gfn.bayesnets.datasets.simulated import simulate_er
from gflownet_measure.jsp_gfn.bayesnets.exact_posterior import ExactPosterior
from gflownet_measure.jsp_gfn.bayesnets.linear_gaussian import LinearGaussian
from gflownet_measure.kernels import FiniteKernel
from gflownet_measure.measures import counting

APPLICATIONS = ("gflownet_measure.jsp_gfn", "gflownet_measure.environments", "gflownet_measure.experiments", "gflownet_measure.baselines")
"""The subpackages built on the core (JSP-GFN, environments, experiments, baselines): ``import gflownet_measure`` loads none of them."""

CHECK_RUN_DIR = Path(__file__).resolve().parents[2] / "shared" / "tools" / "check_run_dir.py"


def check_contract(out: Path, expect: str = "x") -> None:
    """The run folder ``out`` follows the run-folder contract (docs/references.md, 'Run-folder contract').

    Where the development workspace provides a checker script (:data:`CHECK_RUN_DIR`), it is run with
    ``--expect <expect>``; otherwise (any other clone) the contract's core is checked here:
    config.json an object, metrics.json a flat object of finite numbers, history.jsonl one object per line,
    samples.npz holding the ``expect`` arrays."""
    if CHECK_RUN_DIR.exists():
        p = subprocess.run([sys.executable, str(CHECK_RUN_DIR), str(out), "--expect", expect], capture_output=True, text=True)
        assert p.returncode == 0, p.stdout
        return
    assert isinstance(json.loads((out / "config.json").read_text()), dict)
    metrics = json.loads((out / "metrics.json").read_text())
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in metrics.values()), metrics
    assert all(isinstance(json.loads(r), dict) for r in (out / "history.jsonl").read_text().splitlines() if r.strip())
    with np.load(out / "samples.npz") as z:
        assert set(expect.split(",")) <= set(z.files), z.files


@pytest.fixture
def one_thread():
    """One torch thread, restored afterwards: these tests are small, and on 2 shared cores extra threads only contend
    (the CLI's ``--threads 1`` also sets it process-wide)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def random_jsp_policies(cfg, seed: int = 0):
    """``(problem, graph, P_F, P_B)`` of the DAG space ``cfg`` (a ``DagParamsConfig``) with every network weight of P_F
    drawn N(0, 0.3^2) from ``seed``: the zero-initialised heads randomised, so that a test sees the network."""
    from gflownet_measure.environments import dag_params as dp

    problem = dp.make_problem(cfg)
    graph = dp.make_graph(cfg, problem)
    pf, pb = dp.make_policies(graph, cfg, problem)
    torch.manual_seed(seed)
    for p in pf.network.parameters():
        torch.nn.init.normal_(p, std=0.3)
    return problem, graph, pf, pb


def dag(d: int, edges) -> torch.Tensor:
    """The adjacency matrix ``[d, d]`` bool of the edges ``(i, j)``, i -> j (the DAG-space tests)."""
    adj = torch.zeros(d, d, dtype=torch.bool)
    for i, j in edges:
        adj[i, j] = True
    return adj


# Derandomised (seeded) hypothesis runs without the example database: reruns are reproducible.
HYPOTHESIS = settings(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])


@dataclass(frozen=True)
class DagSpec:
    """A finite pointed graph on nodes ``0..n-1``.

    Attributes:
        children: ``children[i]``, the forward neighbours of node ``i``.
        parents: ``parents[j]``, the backward neighbours of node ``j`` (the mirror of ``children``
            unless a test breaks it on purpose).
        terminable: ``terminable[i]``, ``kappa(i, .)`` has the sink atom.
        log_R: :math:`\\log R(i)` for every node (only terminable nodes' values matter).
        max_length: ``N`` of eq. 7; ``n`` bounds every path of a DAG on ``n`` nodes plus the sink step.
        back_to_sink: ``kappa_b(i, .)`` has a sink atom (breaks eq. 2 on purpose).
    """

    children: tuple[tuple[int, ...], ...]
    parents: tuple[tuple[int, ...], ...]
    terminable: tuple[bool, ...]
    log_R: tuple[float, ...]
    max_length: int
    back_to_sink: tuple[bool, ...] | None = None

    @property
    def n(self) -> int:
        return len(self.children)

    @property
    def edges(self) -> list[tuple[int, int]]:
        return [(i, j) for i, ch in enumerate(self.children) for j in ch]

    def with_edges(self, children, parents=None, **kw) -> "DagSpec":
        """A copy with new forward lists and (by default) their mirror as backward lists."""
        children = tuple(tuple(c) for c in children)
        parents = mirror(children) if parents is None else tuple(tuple(p) for p in parents)
        return replace(self, children=children, parents=parents, **kw)


def mirror(children) -> tuple[tuple[int, ...], ...]:
    """Backward neighbour lists of the forward lists ``children`` (``kappa_b`` as the mirror of ``kappa``)."""
    parents: list[list[int]] = [[] for _ in children]
    for i, ch in enumerate(children):
        for j in ch:
            parents[j].append(i)
    return tuple(tuple(p) for p in parents)


def _spec(n: int, parent_sets: list[list[int]], term_draw: list[bool], log_R: list[float]) -> DagSpec:
    children: list[list[int]] = [[] for _ in range(n)]
    for j, ps in enumerate(parent_sets, start=1):
        for i in sorted(set(ps)):
            children[i].append(j)
    terminable = tuple(bool(t) or not children[i] for i, t in enumerate(term_draw))
    ch = tuple(tuple(c) for c in children)
    return DagSpec(ch, mirror(ch), terminable, tuple(float(v) for v in log_R), max_length=n)


@st.composite
def dag_specs(draw, min_nodes: int = 3, max_nodes: int = 7) -> DagSpec:
    """Random pointed DAGs: node 1 has parent 0, node 2 has parent 0 among others (so s0 has two
    children and a perturbation of its P_F row is visible after normalisation), every node ``j >= 1``
    has at least one parent ``i < j`` (so all nodes are reachable from 0), sinks of the DAG are
    terminable, log-rewards in [-2, 2]."""
    n = draw(st.integers(min_nodes, max_nodes))
    parent_sets = [[0]]
    for j in range(2, n):
        ps = draw(st.lists(st.integers(0, j - 1), min_size=1, max_size=j, unique=True))
        parent_sets.append(ps + [0] if j == 2 else ps)
    term = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    log_R = draw(st.lists(st.floats(-2.0, 2.0, allow_nan=False), min_size=n, max_size=n))
    return _spec(n, parent_sets, term, log_R)


def random_dag_spec(seed: int, min_nodes: int = 3, max_nodes: int = 7) -> DagSpec:
    """The same distribution of graphs as :func:`dag_specs`, from a numpy seed (for seeded statistical tests)."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(min_nodes, max_nodes + 1))
    parent_sets = [[0]]
    for j in range(2, n):
        k = int(rng.integers(1, j + 1))
        ps = [int(v) for v in rng.choice(j, size=k, replace=False)]
        parent_sets.append(ps + [0] if j == 2 else ps)
    term = [bool(v) for v in rng.random(n) < 0.5]
    log_R = [float(v) for v in rng.uniform(-2.0, 2.0, n)]
    return _spec(n, parent_sets, term, log_R)


def build_graph(spec: DagSpec, dtype=torch.float64, name: str = "random-dag") -> PointedGraph:
    """The :class:`PointedGraph` of ``spec``: FiniteKernel forward (children + sink) and backward (parents)."""
    n = spec.n
    points = torch.arange(n, dtype=dtype)[:, None]  # [n, 1]: state [i] is node i
    log_R = torch.tensor(spec.log_R, dtype=torch.float64)  # [n]
    term = torch.tensor(spec.terminable)

    def log_reward(x):
        return log_R[x[:, 0].long()].to(x.dtype)

    def encode(x):
        return torch.nn.functional.one_hot(x[:, 0].long(), n).to(x.dtype)

    kappa = FiniteKernel([list(c) for c in spec.children], list(spec.terminable))
    kappa_b = FiniteKernel([list(p) for p in spec.parents], list(spec.back_to_sink) if spec.back_to_sink else None)
    return PointedGraph(
        name=name,
        source=torch.zeros(1, dtype=dtype),
        kappa=kappa,
        kappa_b=kappa_b,
        nu=counting(points),
        terminal=counting(points[term]),
        log_reward=log_reward,
        max_length=spec.max_length,
        encode=encode,
    )


@contextlib.contextmanager
def default_dtype(dtype):
    """Temporarily change torch's default dtype (buffers the library allocates follow it)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def row(report, eq: int):
    """The :class:`CheckResult` of ``report`` for equation ``eq`` (conditions read ``"eq. <eq> ..."``)."""
    hits = [r for r in report.results if r.condition.split()[:2] == ["eq.", str(eq)]]
    assert len(hits) == 1, f"expected one row for eq. {eq} in {[r.condition for r in report.results]}"
    return hits[0]


@pytest.fixture(scope="session")
def d3_problem():
    """``(model, exact posterior)`` of ``simulate_er(d=3, edges_per_node=1, n_train=100, seed=6)``: the full DAG 0 -> 1 (0.55),
    2 -> 0 (-0.58), 2 -> 1 (1.27), noise std 0.1, scored by ``LinearGaussian`` (sigma^2 = 0.01, N(0, 1) weights, uniform DAG
    prior); its 25 DAGs give edge marginals 0.94 (0 -> 1), 0.058 (1 -> 0), 1.000 (2 -> 0), 1.000 (2 -> 1), under 0.001 elsewhere."""
    sim = simulate_er(d=3, edges_per_node=1, n_train=100, n_valid=0, seed=6)
    model = LinearGaussian(sim.train)
    return model, ExactPosterior(model)


def docs_script(name: str):
    """The module of the script ``docs/<name>.py`` (docs/ is not a package): the results renderer, the settings pages."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "docs" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses of the module look it up while it executes
    spec.loader.exec_module(module)
    return module


FULL_DISK = Path("/dev/full")
"""A file on which every write fails with the kernel's ``ENOSPC``: the full disk of the disk-full tests."""


@pytest.fixture
def full_disk(monkeypatch):
    """From now on, the temporary file of every write to a name in ``names`` (all: empty) is made, then written on ``/dev/full``."""
    real_open = os.open
    names: list[str] = []

    def open_(path, flags, *args, **kw):
        fd = real_open(path, flags, *args, **kw)
        name = os.fsdecode(path)
        if name.endswith(".tmp") and (not names or any(name.startswith(n + ".") for n in names)):
            os.close(fd)
            return real_open(FULL_DISK, os.O_WRONLY | os.O_CLOEXEC)
        return fd

    monkeypatch.setattr(run_files.os, "open", open_)
    return names


def leftovers(folder: Path) -> list[str]:
    """The temporary files (``*.tmp``) anywhere under ``folder``: a failed write must leave none."""
    return sorted(p.name for p in folder.rglob("*.tmp"))


SMALL_BUDGET = Budget(
    seed=3,
    posterior_samples=40,
    max_parents=0,
    edges_per_node=1.0,
    mcmc_steps=60,
    mcmc_chains=2,
    mcmc_burn_in=0.5,
    mh_theta_step=0.1,
    dibs_steps=10,
    bcd_steps=10,
    vbg_steps=10,
    vbg_rounds=2,
    bootstraps=4,
)
"""A structure baselines' budget small enough for a test (tests/jsp_gfn: the registry's and the collapsed MC3's)."""
