"""Property tests of the loss identities (Lahlou et al. 2023, Definition 7; DESIGN section 6).

Inputs are time-major float64 tensors: ``log_F [T + 1, B]`` (``log Z`` at position 0, ``log R`` at
the sink position ``n_b``), ``log_pf, log_pb [T, B]``, and the mask ``t < n_b``. Entries past the
sink are finite garbage: the masks, not sentinel values, must keep them out.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from conftest import HYPOTHESIS
from gflownet_measure import losses

# Round-off budget for float64 identities: every quantity below is a sum of at most ~4(T+1) <= 28
# terms of magnitude <= 10 (or their squares, <= ~1e5), so re-associating the sums moves the
# result by well under 1e3 * eps * scale; RTOL = 1e-12 leaves a margin of ~10x while still being
# ten orders of magnitude below any O(1) error in an identity.
RTOL = 1e-12

VALUE = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)


class Batch(NamedTuple):
    log_F: torch.Tensor  # [T + 1, B]
    log_pf: torch.Tensor  # [T, B]
    log_pb: torch.Tensor  # [T, B]
    log_Z: torch.Tensor  # []
    log_R: torch.Tensor  # [B]
    length: torch.Tensor  # [B] long: the sink position n_b
    mask: torch.Tensor  # [T, B] bool: t < n_b

    @property
    def T(self) -> int:
        return self.log_pf.shape[0]

    @property
    def B(self) -> int:
        return self.log_pf.shape[1]


@st.composite
def batches(draw, max_T: int = 6, max_B: int = 4) -> Batch:
    """Random variable-length batches with log F[0] = log Z and log F[n_b] = log R_b."""
    T = draw(st.integers(1, max_T))
    B = draw(st.integers(1, max_B))
    length = torch.as_tensor(draw(arrays(np.int64, B, elements=st.integers(1, T))))
    log_F = torch.as_tensor(draw(arrays(np.float64, (T + 1, B), elements=VALUE)))
    log_pf = torch.as_tensor(draw(arrays(np.float64, (T, B), elements=VALUE)))
    log_pb = torch.as_tensor(draw(arrays(np.float64, (T, B), elements=VALUE)))
    log_Z = torch.tensor(draw(VALUE), dtype=torch.float64)
    log_R = torch.as_tensor(draw(arrays(np.float64, B, elements=VALUE)))
    log_F[0] = log_Z
    log_F[length, torch.arange(B)] = log_R
    mask = torch.arange(T)[:, None] < length[None, :]
    return Batch(log_F, log_pf, log_pb, log_Z, log_R, length, mask)


def consistent(b: Batch) -> Batch:
    """The same batch with log F chosen so that every balance residual is zero:
    :math:`\\log F(s_{t+1}) = \\log F(s_t) + \\log P_F - \\log P_B`, and log R = log F at the sink."""
    log_F = torch.cat([b.log_Z.expand(1, b.B), b.log_Z + torch.cumsum(b.log_pf - b.log_pb, 0)])  # [T + 1, B]
    log_R = log_F[b.length, torch.arange(b.B)]
    return b._replace(log_F=log_F, log_R=log_R)


def with_garbage_after_sink(b: Batch, gen: torch.Generator) -> Batch:
    """Replace every entry past the sink (masked) by other finite values."""
    pos = torch.arange(b.T + 1)[:, None]
    after = pos > b.length[None, :]  # [T + 1, B]
    noise = lambda shape: 100 * torch.randn(shape, generator=gen, dtype=torch.float64)  # noqa: E731
    return b._replace(
        log_F=torch.where(after, noise(b.log_F.shape), b.log_F),
        log_pf=torch.where(b.mask, b.log_pf, noise(b.log_pf.shape)),
        log_pb=torch.where(b.mask, b.log_pb, noise(b.log_pb.shape)),
    )


def close(a: torch.Tensor, b: torch.Tensor, scale: float) -> bool:
    return bool(((a - b).abs() <= RTOL * (1 + scale)).all())


# --- DB telescopes to TB ---------------------------------------------------------------------------------


@settings(HYPOTHESIS, max_examples=60)
@given(batches())
def test_db_residuals_sum_to_tb_residual(b):
    db = losses.db_residuals(b.log_F, b.log_pf, b.log_pb)  # [T, B]
    assert db.shape == (b.T, b.B)
    tb = losses.tb_residual(b.log_Z, b.log_pf, b.log_pb, b.log_R, b.mask)  # [B]
    assert tb.shape == (b.B,)
    assert close((db * b.mask).sum(0), tb, scale=40.0 * (b.T + 1))


@settings(HYPOTHESIS, max_examples=60)
@given(batches(), st.integers(0, 2**31 - 1))
def test_tb_and_db_ignore_entries_past_the_sink(b, seed):
    g = with_garbage_after_sink(b, torch.Generator().manual_seed(seed))
    tb = losses.tb_residual(b.log_Z, b.log_pf, b.log_pb, b.log_R, b.mask)
    assert torch.equal(tb, losses.tb_residual(g.log_Z, g.log_pf, g.log_pb, g.log_R, g.mask))
    db, dbg = losses.db_residuals(b.log_F, b.log_pf, b.log_pb), losses.db_residuals(g.log_F, g.log_pf, g.log_pb)
    assert torch.equal(db[b.mask], dbg[b.mask])


def test_tb_residual_hand_example():
    # log Z = 1, one trajectory of 2 steps: (log P_F - log P_B) = (0.5 - 0.25) + (-1 - 0) = -0.75, log R = 0.5
    r = losses.tb_residual(torch.tensor(1.0, dtype=torch.float64), torch.tensor([[0.5], [-1.0]], dtype=torch.float64),
                           torch.tensor([[0.25], [0.0]], dtype=torch.float64), torch.tensor([0.5], dtype=torch.float64),
                           torch.tensor([[True], [True]]))
    assert r.item() == pytest.approx(1.0 - 0.75 - 0.5, abs=1e-15)


# --- SubTB reduces to TB and DB --------------------------------------------------------------------------


@settings(HYPOTHESIS, max_examples=60)
@given(batches())
def test_subtb_residuals_reduce_to_tb_and_db(b):
    r = losses.subtb_residuals(b.log_F, b.log_pf, b.log_pb)  # [T + 1, T + 1, B]
    assert r.shape == (b.T + 1, b.T + 1, b.B)
    scale = 40.0 * (b.T + 1)
    cols = torch.arange(b.B)
    tb = losses.tb_residual(b.log_Z, b.log_pf, b.log_pb, b.log_R, b.mask)
    assert close(r[0, b.length, cols], tb, scale)  # the full trajectory (0, n) is TB
    db = losses.db_residuals(b.log_F, b.log_pf, b.log_pb)
    i = torch.arange(b.T)
    assert close(r[i, i + 1], db, scale)  # pairs (i, i + 1) are DB
    # every sub-trajectory telescopes: delta_ij = sum_{t=i}^{j-1} delta_DB(t)
    for i in range(b.T + 1):
        for j in range(i + 1, b.T + 1):
            assert close(r[i, j], db[i:j].sum(0), scale)


def naive_subtb_loss(b: Batch, lam: float, g) -> float:
    """SubTB(lambda) with explicit loops over trajectories and pairs ``0 <= i < j <= n``."""
    r = losses.subtb_residuals(b.log_F, b.log_pf, b.log_pb)
    per = []
    for k in range(b.B):
        n = int(b.length[k])
        num = den = 0.0
        for i in range(n + 1):
            for j in range(i + 1, n + 1):
                w = lam ** (j - i)
                num += w * float(g(r[i, j, k]))
                den += w
        per.append(num / den)
    return float(np.mean(per))


@settings(HYPOTHESIS, max_examples=60)
@given(batches(), st.floats(0.1, 10.0), st.sampled_from(sorted(losses.PENALTIES)))
def test_subtb_loss_matches_explicit_weighted_average(b, lam, name):
    g = losses.PENALTIES[name]
    got = float(losses.subtb_loss(b.log_F, b.log_pf, b.log_pb, b.length, lam, g))
    want = naive_subtb_loss(b, lam, g)
    assert got == pytest.approx(want, rel=RTOL * 100, abs=RTOL)  # 1e-10: sums of <= 28 weighted squares


@settings(HYPOTHESIS, max_examples=60)
@given(batches())
def test_subtb_loss_at_lambda_zero_is_the_mean_db_term(b):
    """lambda -> 0 leaves the one-step pairs (i, i + 1): per trajectory the mean of g(delta_DB(t)) over t < n (finite, not 0 / 0)."""
    db = losses.square(losses.db_residuals(b.log_F, b.log_pf, b.log_pb))  # [T, B]
    steps = torch.arange(b.T)[:, None] < b.length[None, :]
    want = float(((db * steps).sum(0) / steps.sum(0)).mean())
    assert float(losses.subtb_loss(b.log_F, b.log_pf, b.log_pb, b.length, 0.0)) == pytest.approx(want, rel=RTOL * 100, abs=RTOL)
    assert float(losses.subtb_loss(b.log_F, b.log_pf, b.log_pb, b.length, 1e-300)) == pytest.approx(want, rel=RTOL * 100, abs=RTOL)


@settings(HYPOTHESIS, max_examples=60)
@given(batches(), st.integers(0, 2**31 - 1))
def test_subtb_loss_ignores_entries_past_the_sink(b, seed):
    g = with_garbage_after_sink(b, torch.Generator().manual_seed(seed))
    a = losses.subtb_loss(b.log_F, b.log_pf, b.log_pb, b.length, 0.9)
    assert torch.equal(a, losses.subtb_loss(g.log_F, g.log_pf, g.log_pb, g.length, 0.9))


@settings(HYPOTHESIS, max_examples=60)
@given(batches())
def test_subtb_loss_with_full_trajectory_weight_is_tb(b):
    """lambda -> infinity puts all weight on the pair (0, n): SubTB -> mean g(delta_TB).

    Per trajectory the other pairs carry relative weight lambda^(j-i-n) <= 1/lambda, so
    |SubTB - g(TB)| <= sum_{other pairs} lambda^(j-i-n) |g(delta_ij) - g(delta_TB)|, the bound asserted.
    """
    lam = 1e12
    g = losses.square
    r = losses.subtb_residuals(b.log_F, b.log_pf, b.log_pb)
    tb = losses.tb_residual(b.log_Z, b.log_pf, b.log_pb, b.log_R, b.mask)
    bound = 0.0
    for k in range(b.B):
        n = int(b.length[k])
        for i in range(n + 1):
            for j in range(i + 1, n + 1):
                if (i, j) != (0, n):
                    bound += lam ** (j - i - n) * abs(float(g(r[i, j, k]) - g(tb[k]))) / b.B
    got = float(losses.subtb_loss(b.log_F, b.log_pf, b.log_pb, b.length, lam, g))
    want = float(g(tb).mean())
    assert abs(got - want) <= bound + RTOL * (1 + want)


@settings(HYPOTHESIS, max_examples=60)
@given(batches())
def test_subtb_loss_with_transition_weight_is_db(b):
    """lambda -> 0 puts all weight on the n pairs (i, i + 1): SubTB -> mean over trajectories of the mean g(delta_DB)."""
    lam = 1e-12
    g = losses.square
    db = losses.db_residuals(b.log_F, b.log_pf, b.log_pb)
    per_db = (g(db) * b.mask).sum(0) / b.length  # [B]
    r = losses.subtb_residuals(b.log_F, b.log_pf, b.log_pb)
    bound = 0.0
    for k in range(b.B):
        n = int(b.length[k])
        for i in range(n + 1):
            for j in range(i + 2, n + 1):
                bound += lam ** (j - i - 1) * abs(float(g(r[i, j, k]) - per_db[k])) / n / b.B
    got = float(losses.subtb_loss(b.log_F, b.log_pf, b.log_pb, b.length, lam, g))
    want = float(per_db.mean())
    assert abs(got - want) <= bound + RTOL * (1 + want)


@settings(HYPOTHESIS, max_examples=60)
@given(batches(), st.floats(0.5, 2.0), st.data())
def test_subtb_loss_is_zero_iff_residuals_are_zero(b, lam, data):
    c = consistent(b)
    # at a consistent flow every residual vanishes (float64 round-off of a cumsum of <= 6 terms)
    r = losses.subtb_residuals(c.log_F, c.log_pf, c.log_pb)
    valid = (torch.arange(b.T + 1)[:, None, None] < torch.arange(b.T + 1)[None, :, None]) & (torch.arange(b.T + 1)[None, :, None] <= b.length)
    assert r[valid].abs().max() <= RTOL * 40 * (b.T + 1)
    assert losses.tb_residual(c.log_Z, c.log_pf, c.log_pb, c.log_R, c.mask).abs().max() <= RTOL * 40 * (b.T + 1)
    zero = float(losses.subtb_loss(c.log_F, c.log_pf, c.log_pb, c.length, lam))
    assert zero <= 1e-18  # squares of residuals <= ~3e-10
    # move the flow of one valid position of one trajectory: some residual becomes delta != 0
    k = data.draw(st.integers(0, b.B - 1))
    t = data.draw(st.integers(0, int(b.length[k])))
    delta = data.draw(st.floats(0.1, 1.0))
    log_F = c.log_F.clone()
    log_F[t, k] += delta
    moved = float(losses.subtb_loss(log_F, c.log_pf, c.log_pb, c.length, lam))
    # with lambda in [0.5, 2] and n <= 6 every pair carries >= 1.5e-3 of its trajectory's weight,
    # so the loss is >= 1.5e-3 * delta^2 / B >= 3e-6
    assert moved >= 1.5e-3 * delta**2 / b.B


# --- Penalties -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(losses.PENALTIES))
def test_penalty_vanishes_with_zero_slope_at_zero(name):
    g = losses.PENALTIES[name]
    r = torch.zeros(3, dtype=torch.float64, requires_grad=True)
    out = g(r)
    assert torch.equal(out.detach(), torch.zeros(3, dtype=torch.float64))  # g(0) = 0
    (grad,) = torch.autograd.grad(out.sum(), r)
    assert torch.equal(grad, torch.zeros(3, dtype=torch.float64))  # g'(0) = 0
    # autograd reports 0 at kinks (d|r|/dr at 0), so also check the one-sided difference quotients:
    # |g(+-h) / h| -> 0; for a C^2 penalty it is O(h) = 1e-6 here, for a kink |r| it would stay O(1)
    h = torch.tensor([1e-6, -1e-6], dtype=torch.float64)
    assert (g(h) / h).abs().max() <= 1e-4


@pytest.mark.parametrize("name", sorted(losses.PENALTIES))
@settings(HYPOTHESIS, max_examples=60)
@given(r=arrays(np.float64, st.integers(1, 16), elements=st.floats(-1e3, 1e3, allow_nan=False)))
def test_penalty_is_nonnegative_and_positive_off_zero(name, r):
    g = losses.PENALTIES[name]
    x = torch.as_tensor(r)
    out = g(x)
    assert out.shape == x.shape
    assert (out >= 0).all()
    big = x.abs() >= 1e-100  # below that a square underflows to 0 in float64
    assert (out[big] > 0).all()
    # g is even and non-decreasing in |r| (a penalty on the size of a residual)
    assert torch.allclose(g(-x), out, rtol=0, atol=0)
    s = x.abs().sort().values
    assert (g(s)[1:] >= g(s)[:-1]).all()


def test_penalty_hand_values():
    r = torch.tensor([0.5, -3.0], dtype=torch.float64)
    assert losses.square(r).tolist() == [0.25, 9.0]
    assert losses.huber(r).tolist() == [0.125, 2.5]  # r^2/2 inside |r| <= 1, |r| - 1/2 outside
    assert losses.huber(r, delta=4.0).tolist() == [0.125, 4.5]


# --- Flow matching and reward matching -------------------------------------------------------------------


def test_fm_residual_hand_example():
    ln = math.log
    # state 0: in-flows 1 + 2 (third parent slot absent, holding a finite garbage value), out-flows 0.5 + 2.5
    # state 1: in-flow 3, out-flows 1 + 1 + 2 (the sink included)
    log_in = torch.tensor([[ln(1.0), ln(2.0), 7.0], [ln(3.0), -5.0, 9.0]], dtype=torch.float64)
    in_mask = torch.tensor([[True, True, False], [True, False, False]])
    log_out = torch.tensor([[ln(0.5), ln(2.5), 3.0], [ln(1.0), ln(1.0), ln(2.0)]], dtype=torch.float64)
    out_mask = torch.tensor([[True, True, False], [True, True, True]])
    r = losses.fm_residual(log_in, in_mask, log_out, out_mask)
    assert r.shape == (2,)
    assert r[0].item() == pytest.approx(0.0, abs=1e-15)
    assert r[1].item() == pytest.approx(ln(3.0 / 4.0), abs=1e-15)


def test_fm_residual_is_a_difference_of_log_sums():
    gen = torch.Generator().manual_seed(0)  # random example; exact up to float64 round-off
    log_in = torch.randn(5, 4, generator=gen, dtype=torch.float64)
    log_out = torch.randn(5, 3, generator=gen, dtype=torch.float64)
    in_mask = torch.rand(5, 4, generator=gen) < 0.7
    out_mask = torch.rand(5, 3, generator=gen) < 0.7
    in_mask[:, 0] = out_mask[:, 0] = True
    want = (log_in.exp() * in_mask).sum(1).log() - (log_out.exp() * out_mask).sum(1).log()
    assert torch.allclose(losses.fm_residual(log_in, in_mask, log_out, out_mask), want, rtol=0, atol=1e-13)


def test_rm_residual_hand_example():
    r = losses.rm_residual(torch.tensor([math.log(2.0), 0.0], dtype=torch.float64), torch.tensor([math.log(3.0), 0.0], dtype=torch.float64))
    assert r.tolist() == pytest.approx([math.log(2.0 / 3.0), 0.0], abs=1e-15)


@given(st.integers(0, 2**31 - 1))
@HYPOTHESIS
def test_undirected_subtb_is_the_difference_of_two_tb_residuals(seed):
    """x <- s -> s' -> x': the residual equals TB(s0 ~> s -> x) - TB(s0 ~> s -> s' -> x') for any log Z and any shared prefix,
    when P_B(s | x) = P_B(s' | x') = 1 (so log Z and the prefix cancel)."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    prefix_pf, prefix_pb, log_Z = r(3), r(3), r(())
    pf_stop, pf_edge, pb_edge, pf_stop2, log_R, log_R2 = r(6).unbind()
    one = torch.ones(1, dtype=torch.bool)
    # tau: s0 -> ... -> s -> x (the step into x has P_B = 1, the step into the sink none); tau': ... -> s -> s' -> x'
    tau = losses.tb_residual(log_Z, torch.cat([prefix_pf, pf_stop[None]])[:, None], torch.cat([prefix_pb, torch.zeros(1, dtype=torch.float64)])[:, None], log_R[None], one.expand(4, 1))
    tau2 = losses.tb_residual(log_Z, torch.cat([prefix_pf, pf_edge[None], pf_stop2[None]])[:, None], torch.cat([prefix_pb, pb_edge[None], torch.zeros(1, dtype=torch.float64)])[:, None], log_R2[None], one.expand(5, 1))
    got = losses.undirected_subtb_residual(log_R, pf_stop, pf_edge, pb_edge, log_R2, pf_stop2)
    torch.testing.assert_close(got, (tau - tau2)[0])


def test_length2_penalty_guards_the_empty_graph():
    """pen = sum of squared gradients / (S * max(k, 1)): finite with no active parameter, exact elsewhere."""
    grad = torch.zeros(4, 2, 3, 3)
    grad[:, 1, 0, 1] = 2.0  # graph 1 has one active weight, gradient 2 in each of 4 samples
    pen = losses.length2_penalty(grad, torch.tensor([0, 1]))
    torch.testing.assert_close(pen, torch.tensor([0.0, 4.0]))
