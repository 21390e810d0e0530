"""A gallery of small pointed graphs, valid and broken on purpose (issue 23), for ``tests/core/test_broken_spaces.py``.

Every factory takes no argument, returns ``(graph, pf, pb)`` (policies may be ``None``) and is seeded: networks are
built right after ``torch.manual_seed(SEED)``. Its one-line docstring says what is broken and which condition of
``check_graph`` must catch it (the test file holds that condition and the substrings that locate the failure).

The valid base spaces (Lahlou et al. 2023, Definition 1), each the root of some broken variants:

- ``chain``: the discrete chain ``[0] -> [1] -> ... -> [4]``, every state but ``s0`` may stop (:class:`TableKernel`);
- ``diamond``: the discrete DAG ``0 -> {1, 2} -> 3``, only ``[3]`` (the state with two parents) may stop;
- ``clock``: a discrete hand turning by quarter turns, ``[0] -> [pi/2] -> ... -> [2 pi]``: ``[0]`` and ``[2 pi]`` are
  distinct states (the turn is counted) at the same point of the circle;
- ``hybrid``: the tutorial's category x segment, ``[stage, k, y]``: ``s0 -> (k, #) -> (k, y) -> sink``, ``K = 2``;
- ``circle``: ``[stage, theta]``: ``s0 -> [1, theta]`` (the whole circle, ``theta = 2 pi u`` with ``u in [0, 1]``, so
  ``log|J| = log 2 pi``) ``-> [2, theta + delta]`` (a forward arc of 2 rad, ``delta in [0, 2]``) ``-> sink``; the
  backward arc from ``[2, theta']`` is ``theta' - delta``;
- ``segment``: the README's one-step space ``[0, 0] -> [1, y], y in [0, 1] -> sink``;
- the shipped environments, through :func:`environment`.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor
from torch.distributions import Distribution

from gflownet_measure.charts import AffineChart, Chart, WithoutJacobian
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.environments import ENVIRONMENTS
from gflownet_measure.graph import PointedGraph
from gflownet_measure.heads import BetaHead, VonMisesHead
from gflownet_measure.kernels import Kernel, atoms_measure
from gflownet_measure.measures import Atoms, Box, Measure, Piece, charted, counting, dirac, sum_measures
from gflownet_measure.networks import MLPPolicy

SEED = 0
TWO_PI = 2 * math.pi
SHIFT = 1e-3  # a "shifted" atom moves this far: 4 000 float32 spacings at these values (|x| <= 4), so never round-off


# --- a kernel read from a table (the discrete spaces) ----------------------------------------------------------------


class TableKernel(Kernel):
    """Counting measure on the atoms listed for each state, ``table[state] = [target, ...]`` (tuples of floats), plus a sink
    atom of mass ``sink[state]`` where given; the zero measure at states in neither."""

    def __init__(self, table: dict[tuple, list[tuple]], sink: dict[tuple, float] | None = None):
        sink = dict(sink or {})
        keys = sorted(set(table) | set(sink))
        self.keys = torch.tensor(keys, dtype=torch.float32)  # [S, D], in the states' dtype: pi / 2 and 2 + 1e-3 as stored
        width = max([len(table.get(k, ())) for k in keys] + [0]) + 1  # the last slot is the sink
        self.x = torch.zeros(len(keys), width, self.keys.shape[1])
        self.mask = torch.zeros(len(keys), width, dtype=torch.bool)
        self.sink = torch.zeros(len(keys), width, dtype=torch.bool)
        self.log_mass = torch.zeros(len(keys), width)
        self.sink[:, -1] = True
        for i, k in enumerate(keys):
            for j, t in enumerate(table.get(k, ())):
                self.x[i, j] = torch.tensor(t)
                self.mask[i, j] = True
            if k in sink:
                self.mask[i, -1] = True
                self.log_mass[i, -1] = math.log(sink[k])

    def __call__(self, s: Tensor) -> Measure:
        hit = (s.float()[:, None, :] == self.keys[None]).all(-1)  # [B, S]
        i = hit.to(torch.int8).argmax(1)
        mask = self.mask[i] & hit.any(1)[:, None]
        return Measure(Atoms(self.x[i].to(s.dtype), self.log_mass[i].to(s.dtype), mask, self.sink[i]))


def mirror(table: dict[tuple, list[tuple]]) -> dict[tuple, list[tuple]]:
    """The backward table of a forward table: ``t`` lists ``s`` wherever ``s`` lists ``t``."""
    out: dict[tuple, list[tuple]] = {}
    for s, targets in table.items():
        for t in targets:
            out.setdefault(t, []).append(s)
    return out


def scaled_square(x: Tensor) -> Tensor:
    """Features ``(x / 4, (x / 4)^2)``: one-to-one on the discrete spaces' states, shifted ones included."""
    return torch.cat([x / 4, (x / 4).square()], 1).float()


def discrete_graph(name: str, children: dict, stops: list[tuple], parents: dict | None = None, back_sink: dict | None = None,
                   states: list[tuple] | None = None, max_length: int = 6, encode=scaled_square) -> PointedGraph:
    """A finite pointed graph: ``kappa`` counting measure on ``children`` plus the sink at ``stops``, ``kappa_b`` on ``parents``
    (default: the mirror; a sink atom at ``back_sink``), ``nu`` counting measure on ``states`` (default: every state named),
    the terminal measure counting measure on ``stops``, ``log R = x_0 / 10``."""
    parents = mirror(children) if parents is None else parents
    named = set(children) | {t for ts in children.values() for t in ts} | set(stops)
    points = torch.tensor(sorted(named) if states is None else states)
    return PointedGraph(
        name=name,
        source=torch.zeros(points.shape[1]),
        kappa=TableKernel(children, {s: 1.0 for s in stops}),
        kappa_b=TableKernel(parents, back_sink),
        nu=counting(points),
        terminal=counting(torch.tensor(stops)),
        log_reward=lambda x: x[:, 0] / 10,
        max_length=max_length,
        encode=encode,
    )


# --- chain ------------------------------------------------------------------------------------------------------------

CHAIN = [(float(i),) for i in range(5)]
CHAIN_CHILDREN = {CHAIN[i]: [CHAIN[i + 1]] for i in range(4)}


def chain_valid():
    """Valid: the chain [0] -> ... -> [4], every state but s0 may stop."""
    return discrete_graph("chain", CHAIN_CHILDREN, CHAIN[1:]), None, None


def chain_parent_shifted():
    """kappa_b([3], .) lists the parent [2 + 1e-3], not [2]: the support check (eq. 4) must name the move [2] -> [3]."""
    parents = mirror(CHAIN_CHILDREN) | {(3.0,): [(2.0 + SHIFT,)]}
    return discrete_graph("chain, parent of [3] shifted by 1e-3", CHAIN_CHILDREN, CHAIN[1:], parents=parents), None, None


def chain_sink_among_parents():
    """kappa_b([2], .) has a sink atom: eq. 2 must fail at [2]."""
    return discrete_graph("chain, sink among the parents of [2]", CHAIN_CHILDREN, CHAIN[1:], back_sink={(2.0,): 1.0}), None, None


def chain_parent_of_source():
    """kappa_b(s0, .) = delta_[1] (kappa unchanged): eq. 5 must fail at s0."""
    parents = mirror(CHAIN_CHILDREN) | {(0.0,): [(1.0,)]}
    return discrete_graph("chain, s0 has the parent [1]", CHAIN_CHILDREN, CHAIN[1:], parents=parents), None, None


def chain_cycle():
    """[3] -> [2] added to kappa (mirrored in kappa_b), a cycle: eq. 7 must fail and name a state of the cycle."""
    children = CHAIN_CHILDREN | {(3.0,): [(4.0,), (2.0,)]}
    return discrete_graph("chain with the cycle [2] -> [3] -> [2]", children, CHAIN[1:]), None, None


def chain_dead_end():
    """[4] has neither a child nor the sink (nor is it terminal), a dead end: eq. 7 must fail and name [4]."""
    return discrete_graph("chain, dead end at [4]", CHAIN_CHILDREN, CHAIN[1:4]), None, None


def chain_unreachable():
    """nu holds a sixth state [7] that no move reaches (it may stop; no parent): eq. 1 must fail and name [7]."""
    extra = (7.0,)
    return discrete_graph("chain with the unreachable state [7]", CHAIN_CHILDREN, CHAIN[1:] + [extra], states=CHAIN + [extra]), None, None


# --- diamond ----------------------------------------------------------------------------------------------------------

DIAMOND_CHILDREN = {(0.0,): [(1.0,), (2.0,)], (1.0,): [(3.0,)], (2.0,): [(3.0,)]}


def diamond_valid():
    """Valid: 0 -> {1, 2} -> 3, only [3] may stop."""
    return discrete_graph("diamond", DIAMOND_CHILDREN, [(3.0,)]), None, None


def diamond_missing_parent():
    """kappa_b([3], .) lists [1] only, not its parent [2]: the support check (eq. 4) must name the forward move [2] -> [3]."""
    parents = mirror(DIAMOND_CHILDREN) | {(3.0,): [(1.0,)]}
    return discrete_graph("diamond, [3] missing its parent [2]", DIAMOND_CHILDREN, [(3.0,)], parents=parents), None, None


# --- clock ------------------------------------------------------------------------------------------------------------

CLOCK = [(k * math.pi / 2,) for k in range(5)]  # [0], [pi/2], [pi], [3 pi/2], [2 pi]
CLOCK_CHILDREN = {CLOCK[i]: [CLOCK[i + 1]] for i in range(4)}


def clock_encode_periodic(x: Tensor) -> Tensor:
    """(cos, sin) of the angle reduced modulo 2 pi: [0] and [2 pi] get the same features, exactly."""
    t = torch.remainder(x[:, 0], TWO_PI)
    return torch.stack([torch.cos(t), torch.sin(t)], 1).float()


def clock_encode_turns(x: Tensor) -> Tensor:
    """(cos, sin) of the angle and the angle in turns: separates [0] from [2 pi]."""
    return torch.cat([clock_encode_periodic(x), x / TWO_PI], 1).float()


def clock_valid():
    """Valid: a hand turning by quarter turns from [0] to [2 pi], every state but s0 may stop; the encoding counts turns."""
    return discrete_graph("clock", CLOCK_CHILDREN, CLOCK[1:], encode=clock_encode_turns), None, None


def clock_encode_merges():
    """encode = (cos, sin) of the angle mod 2 pi merges the distinct states [0] and [2 pi]: the encoding check must name both."""
    return discrete_graph("clock with a periodic encode", CLOCK_CHILDREN, CLOCK[1:], encode=clock_encode_periodic), None, None


# --- hybrid: category x segment (docs/tutorial.md) -------------------------------------------------------------------

K = 2
UNIT = Box((0.0,), (1.0,))
LEAF = AffineChart(UNIT, slots=(2,), fixed={0: 2.0})  # (k, #) -> (k, y = u), stage := 2


class HybridForward(Kernel):
    """kappa: the K category atoms at stage 0, the leaf piece at stage 1, the sink (of mass ``sink_mass``) at stage 2 except
    for the categories in ``no_sink``."""

    def __init__(self, sink_mass: float = 1.0, no_sink: tuple[int, ...] = ()):
        self.sink_mass, self.no_sink = sink_mass, no_sink

    def __call__(self, s: Tensor) -> Measure:
        B, stage = len(s), s[:, 0].round().long()
        x = torch.zeros(B, K + 1, 3, dtype=s.dtype)
        x[:, :K, 0] = 1.0
        x[:, :K, 1] = torch.arange(K, dtype=s.dtype)
        stops = stage == 2
        for k in self.no_sink:
            stops &= s[:, 1] != k
        mask = torch.cat([(stage == 0)[:, None].expand(B, K), stops[:, None]], 1)
        sink = torch.zeros_like(mask)
        sink[:, K] = True
        log_mass = torch.zeros(B, K + 1, dtype=s.dtype)
        log_mass[:, K] = math.log(self.sink_mass)
        return Measure(Atoms(x, log_mass, mask, sink), (Piece(LEAF, s, stage == 1),))


class HybridBackward(Kernel):
    """kappa_b: the one parent atom, (1, k, 0) of (2, k, y) and s0 of (1, k, 0); zero at s0. For ``k = shifted`` the parent's
    category is moved by ``SHIFT``; the categories in ``orphans`` have no parent."""

    def __init__(self, shifted: int | None = None, orphans: tuple[int, ...] = ()):
        self.shifted, self.orphans = shifted, orphans

    def __call__(self, s: Tensor) -> Measure:
        stage = s[:, 0].round().long()
        parent = torch.zeros_like(s)
        parent[:, 0] = (stage - 1).clamp(min=0).to(s.dtype)
        parent[:, 1] = torch.where(stage == 2, s[:, 1], torch.zeros_like(s[:, 1]))
        if self.shifted is not None:
            parent[:, 1] += SHIFT * ((stage == 2) & (s[:, 1] == self.shifted)).to(s.dtype)
        present = stage > 0
        for k in self.orphans:
            present &= s[:, 1] != k
        return atoms_measure(parent[:, None], present[:, None])


def hybrid_segment(k: int) -> Measure:
    """Lebesgue measure on {[2, k, y] : y in [0, 1]}."""
    return charted(AffineChart(UNIT, slots=(2,), fixed={0: 2.0, 1: float(k)}), state_dim=3)


HYBRID_ATOMS = torch.tensor([[0.0, 0.0, 0.0]] + [[1.0, float(k), 0.0] for k in range(K)])


def hybrid_encode(s: Tensor) -> Tensor:
    """[B, 6]: one-hot stage, the category and its square, y."""
    stage = torch.nn.functional.one_hot(s[:, 0].round().long().clamp(0, 2), 3).float()
    k = s[:, 1:2].float()
    return torch.cat([stage, k, k.square(), s[:, 2:3].float()], 1)


def hybrid_log_reward(x: Tensor) -> Tensor:
    """log R(k, y) = log(1 + k) + log y + log(1 - y), w.r.t. the terminal measure."""
    y = x[:, 2]
    return torch.log1p(x[:, 1]) + y.log() + torch.log1p(-y)


def hybrid(name: str = "hybrid", kappa: Kernel | None = None, kappa_b: Kernel | None = None, terminal: Measure | None = None,
           nu: Measure | None = None, log_reward=hybrid_log_reward) -> PointedGraph:
    segments = sum_measures(*(hybrid_segment(k) for k in range(K)))
    return PointedGraph(
        name=name,
        source=torch.zeros(3),
        kappa=kappa or HybridForward(),
        kappa_b=kappa_b or HybridBackward(),
        nu=nu or sum_measures(counting(HYBRID_ATOMS), segments),
        terminal=terminal or segments,
        log_reward=log_reward,
        max_length=3,
        encode=hybrid_encode,
    )


def hybrid_policies(graph: PointedGraph, head=None):
    """P_F: a small MLP, K + 1 atom logits and one coordinate head (default BetaHead(1)); P_B uniform. Seeded."""
    torch.manual_seed(SEED)
    pf = MLPPolicy(graph.kappa, graph.encode, n_in=6, n_atoms=K + 1, heads=[head or BetaHead(1)], hidden=16, n_layers=1)
    return pf, UniformPolicy(graph.kappa_b)


def hybrid_valid():
    """Valid: the tutorial's category x segment (K = 2) with an MLP P_F and a uniform P_B."""
    g = hybrid()
    return (g, *hybrid_policies(g))


def hybrid_log_reward_nan_off_terminal(x: Tensor) -> Tensor:
    """hybrid_log_reward on the terminal states (stage 2), NaN everywhere else."""
    return torch.where(x[:, 0] == 2, hybrid_log_reward(x), torch.full_like(x[:, 0], float("nan")))


def hybrid_nan_reward_off_terminal():
    """Valid: log R is NaN at every non-terminal state (stage < 2), finite on the terminal ones; the checks must read R on terminal states only."""
    g = hybrid("hybrid, reward NaN off the terminal states", log_reward=hybrid_log_reward_nan_off_terminal)
    return (g, *hybrid_policies(g))


def hybrid_parent_shifted():
    """kappa_b((2, 1, y), .) lists the parent (1, 1 + 1e-3, 0), not (1, 1, 0): the support check (eq. 4) must name the piece move from (1, 1, 0)."""
    return hybrid("hybrid, parent of category 1 shifted by 1e-3", kappa_b=HybridBackward(shifted=1)), None, None


def hybrid_sink_mass_two():
    """kappa((2, k, y), {sink}) = 2: eq. 6 must fail at a stage-2 state."""
    return hybrid("hybrid, sink atom of mass 2", kappa=HybridForward(sink_mass=2.0)), None, None


def hybrid_terminal_missing_segment():
    """The terminal measure holds category 0's segment only, though every (k, y) may stop: the support check (eq. 4 at the sink) must name a state (2, 1, y)."""
    return hybrid("hybrid, terminal measure without category 1", terminal=hybrid_segment(0)), None, None


def hybrid_terminal_holds_unstoppable():
    """The terminal measure also holds the atoms (k, #), which cannot stop: the support check (eq. 4 at the sink) must name one."""
    terminal = sum_measures(counting(HYBRID_ATOMS[1:]), *(hybrid_segment(k) for k in range(K)))
    return hybrid("hybrid, terminal measure with the atoms (k, #)", terminal=terminal), None, None


def hybrid_dead_end():
    """(2, 1, y) has neither a child nor the sink (nor is it terminal), a dead end on a piece: eq. 7 must fail and name such a state."""
    return hybrid("hybrid, dead end at category 1", kappa=HybridForward(no_sink=(1,)), terminal=hybrid_segment(0)), None, None


def hybrid_unreachable_segment():
    """nu (and the terminal measure) also hold the segment {[2, 5, y]}, whose states have no parent: eq. 1 must fail and name such a state."""
    segments = sum_measures(*(hybrid_segment(k) for k in (*range(K), 5)))
    nu = sum_measures(counting(HYBRID_ATOMS), segments)
    return hybrid("hybrid with the unreachable segment k = 5", kappa_b=HybridBackward(orphans=(5,)), nu=nu, terminal=segments), None, None


class OffHead(BetaHead):
    """BetaHead(k) whose coordinate density is multiplied by ``factor`` (sampling unchanged): it integrates to ``factor``."""

    def __init__(self, k: int, factor: float):
        super().__init__(k)
        self.log_factor = math.log(factor)

    def forward(self, raw: Tensor) -> Distribution:
        q = super().forward(raw)
        log_prob, log_factor = q.log_prob, self.log_factor
        q.log_prob = lambda value: log_prob(value) + log_factor
        return q


def hybrid_head_off_by_constant():
    """P_F's coordinate density is 1.25 times a Beta density: eq. 15 must fail at a stage-1 state (1, k, 0), where the piece carries all of P_F."""
    g = hybrid("hybrid, P_F's Beta density times 1.25")
    return (g, *hybrid_policies(g, head=OffHead(1, 1.25)))


def hybrid_head_wrong_dimension():
    """P_F has a BetaHead(2) on the 1-D leaf chart: eq. 15 must fail (not raise), naming the head and the piece."""
    g = hybrid("hybrid, BetaHead(2) on a 1-D chart")
    return (g, *hybrid_policies(g, head=BetaHead(2)))


# --- circle ------------------------------------------------------------------------------------------------------------

ARC = 2.0  # length of the second move, in rad
FIRST = AffineChart(UNIT, slots=(1,), scale=TWO_PI, period=TWO_PI, fixed={0: 1.0})  # s0 -> [1, 2 pi u], log|J| = log 2 pi


def forward_arc(length: float = ARC, period: float | None = TWO_PI, stage: float = 2.0) -> AffineChart:
    """theta -> theta + delta, delta in [0, length], into ``stage``."""
    return AffineChart(Box((0.0,), (length,)), slots=(1,), relative=True, period=period, fixed={0: stage})


def backward_arc(length: float = ARC, scale: float = -1.0, period: float | None = TWO_PI, stage: float = 1.0) -> AffineChart:
    """theta' -> theta' + scale * delta, delta in [0, length], into ``stage`` (the mirror of :func:`forward_arc` for scale -1)."""
    return AffineChart(Box((0.0,), (length,)), slots=(1,), scale=scale, relative=True, period=period, fixed={0: stage})


def circle_nu_piece(stage: float, period: float | None = TWO_PI) -> Measure:
    """Arclength on the circle {[stage, theta]}: theta in [0, 2 pi) on the circle, or [0, 2 pi] as a segment when ``period`` is None."""
    return charted(AffineChart(Box((0.0,), (TWO_PI,)), slots=(1,), period=period, fixed={0: stage}), state_dim=2)


class CircleForward(Kernel):
    """kappa: the first chart at s0, the forward arc at stage 1, the sink at stage 2 (and with ``loop`` a forward arc into stage 2 again)."""

    def __init__(self, first: Chart = FIRST, arc: Chart | None = None, loop: bool = False):
        self.first, self.arc, self.loop = first, arc or forward_arc(), forward_arc() if loop else None

    def __call__(self, s: Tensor) -> Measure:
        stage = s[:, 0].round().long()
        done = (stage == 2)[:, None]
        pieces = (Piece(self.first, s, stage == 0), Piece(self.arc, s, stage == 1))
        pieces += (Piece(self.loop, s, stage == 2),) if self.loop else ()
        return atoms_measure(torch.zeros_like(s)[:, None], done, torch.ones_like(done), pieces)


class CircleBackward(Kernel):
    """kappa_b: the atom s0 at stage 1, the backward arc at stage 2 (and with ``loop`` a backward arc into stage 2 too), zero at s0."""

    def __init__(self, arc: Chart | None = None, loop: bool = False):
        self.arc, self.loop = arc or backward_arc(), backward_arc(stage=2.0) if loop else None

    def __call__(self, s: Tensor) -> Measure:
        stage = s[:, 0].round().long()
        pieces = (Piece(self.arc, s, stage == 2),) + ((Piece(self.loop, s, stage == 2),) if self.loop else ())
        return atoms_measure(torch.zeros_like(s)[:, None], (stage == 1)[:, None], None, pieces)


def circle_encode(s: Tensor) -> Tensor:
    """[B, 5]: one-hot stage, cos theta, sin theta (periodic: a state is a point of the circle)."""
    stage = torch.nn.functional.one_hot(s[:, 0].round().long().clamp(0, 2), 3).float()
    return torch.cat([stage, torch.cos(s[:, 1:2]).float(), torch.sin(s[:, 1:2]).float()], 1)


def circle(name: str = "circle", kappa: Kernel | None = None, kappa_b: Kernel | None = None, period: float | None = TWO_PI) -> PointedGraph:
    """The circle space; ``period=None`` declares nu's circles as segments [0, 2 pi] (the same measure; unwrapped angles fall outside)."""
    terminal = circle_nu_piece(2.0, period)
    return PointedGraph(
        name=name,
        source=torch.zeros(2),
        kappa=kappa or CircleForward(),
        kappa_b=kappa_b or CircleBackward(),
        nu=sum_measures(dirac(torch.zeros(2)), circle_nu_piece(1.0, period), terminal),
        terminal=terminal,
        log_reward=lambda x: torch.cos(x[:, 1]),  # w.r.t. arclength
        max_length=3,
        encode=circle_encode,
    )


def circle_policies(graph: PointedGraph, pb_kernel: Kernel | None = None):
    """P_F: an MLP with a von Mises head on the first (whole-circle) chart and a Beta on the 2-rad arc; P_B uniform on ``pb_kernel`` (default the graph's). Seeded."""
    torch.manual_seed(SEED)
    heads = [VonMisesHead(UNIT), BetaHead(1, domain=Box((0.0,), (ARC,)))]
    pf = MLPPolicy(graph.kappa, graph.encode, n_in=5, n_atoms=1, heads=heads, hidden=16, n_layers=1)
    return pf, UniformPolicy(pb_kernel or graph.kappa_b)


def circle_valid():
    """Valid: the circle space with a von Mises / Beta P_F and a uniform P_B."""
    g = circle()
    return (g, *circle_policies(g))


def circle_graph_only():
    """Valid: the circle space without policies."""
    return circle(), None, None


def circle_backward_arc_without_period():
    """The backward arc lacks ``period``, so a forward move across theta = 0 has no backward move: the support check (eq. 4) must name the forward arc."""
    return circle("circle, backward arc without period", kappa_b=CircleBackward(backward_arc(period=None))), None, None


def circle_backward_arc_too_short():
    """The backward arc is 1.5 rad long, the forward arc 2 rad: the support check (eq. 4) must name the forward arc."""
    return circle("circle, backward arc of 1.5 rad", kappa_b=CircleBackward(backward_arc(length=1.5))), None, None


def circle_backward_arc_wrong_sign():
    """The backward arc has scale +1, not -1 (theta' + delta, pointing forward): the support check (eq. 4) must name the forward arc."""
    return circle("circle, backward arc with scale +1", kappa_b=CircleBackward(backward_arc(scale=1.0))), None, None


def circle_backward_arc_scale_two():
    """The backward arc has scale -2 (theta' - 2 delta, 4 rad long): the support check (eq. 4) must name the backward arc and its state."""
    return circle("circle, backward arc with scale -2", kappa_b=CircleBackward(backward_arc(scale=-2.0))), None, None


def circle_first_move_without_jacobian():
    """The first move theta = 2 pi u drops its Jacobian log 2 pi (kappa(s0, .) has mass 1, not 2 pi): eq. 4 must fail on the pairs from s0."""
    return circle("circle, first move without its Jacobian", kappa=CircleForward(first=WithoutJacobian(FIRST))), None, None


class ScaledJacobian(WithoutJacobian):
    """``chart`` with log|J| off by ``log factor`` (the same map and inverse, delegated as :class:`WithoutJacobian` does)."""

    def __init__(self, chart: Chart, factor: float):
        super().__init__(chart)
        self.log_factor = math.log(factor)

    def log_abs_det_jacobian(self, s, u):
        return self.chart.log_abs_det_jacobian(s, u) + self.log_factor


def circle_backward_jacobian_four_thirds():
    """The backward arc's log|J| is off by log(4/3), the smallest factor checks.POWER promises to see: eq. 4 must fail on the inner pairs."""
    return circle("circle, backward arc's Jacobian off by 4/3", kappa_b=CircleBackward(ScaledJacobian(backward_arc(), 4 / 3))), None, None


def circle_forward_unwrapped_periodic_encode():
    """The forward arc lacks ``period`` behind a (cos, sin) encode (nu's circles declared as [0, 2 pi]): the support check must find the arc leaving nu."""
    return circle("circle, forward arc unwrapped behind a periodic encode", kappa=CircleForward(arc=forward_arc(period=None)), period=None), None, None


def circle_loop():
    """A stage-2 state may also move on along a forward arc into stage 2 (mirrored in kappa_b), so walks exceed N = 3: eq. 7 must fail and name a state."""
    return circle("circle with a loop at stage 2", kappa=CircleForward(loop=True), kappa_b=CircleBackward(loop=True)), None, None


def circle_pb_without_jacobian():
    """The backward arc is theta' - 2u, u in [0, 1] (log|J| = log 2), and P_B is uniform on it with the Jacobian dropped: eq. 16 must fail (integral 2) at a stage-2 state."""
    arc = AffineChart(UNIT, slots=(1,), scale=-ARC, relative=True, period=TWO_PI, fixed={0: 1.0})
    g = circle("circle, P_B without the backward arc's Jacobian", kappa_b=CircleBackward(arc))
    return (g, *circle_policies(g, pb_kernel=CircleBackward(WithoutJacobian(arc))))


def circle_encode_stepped(s: Tensor) -> Tensor:
    """[B, 6]: :func:`circle_encode` and 4 * 1[theta > pi], a step inside every circle of the space."""
    return torch.cat([circle_encode(s), 4 * (s[:, 1:2] > math.pi).float()], 1)


def circle_pf_jumps_at_pi():
    """P_F reads 4 * 1[theta > pi] through its own encode, so its density jumps at theta = pi inside the stage-1 circle (no boundary declared): the eq. 3 row must fail, alone, at a state [1, pi]."""
    g = circle("circle, P_F with a step at theta = pi")
    torch.manual_seed(SEED)
    heads = [VonMisesHead(UNIT), BetaHead(1, domain=Box((0.0,), (ARC,)))]
    pf = MLPPolicy(g.kappa, circle_encode_stepped, n_in=6, n_atoms=1, heads=heads, hidden=16, n_layers=1)
    return g, pf, UniformPolicy(g.kappa_b)


# --- segment: the README's one-step space -----------------------------------------------------------------------------

SEGMENT = AffineChart(UNIT, slots=(1,), fixed={0: 1.0})  # u -> [1, u], log|J| = 0


class SegmentForward(Kernel):
    """kappa: the chart at s0, the sink at [1, y]."""

    def __init__(self, chart: Chart = SEGMENT):
        self.chart = chart

    def __call__(self, s):
        done = s[:, :1] == 1
        return atoms_measure(s.new_zeros(len(s), 1, 2), done, torch.ones_like(done), (Piece(self.chart, s, ~done[:, 0]),))


class SegmentBackward(Kernel):
    """kappa_b: s0, the one parent of [1, y]; zero at s0."""

    def __call__(self, s):
        return atoms_measure(s.new_zeros(len(s), 1, 2), s[:, :1] == 1)


def segment(name: str = "one-beta", chart: Chart = SEGMENT, terminal: Measure | None = None) -> PointedGraph:
    seg = charted(SEGMENT, state_dim=2)
    return PointedGraph(name=name, source=torch.zeros(2), kappa=SegmentForward(chart), kappa_b=SegmentBackward(),
                        nu=sum_measures(counting(torch.zeros(1, 2)), seg), terminal=terminal or seg,
                        log_reward=lambda x: x[:, 1].log() + (-x[:, 1]).log1p(), max_length=2, encode=lambda s: s)


def readme_one_step():
    """Valid: the README's one-step space, y in [0, 1], with its MLP P_F and uniform P_B."""
    g = segment()
    torch.manual_seed(SEED)
    pf = MLPPolicy(g.kappa, g.encode, n_in=2, n_atoms=1, heads=[BetaHead(1)], hidden=32)
    return g, pf, UniformPolicy(g.kappa_b)


class HalfInverse(AffineChart):
    """An AffineChart whose inverse returns half the coordinate (a scale applied twice)."""

    def _coords(self, s, y):
        return super()._coords(s, y) / 2


def segment_wrong_inverse():
    """The forward chart's inverse returns u / 2: the chart check must name the chart and the kernel holding it."""
    return segment("one-beta, chart with a wrong inverse", chart=HalfInverse(UNIT, slots=(1,), fixed={0: 1.0})), None, None


def segment_terminal_without_jacobian():
    """The terminal measure is y = 2u, u in [0, 1/2], with its Jacobian dropped (same support, half the mass): eq. 4 must fail on the pairs into the sink."""
    half = WithoutJacobian(AffineChart(Box((0.0,), (0.5,)), slots=(1,), scale=2.0, fixed={0: 1.0}))
    return segment("one-beta, terminal measure at half mass", terminal=charted(half, state_dim=2)), None, None


# --- the shipped environments -----------------------------------------------------------------------------------------


def environment(name: str, **settings):
    """A factory for the shipped environment ``name`` at ``settings``: its graph and default policies (seeded)."""

    def make():
        spec = ENVIRONMENTS[name]
        config = spec.config(**settings)
        graph = spec.make_graph(config)
        torch.manual_seed(SEED)
        return (graph, *spec.make_policies(graph, config))

    make.__doc__ = f"The shipped environment {name} at {settings or 'its defaults'}, with its default policies."
    return make


quarter_disc_without_jacobian = environment("quarter-disc", rho=0.25, jacobian=False)
quarter_disc_without_jacobian.__doc__ = "The quarter disc's policies with jacobian=false (Li et al. 2023's error): eq. 15 must fail at s0, whose polar chart's Jacobian was dropped."
