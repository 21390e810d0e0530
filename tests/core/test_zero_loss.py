"""Zero loss at exact flows, on random pointed DAGs (Lahlou et al. 2023, Theorem 2, discrete case).

For a uniform backward policy P_B the flows :math:`F(s) = R(s)1[s \\text{ terminable}] + \\sum_c F(c) P_B(s|c)`
(``exact.exact_flows``) and the forward policy

.. math:: P_F(c|s) = F(c) P_B(s|c) / F(s), \\qquad P_F(\\bot|s) = R(s) / F(s)

satisfy every balance condition, so FM, DB, TB and SubTB vanish on any sampled trajectory, and
the terminating distribution is :math:`R/Z` with :math:`Z = F(s_0)`. The tabular P_F stores the
unnormalised logits :math:`\\log F(s \\to c) = \\log F(c) + \\log P_B(s|c)` (and :math:`\\log R(s)` at the
sink atom): log edge flows for FM, and the same P_F after the softmax for the other objectives.

Everything runs with float64 as torch's default dtype, so the library's own buffers (the flow
layout of ``GFlowNet.flows``, the in-flows of FM, the ``log Z`` parameter) are float64 as well;
see ``test_float64_gflownet_under_float32_default`` for what happens otherwise.
"""
from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from torch import nn

from conftest import HYPOTHESIS, DagSpec, build_graph, dag_specs, default_dtype, random_dag_spec
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.exact import TabularPolicy, enumerate_states, exact_flows, index_of, terminating_distribution
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet, objective_names
from gflownet_measure.rollout import sample_forward

# Zero means float64 round-off: each residual adds <= 4 log-quantities of magnitude <= ~10, each
# from a log / log-softmax / <= 8x8 linear solve with relative error <= ~1e-14, so |residual| is
# <= ~1e-12 and its square <= ~1e-24. ZERO = 1e-20 (residual RMS 1e-10) keeps a 100x margin and is
# six orders of magnitude below what float32 storage of any log-flow (error ~1e-7) would give.
ZERO = 1e-20
LAM = 0.9  # SubTB lambda (any lambda > 0 gives zero at exact flows)


class LookupFlow(nn.Module):
    """:math:`\\log F(s)` w.r.t. counting measure nu, read from a table of enumerated states."""

    def __init__(self, states: torch.Tensor, log_F: torch.Tensor):
        super().__init__()
        self.register_buffer("states", states)
        self.register_buffer("table", log_F)

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        i = index_of(self.states, s)
        assert (i >= 0).all(), "log_F called on a state outside the table"
        return self.table[i]


class Exact:
    """Exact flows and policies of a DAG for the uniform P_B."""

    def __init__(self, spec: DagSpec):
        self.spec = spec
        self.graph = g = build_graph(spec)
        self.states = enumerate_states(g)  # [S, 1]
        self.pb = UniformPolicy(g.kappa_b)
        self.log_F, self.log_R = exact_flows(g, self.states, self.pb)  # [S], [S]
        self.s0 = int(index_of(self.states, g.source[None])[0])
        atoms = g.kappa(self.states).atoms
        S, K = atoms.mask.shape
        self.atoms = atoms
        self.child = atoms.mask & ~atoms.sink  # [S, K]
        self.sink_slot = atoms.mask & atoms.sink  # [S, K]
        # log F(s -> c) = log F(c) + log P_B(s | c), one batched P_B call over all edges
        rows = torch.arange(S)[:, None].expand(S, K)[self.child]
        c = atoms.x[self.child]  # [E, 1]
        log_pb = self.pb(c).log_prob(self.states[rows], torch.zeros(len(rows), dtype=torch.bool))
        table = torch.zeros(S, K, dtype=torch.float64)  # absent slots are masked by the policy; 0 is a placeholder
        table[self.child] = self.log_F[index_of(self.states, c)] + log_pb
        table[self.sink_slot] = self.log_R[self.sink_slot.any(1)]
        self.edge_table = table  # unnormalised: log edge flows
        self.prob_table = torch.where(atoms.mask, table - self.log_F[:, None], table)  # log P_F(.|s)

    def gfn(self, table: torch.Tensor | None = None, log_F: torch.Tensor | None = None, log_Z: float | None = None) -> GFlowNet:
        pf = TabularPolicy(self.graph.kappa, self.states, (self.edge_table if table is None else table).clone())
        flow = LookupFlow(self.states, self.log_F if log_F is None else log_F)
        return GFlowNet(pf, self.pb, flow, float(self.log_F[self.s0]) if log_Z is None else log_Z)

    def losses(self, gfn: GFlowNet, traj) -> dict[str, float]:
        with torch.no_grad():
            return {name: float(OBJECTIVES[name](gfn, Batch(self.graph, traj), **OBJECTIVES[name].options({"subtb_lambda": LAM}))) for name in BALANCE}

    def sample(self, n: int, seed: int):
        torch.manual_seed(seed)
        return sample_forward(self.graph, self.gfn().pf, n)


BALANCE = objective_names(divergence=False)  # every registered balance objective on trajectories: each must vanish at a solution


def test_the_balance_objectives_include_the_four_of_definition_7():
    assert {"fm", "db", "tb", "subtb"} <= set(BALANCE)


@settings(HYPOTHESIS, max_examples=20)
@given(dag_specs())
def test_exact_flows_solve_the_balance_equations(spec):
    with default_dtype(torch.float64):
        e = Exact(spec)
        F = e.log_F.exp()
        # Z = F(s0) is the total reward: every backward walk from a terminable state ends at s0
        R = torch.where(torch.tensor(spec.terminable), e.log_R.exp(), torch.zeros_like(e.log_R))
        assert F[e.s0].item() == pytest.approx(R.sum().item(), rel=1e-12)
        # the out-flows of every state (edge flows and the sink) sum to its flow: P_F is normalised
        lse = torch.where(e.atoms.mask, e.prob_table, torch.full_like(e.prob_table, -math.inf)).logsumexp(1)
        assert lse.abs().max() <= 1e-12


@settings(HYPOTHESIS, max_examples=15)
@given(dag_specs())
def test_losses_vanish_at_exact_flows_and_not_after_a_perturbation(spec):
    with default_dtype(torch.float64):
        e = Exact(spec)
        traj = e.sample(64, seed=0)
        assert traj.states.dtype == torch.float64

        exact = e.losses(e.gfn(), traj)
        assert all(v <= ZERO for v in exact.values()), exact
        # the normalised table gives the same P_F: zero for every objective but FM, whose logits are edge flows
        normalised = e.losses(e.gfn(table=e.prob_table), traj)
        assert all(normalised[k] <= ZERO for k in ("db", "tb", "subtb", "vargrad")), normalised

        N = e.graph.max_length
        # log Z moved by 0.5: every TB residual is 0.5, DB's first residual is 0.5 (<= N transitions per trajectory);
        # FM never sees log Z
        moved_Z = e.losses(e.gfn(log_Z=float(e.log_F[e.s0]) + 0.5), traj)
        assert moved_Z["tb"] == pytest.approx(0.25, abs=1e-12)
        assert moved_Z["db"] >= 0.25 / N * (1 - 1e-12)
        assert moved_Z["subtb"] > 1e-6
        assert moved_Z["fm"] <= ZERO and moved_Z["vargrad"] <= ZERO  # VarGrad's log Z is the batch mean of w

        # log F moved by 0.5 away from s0: DB and SubTB see it at the first step, TB and FM never read log F
        shifted = torch.where(torch.arange(len(e.log_F)) == e.s0, e.log_F, e.log_F + 0.5)
        moved_F = e.losses(e.gfn(log_F=shifted), traj)
        assert moved_F["db"] >= 0.25 / N * (1 - 1e-12) * (traj.length >= 2).double().mean().item()
        if (traj.length >= 2).any():  # pairs (0, j) and (i, n) with inner s_i, s_j see the shift
            assert moved_F["subtb"] > 1e-6
        assert moved_F["tb"] <= ZERO and moved_F["fm"] <= ZERO and moved_F["vargrad"] <= ZERO

        # P_F(1 | s0) moved (s0 has >= 2 components, so the softmax cannot absorb the change)
        k = int(((e.atoms.x[e.s0, :, 0] == 1) & e.child[e.s0]).nonzero()[0])
        table = e.edge_table.clone()
        table[e.s0, k] += 0.5
        p = math.exp(float(e.prob_table[e.s0, k]))
        p2 = p * math.exp(0.5) / (1 - p + p * math.exp(0.5))
        m = min(abs(math.log(p2 / p)), abs(math.log((1 - p2) / (1 - p))))  # smallest first-step TB residual
        moved_pf = e.losses(e.gfn(table=table), traj)
        assert moved_pf["tb"] >= m**2 * (1 - 1e-9)
        assert moved_pf["db"] >= m**2 / N * (1 - 1e-9)
        assert moved_pf["subtb"] > 1e-6 * m**2
        took_k = (traj.states[1, :, 0] == 1) & ~traj.sink[1]  # the first step residual is log(p2/p) on these, log((1-p2)/(1-p)) on the rest
        if 0 < int(took_k.sum()) < len(took_k):  # w differs between the two groups: its variance is positive
            assert moved_pf["vargrad"] > 1e-6 * m**2

        # every sink logit moved by 0.5: each reward-matching residual is 0.5
        table = e.edge_table + 0.5 * e.sink_slot
        assert e.losses(e.gfn(table=table), traj)["fm"] >= 0.25 * (1 - 1e-12)


@settings(HYPOTHESIS, max_examples=20)
@given(dag_specs())
def test_exact_forward_policy_terminates_at_R_over_Z(spec):
    with default_dtype(torch.float64):
        e = Exact(spec)
        p_T = terminating_distribution(e.graph, e.gfn().pf, e.states)  # [S]
        term = torch.tensor(spec.terminable)
        want = torch.where(term, (e.log_R - e.log_F[e.s0]).exp(), torch.zeros_like(e.log_R))
        # float64 propagation of <= 8 steps of an 8x8 stochastic matrix: round-off far below 1e-12
        assert torch.allclose(p_T, want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampling_agrees_with_the_terminating_distribution(seed):
    """Total variation between sampled terminal states and R/Z.

    With ``K`` terminable states and ``n`` samples, E[TV] <= sum_x sqrt(p_x(1-p_x)/n) / 2 <= sqrt(K/n) / 2,
    and TV changes by at most 1/n when one sample changes, so McDiarmid's inequality gives
    P(TV >= sqrt(K/n)/2 + t) <= exp(-2 n t^2). With t = sqrt(log(1e6) / (2n)) a correct sampler
    fails this seeded test with probability <= 1e-6.
    """
    spec = random_dag_spec(seed, min_nodes=5, max_nodes=8)
    n = 20_000
    with default_dtype(torch.float64):
        e = Exact(spec)
        traj = e.sample(n, seed=seed)
        i = index_of(e.states, traj.terminal)
        assert (i >= 0).all()
        term = torch.tensor(spec.terminable)
        assert term[i].all(), "a trajectory stopped at a state without the sink atom"
        freq = torch.bincount(i, minlength=len(e.states)).double() / n
        p = torch.where(term, (e.log_R - e.log_F[e.s0]).exp(), torch.zeros_like(e.log_R))
        tv = 0.5 * (freq - p).abs().sum().item()
        K = int(term.sum())
        bound = math.sqrt(K / n) / 2 + math.sqrt(math.log(1e6) / (2 * n))
        assert tv <= bound, f"TV {tv:.4f} > {bound:.4f}"
        # and the sampled log R are the terminal states' rewards
        assert torch.equal(traj.log_R, e.log_R[i])


@pytest.mark.parametrize("name", BALANCE)
def test_float64_gflownet_under_float32_default(name):
    """A GFlowNet converted with ``.double()`` (float64 graph, flows and table; torch's default dtype left at
    float32, as in training code) should give float64 losses that vanish at exact flows."""
    spec = random_dag_spec(0, min_nodes=6, max_nodes=8)
    assert torch.get_default_dtype() == torch.float32
    e = Exact(spec)  # float64 graph, flows and table, built explicitly
    gfn = e.gfn().double()
    with torch.no_grad():  # GFlowNet(log_Z=float) stores log Z in the default dtype; restore its float64 value
        gfn.log_Z.copy_(e.log_F[e.s0])
    torch.manual_seed(0)
    traj = sample_forward(e.graph, gfn.pf, 64)
    with torch.no_grad():
        loss = OBJECTIVES[name](gfn, Batch(e.graph, traj), **OBJECTIVES[name].options({"subtb_lambda": LAM}))
    assert loss.dtype == torch.float64
    assert float(loss) <= ZERO
