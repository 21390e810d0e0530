"""Issue 64 (A): the support row draws enough moves from every kind of state to see a move that overshoots nu by 5%.

Each broken space below has one kind of state met once among the states the checks draw (``s0``, an inner atom of a
hybrid space, a terminal atom next to the sink) whose continuous move leaves the support of nu on a fraction of its
chart box: 1/21 of it for a move 5% too long, 1/4 for one 4/3 too long. With 4 random moves per piece at that state the
support row missed it with probability (20/21)^4 = 0.82 and (3/4)^4 = 0.32 (it passed at 3 and 2 of 5 seeds); with
``MOVES_PER_KIND`` = 256 moves per kind the miss probability is (20/21)^256 = 3.8e-6 per seed. The row must FAIL at
every seed below, and pass on the same spaces built right. ``n = 64`` random states per piece of nu, as in
tests/core/test_broken_spaces.py.
"""

from __future__ import annotations

import math

import pytest
import torch

from gflownet_measure.charts import AffineChart, Chart, PolarChart
from gflownet_measure.checks import check_graph, check_support
from gflownet_measure.checks.support import MOVES_PER_KIND, moves_per_state, state_kinds
from gflownet_measure.graph import PointedGraph
from gflownet_measure.kernels import Kernel, atoms_measure
from gflownet_measure.measures import Box, Piece, charted, counting, dirac, sum_measures

pytestmark = pytest.mark.usefixtures("one_thread")

N = 64
SEEDS = (0, 1, 2, 3, 4)
SUPPORT = "support kappa <-> kappa_b"
OVERSHOOTS = (1.05, 4 / 3)  # a move 5% and a third too long


def unit_chart(scale: float = 1.0, stage: float = 1.0) -> AffineChart:
    """u -> [stage, scale * u], u in [0, 1]."""
    return AffineChart(Box((0.0,), (1.0,)), slots=(1,), scale=scale, fixed={0: stage})


# --- a segment: s0 -> [1, y], y in [0, 1] -> sink; the move from s0 overshoots ---------------------------------------


class SegmentForward(Kernel):
    def __init__(self, scale: float = 1.0):
        self.chart = unit_chart(scale)

    def __call__(self, s):
        done = s[:, :1] == 1
        return atoms_measure(s.new_zeros(len(s), 1, 2), done, torch.ones_like(done), (Piece(self.chart, s, ~done[:, 0]),))


class SegmentBackward(Kernel):
    def __call__(self, s):
        return atoms_measure(s.new_zeros(len(s), 1, 2), s[:, :1] == 1)


def segment(scale: float = 1.0) -> PointedGraph:
    """The README's one-step space, its move from s0 ``y = scale * u`` (nu holds y in [0, 1])."""
    seg = charted(unit_chart(), state_dim=2)
    return PointedGraph(
        name=f"segment, move from s0 x{scale:g}",
        source=torch.zeros(2),
        kappa=SegmentForward(scale),
        kappa_b=SegmentBackward(),
        nu=sum_measures(counting(torch.zeros(1, 2)), seg),
        terminal=seg,
        log_reward=lambda x: torch.zeros(len(x), dtype=x.dtype),
        max_length=2,
        encode=lambda s: s,
    )


# --- a quarter disc: s0 -> the quarter disc of radius rho -> sink; the radius overshoots --------------------------------

RHO = 0.5


class DiscForward(Kernel):
    def __init__(self, scale: float = 1.0):
        self.chart = PolarChart(RHO * scale, slots=(1, 2), fixed={0: 1.0})

    def __call__(self, s):
        done = s[:, :1] == 1
        return atoms_measure(s.new_zeros(len(s), 1, 3), done, torch.ones_like(done), (Piece(self.chart, s, ~done[:, 0]),))


class DiscBackward(Kernel):
    def __call__(self, s):
        return atoms_measure(s.new_zeros(len(s), 1, 3), s[:, :1] == 1)


def quarter_disc(scale: float = 1.0) -> PointedGraph:
    """One move from s0 = [0, 0, 0] onto the quarter disc {[1, x, y]: |(x, y)| <= rho}, of radius ``scale * rho``."""
    disc = charted(PolarChart(RHO, slots=(1, 2), fixed={0: 1.0}), state_dim=3)
    return PointedGraph(
        name=f"quarter disc, radius x{scale:g}",
        source=torch.zeros(3),
        kappa=DiscForward(scale),
        kappa_b=DiscBackward(),
        nu=sum_measures(dirac(torch.zeros(3)), disc),
        terminal=disc,
        log_reward=lambda x: torch.zeros(len(x), dtype=x.dtype),
        max_length=2,
        encode=lambda s: s,
    )


# --- a hybrid space: s0 -> (k, #) -> (k, y) -> sink, K = 2; category 1's move (an inner atom's) overshoots -----------

K = 2


class HybridForward(Kernel):
    def __init__(self, scale: float = 1.0):
        self.charts = [AffineChart(Box((0.0,), (1.0,)), slots=(2,), scale=scale if k == 1 else 1.0, fixed={0: 2.0}) for k in range(K)]

    def __call__(self, s):
        B, stage = len(s), s[:, 0].round().long()
        x = torch.zeros(B, K + 1, 3, dtype=s.dtype)
        x[:, :K, 0] = 1.0
        x[:, :K, 1] = torch.arange(K, dtype=s.dtype)
        mask = torch.cat([(stage == 0)[:, None].expand(B, K), (stage == 2)[:, None]], 1)
        sink = torch.zeros_like(mask)
        sink[:, K] = True
        pieces = tuple(Piece(c, s, (stage == 1) & (s[:, 1] == k)) for k, c in enumerate(self.charts))
        return atoms_measure(x, mask, sink, pieces)


class HybridBackward(Kernel):
    def __call__(self, s):
        stage = s[:, 0].round().long()
        parent = torch.zeros_like(s)
        parent[:, 0] = (stage - 1).clamp(min=0).to(s.dtype)
        parent[:, 1] = torch.where(stage == 2, s[:, 1], torch.zeros_like(s[:, 1]))
        return atoms_measure(parent[:, None], (stage > 0)[:, None])


def hybrid(scale: float = 1.0) -> PointedGraph:
    """The tutorial's category x segment; the leaf move of category 1, from the atom [1, 1, 0], is ``y = scale * u``."""
    atoms = torch.tensor([[0.0, 0.0, 0.0]] + [[1.0, float(k), 0.0] for k in range(K)])
    leaves = sum_measures(*(charted(AffineChart(Box((0.0,), (1.0,)), slots=(2,), fixed={0: 2.0, 1: float(k)}), state_dim=3) for k in range(K)))
    return PointedGraph(
        name=f"hybrid, category 1's leaf move x{scale:g}",
        source=torch.zeros(3),
        kappa=HybridForward(scale),
        kappa_b=HybridBackward(),
        nu=sum_measures(counting(atoms), leaves),
        terminal=leaves,
        log_reward=lambda x: torch.zeros(len(x), dtype=x.dtype),
        max_length=3,
        encode=lambda s: s,
    )


# --- a funnel into a terminal atom: s0 -> [1, y] -> [2, 0] -> sink; the backward move from [2, 0] overshoots ---------


class FunnelForward(Kernel):
    def __init__(self):
        self.chart = unit_chart()

    def __call__(self, s):
        stage = s[:, 0].round().long()
        x = torch.zeros(len(s), 2, 2, dtype=s.dtype)
        x[:, 0, 0] = 2.0  # [2, 0]
        mask = torch.stack([stage == 1, stage == 2], 1)
        sink = torch.tensor([False, True]).expand(len(s), 2).clone()
        return atoms_measure(x, mask, sink, (Piece(self.chart, s, stage == 0),))


class FunnelBackward(Kernel):
    def __init__(self, scale: float = 1.0):
        self.chart: Chart = unit_chart(scale)

    def __call__(self, s):
        stage = s[:, 0].round().long()
        return atoms_measure(s.new_zeros(len(s), 1, 2), (stage == 1)[:, None], None, (Piece(self.chart, s, stage == 2),))


def funnel(scale: float = 1.0) -> PointedGraph:
    """Every [1, y] moves to the one terminal atom [2, 0], whose backward move ``y = scale * u`` is the continuous piece."""
    seg = charted(unit_chart(), state_dim=2)
    end = torch.tensor([[2.0, 0.0]])
    return PointedGraph(
        name=f"funnel, backward move from [2, 0] x{scale:g}",
        source=torch.zeros(2),
        kappa=FunnelForward(),
        kappa_b=FunnelBackward(scale),
        nu=sum_measures(counting(torch.zeros(1, 2)), seg, counting(end)),
        terminal=counting(end),
        log_reward=lambda x: torch.zeros(len(x), dtype=x.dtype),
        max_length=3,
        encode=lambda s: s,
    )


SPACES = {"segment": segment, "quarter-disc": quarter_disc, "hybrid": hybrid, "funnel": funnel}
WHERE = {  # what the failing row's detail names: the move and the state it starts from
    "segment": ("forward move leaves the support of nu", "kappa(s, .) piece 0", "s=[0.0, 0.0]"),
    "quarter-disc": ("forward move leaves the support of nu", "kappa(s, .) piece 0 (PolarChart)", "s=[0.0, 0.0, 0.0]"),
    "hybrid": ("forward move leaves the support of nu", "kappa(s, .) piece 1", "s=[1.0, 1.0, 0.0]"),
    "funnel": ("backward move leaves the support of nu", "kappa_b(s', .) piece 0", "s'=[2.0, 0.0]"),
}


def support_row(graph: PointedGraph, seed: int):
    report = check_graph(graph, n=N, seed=seed)
    rows = [r for r in report.results if r.condition.startswith(SUPPORT)]
    assert len(rows) == 1
    return rows[0]


@pytest.mark.parametrize(
    "scale", [OVERSHOOTS[0], pytest.param(OVERSHOOTS[1], marks=pytest.mark.slow)], ids=("5%", "1/3")
)  # 1/3: the easier case, in the full suite
@pytest.mark.parametrize("space", SPACES)
def test_a_move_that_overshoots_nu_fails_the_support_row_at_every_seed(space, scale):
    for seed in SEEDS:
        row = support_row(SPACES[space](scale), seed)
        assert row.verdict == "FAIL", f"seed {seed}: {row}"
        for where in WHERE[space]:
            assert where in row.detail, f"seed {seed}: {where!r} not in {row.detail!r}"


@pytest.mark.parametrize("space", SPACES)
def test_the_same_space_built_right_passes_the_support_row_at_every_seed(space):
    for seed in SEEDS:
        row = support_row(SPACES[space](), seed)
        assert row.passed, f"seed {seed}: {row}"


def test_the_valid_spaces_pass_every_check():
    """The controls are valid pointed graphs (Definition 1), not merely support-clean."""
    for make in SPACES.values():
        report = check_graph(make(), n=N, seed=0)
        assert report.passed, str(report)


def test_each_kind_gets_its_share_of_moves():
    """s0 and each atom of nu are kinds of their own, the states of a piece of nu one kind; a kind met once gets 256 moves."""
    graph = hybrid()
    s = torch.tensor([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 0.0], [2.0, 0.0, 0.3], [2.0, 0.0, 0.7], [2.0, 1.0, 0.5], [2.0, 5.0, 0.5]])
    kind = state_kinds(graph, s)
    assert kind[:3].tolist() == [0, 2, 3]  # s0 is atom 0 of nu, and kind 0 whatever
    assert kind[3] == kind[4] != kind[5] and kind[6] == -1
    per = moves_per_state(kind)
    assert per[:3].tolist() == [MOVES_PER_KIND] * 3
    assert per[3:5].tolist() == [MOVES_PER_KIND // 2] * 2
    assert math.isclose((20 / 21) ** MOVES_PER_KIND, 3.8e-6, rel_tol=0.05)


def test_many_kinds_share_a_budget_of_moves():
    """Beyond MOVE_BUDGET / MOVES_PER_KIND kinds, each gets MOVE_BUDGET / G, and at least 4 per state."""
    from gflownet_measure.checks.support import MOVE_BUDGET, MOVES_PER_PIECE

    kind = torch.arange(1000)
    assert moves_per_state(kind).tolist() == [MOVE_BUDGET // 1000] * 1000
    assert int(moves_per_state(torch.arange(10**5)).min()) == MOVES_PER_PIECE


def test_check_support_alone_fails_the_overshoot_from_s0():
    torch.manual_seed(0)
    assert not check_support(segment(1.05), N).passed
