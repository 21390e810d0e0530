"""Issue 39: the shape contracts where a user's objects enter (``gflownet_measure.contracts``), the row of ``check_graph``
that runs them first, and the probe at the start of training.

Every broken variant is the tutorial's hybrid space of ``tests/broken_spaces.py`` (a category, then y in [0, 1]) with one
object changed: a log-reward ``[B, 1]``, a NaN reward on one category, atoms one coordinate too wide, a chart that writes
two values into its one slot, a policy built for the wrong ``n_in``. Each must FAIL the shapes row with one line that names
the object, what it returned and what is expected, and leave every other row *not run*.
"""

import dataclasses
import re

import broken_spaces as bs
import pytest
import torch

from gflownet_measure.charts import AffineChart
from gflownet_measure.checks import CONDITIONS, NOT_RUN, check_graph
from gflownet_measure.contracts import ContractError
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.heads import BetaHead
from gflownet_measure.kernels import Kernel, atoms_measure
from gflownet_measure.measures import Atoms, Measure, Piece
from gflownet_measure.networks import MLPPolicy, StateFlow
from gflownet_measure.objectives import OBJECTIVES, GFlowNet, get_objective

pytestmark = pytest.mark.usefixtures("one_thread")

N = 16
TRAINING = {
    "steps": 1,
    "batch_size": 4,
    "eval_every": 1,
    "grad_clip": 0.0,
}  # one update of 4 trajectories (gflownet_measure.experiments.training_config.TrainingConfig)


def column_reward(x):
    """The hybrid log-reward as a column ``[B, 1]``: broadcasts against ``[B]`` terms into a ``[B, B]`` residual."""
    return bs.hybrid_log_reward(x)[:, None]


def nan_on_category_1(x):
    return torch.where(x[:, 1] == 1, torch.nan, bs.hybrid_log_reward(x))


class WideAtoms(Kernel):
    """kappa of the hybrid space with every atom state one coordinate too wide ``[B, K, 4]``."""

    def __call__(self, s):
        m = bs.HybridForward()(s)
        a = m.atoms
        return Measure(Atoms(torch.cat([a.x, a.x[..., :1]], -1), a.log_mass, a.mask, a.sink), m.pieces)


class DoubledLeaf(AffineChart):
    """The leaf chart writing two values into its one slot."""

    def _embed(self, s, u):
        y = super()._embed(s, u)
        return torch.cat([y, y], 1)


class WideLeaf(Kernel):
    """kappa of the hybrid space with its leaf piece on :class:`DoubledLeaf`."""

    def __call__(self, s):
        m = bs.HybridForward()(s)
        leaf = DoubledLeaf(bs.UNIT, slots=(2,), fixed={0: 2.0})
        return Measure(m.atoms, (Piece(leaf, s, m.pieces[0].mask),))


def policies(graph, n_in: int = 6):
    torch.manual_seed(bs.SEED)
    pf = MLPPolicy(graph.kappa, graph.encode, n_in=n_in, n_atoms=bs.K + 1, heads=[BetaHead(1)], hidden=16, n_layers=1)
    return pf, UniformPolicy(graph.kappa_b)


def policy_for_five_features():
    graph = bs.hybrid()
    return (graph, *policies(graph, n_in=5))


# name: (graph, pf, pb), the message of the shapes row (a regular expression)
BROKEN = {
    "column-reward": (
        lambda: (bs.hybrid(log_reward=column_reward), None, None),
        r"^hybrid: log_reward returned \[(\d+), 1\] for \1 states; expected a tensor of shape \[\1\]",
    ),
    "nan-reward": (
        lambda: (bs.hybrid(log_reward=nan_on_category_1), None, None),
        r"^hybrid: log_reward is nan at x=\[2\.0, 1\.0, [0-9.]+\] \(\d+ of \d+ states\); a log-reward must be finite or -inf$",
    ),
    "wide-atoms": (
        lambda: (bs.hybrid(kappa=WideAtoms()), None, None),
        r"^kappa\(s, \.\): atoms\.x is \[(\d+), 3, 4\] at \1 states of width 3; expected \[\1, 3, 3\]",
    ),
    "wide-chart": (
        lambda: (bs.hybrid(kappa=WideLeaf()), None, None),
        r"^kappa\(s, \.\) piece 0 \(DoubledLeaf\): _embed returned \[(\d+), 2\] for \1 anchors and u \[\1, 1\]; expected \[\1, 1\], one value per slot \[2\]$",
    ),
    "pf-n_in": (policy_for_five_features, r"^P_F \(MLPPolicy\): its network takes n_in=5 features, but encode returned \[\d+, 6\]; expected n_in=6$"),
}


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_shape_fails_the_shapes_row_first_in_one_line_and_nothing_else_runs(name):
    factory, message = BROKEN[name]
    graph, pf, pb = factory()
    report = check_graph(graph, pf, pb, n=N)
    first, *rest = report.results
    assert first.condition == CONDITIONS["contracts"] and first.verdict == "FAIL", str(report)
    assert "\n" not in first.detail and re.search(message, first.detail), first.detail
    assert all(r.skipped and r.verdict == "not run" and r.detail == NOT_RUN for r in rest), str(report)
    assert not report.passed and str(report).endswith("some conditions FAIL")


def test_the_valid_hybrid_space_passes_the_shapes_row():
    graph, pf, pb = bs.hybrid_valid()
    report = check_graph(graph, pf, pb, n=N)
    assert report.passed and report.results[0].condition == CONDITIONS["contracts"], str(report)
    assert "kappa 3 atom slots and 1 piece(s)" in report.results[0].detail and "encode width 6" in report.results[0].detail


def test_training_starts_by_probing_the_contracts(tmp_path):
    """A log-reward [B, 1] raises at the start of train_gflownet, before any update or checkpoint; and the first batch of
    a hand-written loop (docs/tutorial.md, section 8) raises too, in one line."""
    from gflownet_measure.experiments.common import train_gflownet
    from gflownet_measure.experiments.registry import RunContext
    from gflownet_measure.experiments.training_config import TrainingConfig

    graph = bs.hybrid(log_reward=column_reward)
    pf, pb = policies(graph)
    with pytest.raises(ContractError, match=r"log_reward returned \[\d+, 1\]") as e:
        train_gflownet(GFlowNet(pf, pb), graph, get_objective("tb"), TrainingConfig(**TRAINING), RunContext(tmp_path, False, 0, {}), dict)
    assert "\n" not in str(e.value) and not (tmp_path / "checkpoint.pt").exists()
    tb = OBJECTIVES["tb"]
    with pytest.raises(ContractError, match=r"log_reward returned \[64, 1\] for 64 states; expected a tensor of shape \[64\]"):
        tb.sample(graph, GFlowNet(pf, pb), 64)


def test_training_probes_the_state_flow_too(tmp_path):
    from gflownet_measure.experiments.common import train_gflownet
    from gflownet_measure.experiments.registry import RunContext
    from gflownet_measure.experiments.training_config import TrainingConfig

    graph = bs.hybrid()
    pf, pb = policies(graph)
    flow = StateFlow(graph.encode, 7, hidden=8, n_layers=1)
    with pytest.raises(ContractError, match=r"^log_F \(StateFlow\): its network takes n_in=7 features, but encode returned \[\d+, 6\]; expected n_in=6$"):
        train_gflownet(GFlowNet(pf, pb, flow), graph, get_objective("db"), TrainingConfig(**TRAINING), RunContext(tmp_path, False, 0, {}), dict)


@pytest.mark.parametrize(
    "log_reward, message",
    [
        (lambda x: x[:, 1].long(), r"^hybrid: log_reward returned dtype torch.int64; expected a floating-point tensor$"),
        (lambda x: torch.full((len(x),), torch.inf), r"^hybrid: log_reward is inf at x=\[2\.0, "),
    ],
    ids=["integer", "plus-inf"],
)
def test_a_log_reward_of_another_dtype_or_plus_inf_is_one_line(log_reward, message):
    row = check_graph(bs.hybrid(log_reward=log_reward), n=N).results[0]
    assert row.verdict == "FAIL" and re.search(message, row.detail), row.detail


def test_an_encode_that_is_not_a_matrix_is_one_line():
    graph = dataclasses.replace(bs.hybrid("flat encode"), encode=lambda s: s[:, 0].float())
    row = check_graph(graph, n=N).results[0]
    assert row.verdict == "FAIL" and re.search(
        r"^flat encode: encode returned \[(\d+)\] for \1 states; expected \[\1, F\], F features per state$", row.detail
    ), row.detail


def test_a_policy_with_too_few_atom_logits_is_one_line():
    graph = bs.hybrid()
    torch.manual_seed(0)
    pf = MLPPolicy(graph.kappa, graph.encode, n_in=6, n_atoms=bs.K, heads=[BetaHead(1)], hidden=8, n_layers=1)
    row = check_graph(graph, pf, n=N).results[0]
    assert (
        row.verdict == "FAIL" and row.detail == "P_F (MLPPolicy): has 2 atom logits and 1 heads; expected 3 and 1, the atom slots and pieces its kernel returns"
    ), row.detail


def test_a_chart_writing_outside_the_state_is_one_line():
    class Outside(Kernel):
        def __call__(self, s):
            m = bs.HybridForward()(s)
            return Measure(m.atoms, (Piece(AffineChart(bs.UNIT, slots=(3,), fixed={0: 2.0}), s, m.pieces[0].mask),))

    row = check_graph(bs.hybrid(kappa=Outside()), n=N).results[0]
    assert (
        row.detail == "kappa(s, .) piece 0 (AffineChart): writes coordinates [0, 3] (slots, fixed, advance) of states of width 3; expected coordinates 0 to 2"
    ), row.detail


class ToDeadEnd(Kernel):
    """kappa_b of the hybrid space with the parent of every (k, #) at [0, 0, 1], a state with no parent that is not s0."""

    def __call__(self, s):
        m = bs.HybridBackward()(s)
        x = m.atoms.x.clone()
        x[s[:, 0] == 1, 0] = torch.tensor([0.0, 0.0, 1.0])
        return atoms_measure(x, m.atoms.mask)


def test_eq1_names_each_dead_end_once():
    """Issue 39: many backward walks stop at the one dead end [0, 0, 1]; eq. 1's examples are distinct states."""
    graph = bs.hybrid("hybrid, parents of (k, #) at [0, 0, 1]", kappa_b=ToDeadEnd())
    report = check_graph(graph, n=N)
    row = report.results[1]
    assert row.condition.startswith("eq. 1 ") and row.verdict == "FAIL", str(report)
    assert "at s=[0.0, 0.0, 1.0] (" in row.detail and row.detail.count("[0.0, 0.0, 1.0]") == 1, row.detail
