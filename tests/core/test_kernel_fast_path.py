"""The fast path of a kernel against its materialised one (:mod:`gflownet_measure.kernels`).

On every shipped environment whose kernels implement the fast path (:meth:`~gflownet_measure.kernels.Kernel.outline`,
``child``, ``atom_of``), and on the DAG space at d = 3 and d = 20: the same masks, masses and sink flags; the same child
state in every present slot; the same slot for every candidate state; then, through the policies, the same log-densities
(to 1e-6, float64 policies) and the same draws under one seed, for a density's draws, walker steps and final samples.
The materialised path is :class:`~gflownet_measure.kernels.Materialised`: the kernel with its fast path off.
"""
from __future__ import annotations

import contextlib
import functools

import pytest
import torch

from gflownet_measure.environments import ENVIRONMENTS, dag_params
from gflownet_measure.kernels import Kernel, Materialised
from gflownet_measure.rollout import sample_forward
from gflownet_measure.walkers import Walkers

pytestmark = pytest.mark.usefixtures("one_thread")

SEED = 7
N_STATES = 64  # states along 12 trajectories, at most
N_SLOTS = 48  # slots whose candidate states are located, at most (each materialised look-up compares [N_STATES, K, D] values)


def has_fast_path(kernel: Kernel) -> bool:
    return type(kernel).outline is not Kernel.outline


def _shipped(name: str):
    spec = ENVIRONMENTS[name]
    graph = spec.make_graph(spec.config())
    return graph, *spec.make_policies(graph, spec.config())


def _dag(d: int, model: str = "lingauss-diag"):
    cfg = dag_params.DagParamsConfig(d=d, model=model, edges_per_node=2.0, n_data=20, n_valid=0)
    problem = dag_params.make_problem(cfg)
    graph = dag_params.make_graph(cfg, problem)
    return graph, *dag_params.make_policies(graph, cfg, problem)


def _kappas(graph) -> tuple[Kernel, Kernel]:
    return graph.kappa, graph.kappa_b


FAST = [name for name in ENVIRONMENTS if any(map(has_fast_path, _kappas(_shipped(name)[0])))]
"""The shipped environments (default settings) with a fast kernel: each is tested here."""

SPACES = {
    **{name: functools.partial(_shipped, name) for name in FAST},
    "dag-params d=3 mlp": functools.partial(_dag, 3, "mlp"),
    "dag-params d=20": functools.partial(_dag, 20),
}


SLOW = {"dag-params d=20"}
"""Spaces whose tests take seconds each (d = 20: about 80 s in all, 77 s of it the slot test, measured 2026-12-07 on an idle 2-core machine): marked ``slow``."""


@pytest.fixture(scope="module", params=[pytest.param(n, marks=pytest.mark.slow) if n in SLOW else n for n in sorted(SPACES)])
def space(request):
    graph, pf, pb = SPACES[request.param]()
    torch.manual_seed(0)
    traj = sample_forward(graph, pf, 12, epsilon=0.5)  # states all along the trajectories, terminal ones included
    states = traj.states[:-1][traj.mask].double()  # float64 states and policies: float64 log-densities
    keep = torch.randperm(len(states), generator=torch.Generator().manual_seed(0))[:N_STATES]
    return graph, pf.double(), pb.double(), states[keep]


def test_the_dag_space_is_found_fast():
    assert "dag-params" in FAST and not has_fast_path(Materialised(_shipped("dag-params")[0].kappa))


@contextlib.contextmanager
def materialised(*policies):
    """``policies`` on their kernels' materialised path inside the block."""
    kernels = [p.kernel for p in policies]
    for p in policies:
        p.kernel = Materialised(p.kernel)
    try:
        yield
    finally:
        for p, k in zip(policies, kernels):
            p.kernel = k


def _kernels(graph, states):
    """Each kernel with a fast path and the states it is defined at (kappa_b is the zero measure at s0)."""
    return [(k, s) for k, s in ((graph.kappa, states), (graph.kappa_b, states[~graph.is_source(states)])) if has_fast_path(k)]


def test_outline_has_the_materialised_masks_masses_sink_flags_and_pieces(space):
    graph, _, _, states = space
    for kernel, s in _kernels(graph, states):
        full, fast = kernel(s), kernel.outline(s)
        for field in ("mask", "log_mass", "sink"):
            assert torch.equal(getattr(full.atoms, field), getattr(fast.atoms, field)), field
        assert len(full.pieces) == len(fast.pieces)
        for a, b in zip(full.pieces, fast.pieces):
            assert a.chart is b.chart and torch.equal(a.mask, b.mask) and torch.equal(a.context, b.context)
        assert torch.equal(fast.atoms.x, full.atoms.x)  # the checks' view: materialised on demand


def test_every_present_child_and_the_slot_of_each_candidate_match(space):
    """``child(s, k)`` is the materialised state of every present slot; ``locate`` names the same slot (or none) for the
    state of a slot, present or not (every slot, or ``N_SLOTS`` of them and the last), for the states themselves, for
    other states' children (rolled by one row) and with the sink flag flipped."""
    graph, _, _, states = space
    for kernel, s in _kernels(graph, states):
        full, fast = kernel(s), kernel.outline(s)
        K = full.atoms.count
        for k in range(K):
            slot = torch.full((len(s),), k)
            present = full.atoms.mask[:, k]
            assert torch.equal(fast.atoms.take(slot)[present], full.atoms.x[present, k])
        slots = torch.randperm(K - 1, generator=torch.Generator().manual_seed(1))[:N_SLOTS].tolist() + [K - 1]
        for k in slots:
            x, sink = full.atoms.x[:, k], full.atoms.sink[:, k]
            for cx, cs in ((x, sink), (x.roll(1, 0), sink), (s, sink), (x, ~sink)):
                assert torch.equal(fast.atoms.locate(cx, cs), full.atoms.locate(cx, cs))


def test_log_densities_agree_to_1e_6(space):
    """:math:`\\log P_F` and :math:`\\log P_B` at drawn children, both paths, float64 policies; the uniform :math:`P_B` of the DAG
    space is :math:`-\\log |E(G')|` at every intermediate state."""
    graph, pf, pb, states = space
    torch.manual_seed(SEED)
    x, sink = pf(states).sample(epsilon=0.3)
    fast_pf = pf(states).log_prob(x, sink)
    into = ~sink
    fast_pb = pb(x[into]).log_prob(states[into], torch.zeros(int(into.sum()), dtype=torch.bool))
    with materialised(pf, pb):
        full_pf = pf(states).log_prob(x, sink)
        full_pb = pb(x[into]).log_prob(states[into], torch.zeros(int(into.sum()), dtype=torch.bool))
    assert fast_pf.dtype == fast_pb.dtype == torch.float64 and torch.isfinite(fast_pf).all() and torch.isfinite(fast_pb).all()
    torch.testing.assert_close(fast_pf, full_pf, rtol=0, atol=1e-6)
    torch.testing.assert_close(fast_pb, full_pb, rtol=0, atol=1e-6)
    if isinstance(graph.kappa_b, dag_params.space.DagKernel):
        adj, _, stopped = dag_params.states.split(x[into], graph.kappa_b.d)
        edges = adj.flatten(1).sum(1).double()
        torch.testing.assert_close(fast_pb[~stopped], -torch.log(edges[~stopped]), rtol=0, atol=1e-12)
        assert bool((fast_pb[stopped] == 0).all())  # (G, #) is the one parent of (G, theta)


@pytest.mark.parametrize("epsilon", [0.0, 0.5])
def test_draws_walker_steps_and_final_samples_agree_under_one_seed(space, epsilon):
    graph, pf, _, states = space

    def walk():
        torch.manual_seed(SEED)
        draw = pf(states).sample(epsilon)
        walkers = Walkers(graph, 6)
        steps = [walkers.step(pf, epsilon) for _ in range(graph.max_length)]
        traj = sample_forward(graph, pf, 10, epsilon=epsilon)
        return draw, steps, traj

    fast = walk()
    with materialised(pf):
        full = walk()
    (x, sink), (fx, fsink) = fast[0], full[0]
    assert torch.equal(x, fx) and torch.equal(sink, fsink)
    for a, b in zip(fast[1], full[1]):
        assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert torch.equal(fast[2].states, full[2].states) and torch.equal(fast[2].sink, full[2].sink)
    assert torch.equal(fast[2].log_R, full[2].log_R)
