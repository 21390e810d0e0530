"""Issue 64 (B) from the command line: a head at its cap is a WARNING line of `gflownet-measure check`, and a
``warnings.warn`` (printed ``gflownet-measure: warning: ...``) of `gflownet-measure run`, once, at the evaluations.

The space is the README's one-step space with R(y) = (y (1 - y))^power, whose P_F is Beta(power + 1, power + 1): its
concentrations need c_span >= power + 0.9. With ``c_span=1`` and ``power=4`` the head cannot reach Beta(5, 5); trained
(64 trajectories a step), its concentrations reached the cap 1.1 (sigmoid > 0.99) by the evaluation at step 200 (not
at step 100), and at 600 steps the learned log Z was -7.78 against log B(5, 5) = -6.45, with no error. ``forced``
adds to the concentrations' pre-activations so that they sit at the cap from the first update.
"""

import math
import sys
import warnings

import pytest
import torch

from gflownet_measure.experiments.cli import main

SPACE = '''
"""One step s0 = [0, 0] -> [1, y] -> sink; R(y) = (y (1 - y))^power; P_F an MLP with BetaHead(1, c_span=c_span)."""
import torch
from gflownet_measure.charts import AffineChart
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.heads import BetaHead
from gflownet_measure.kernels import Kernel, atoms_measure
from gflownet_measure.measures import Box, Piece, charted, counting, sum_measures
from gflownet_measure.networks import MLPPolicy

chart = AffineChart(Box((0.0,), (1.0,)), slots=(1,), fixed={0: 1.0})


class Forward(Kernel):
    def __call__(self, s):
        done = s[:, :1] == 1
        return atoms_measure(s.new_zeros(len(s), 1, 2), done, torch.ones_like(done), (Piece(chart, s, ~done[:, 0]),))


class Backward(Kernel):
    def __call__(self, s):
        return atoms_measure(s.new_zeros(len(s), 1, 2), s[:, :1] == 1)


def make_graph(power: float = 1.0, c_span: float = 5.0, forced: float = 0.0):
    segment = charted(chart, state_dim=2)
    graph = PointedGraph(name="one-beta", source=torch.zeros(2), kappa=Forward(), kappa_b=Backward(),
                         nu=sum_measures(counting(torch.zeros(1, 2)), segment), terminal=segment,
                         log_reward=lambda x: power * (x[:, 1].log() + (-x[:, 1]).log1p()), max_length=2, encode=lambda s: s)
    pf = MLPPolicy(graph.kappa, graph.encode, n_in=2, n_atoms=1, heads=[BetaHead(1, c_span=c_span)], hidden=32)
    with torch.no_grad():
        pf.out.bias[2:] += forced  # after the atom's and the piece's logits: alpha, beta
    return graph, pf, UniformPolicy(graph.kappa_b)
'''

RUN = ["--threads", "1", "--set", "batch_size=64", "eval_every=50", "eval_samples=200"]
REMEDY = "raise c_span"


@pytest.fixture
def space(tmp_path, monkeypatch):
    """The space saved in ``tmp_path``, the current directory, with ``sys.path`` and torch's threads restored and the
    space's module forgotten afterwards (the command line adds the space's folder and module, ``--threads`` sets the
    threads; torch's own modules imported in training stay: importing them twice fails)."""
    (tmp_path / "sat_space.py").write_text(SPACE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    threads = torch.get_num_threads()
    yield "sat_space.py:make_graph"
    sys.modules.pop("sat_space", None)
    torch.set_num_threads(threads)


def _ours(record) -> list[str]:
    return [str(w.message) for w in record if REMEDY in str(w.message)]


def test_check_prints_a_warning_line_and_still_passes(space, capsys):
    assert main(["check", space, "--threads", "1", "--samples", "64", "--set", "forced=8.0"]) == 0
    out = capsys.readouterr().out.splitlines()
    warned = [line for line in out if line.startswith("WARNING: ")]
    assert len(warned) == 1, out
    assert warned[0].startswith("WARNING: P_F head 0 (BetaHead(k=1, c_min=0.1, c_span=5)): alpha (and 1 more of its 2 squashed parameters) sits within 1% of its cap")
    assert REMEDY in warned[0]
    assert out[-1] == "all conditions hold"


def test_check_prints_no_warning_for_a_normal_head(space, capsys):
    assert main(["check", space, "--threads", "1", "--samples", "64"]) == 0
    assert "WARNING" not in capsys.readouterr().out


@pytest.mark.slow
def test_a_run_whose_head_starts_at_its_cap_warns_at_the_first_evaluation_once(space):
    """Three evaluations (steps 50, 100, 150), one warning: at the first."""
    with pytest.warns(UserWarning, match=REMEDY) as record:
        assert main(["run", space, "--out", "run", *RUN, "steps=150", "forced=8.0"]) == 0
    ours = _ours(record)
    assert len(ours) == 1, ours
    assert "P_F head 0 (BetaHead(k=1, c_min=0.1, c_span=5))" in ours[0]
    assert "of the 64 states visited by 64 trajectories of P_F where the head is used" in ours[0]
    with pytest.warns(UserWarning, match=REMEDY):  # at the first evaluation: a run of 50 updates has one
        assert main(["run", space, "--out", "first", *RUN, "steps=50", "forced=8.0"]) == 0


@pytest.mark.slow
def test_a_head_whose_c_span_is_too_small_warns_once_trained(space):
    """c_span=1 for Beta(5, 5): the concentrations reach the cap 1.1 in training, and the run says so, once."""
    with pytest.warns(UserWarning, match=REMEDY) as record:
        assert main(["run", space, "--out", "run", *RUN, "steps=250", "power=4.0", "c_span=1.0"]) == 0
    ours = _ours(record)
    assert len(ours) == 1, ours
    assert "cap c_min + c_span = 1.1" in ours[0] and "now 1;" in ours[0]
    assert math.isclose(math.lgamma(5) * 2 - math.lgamma(10), -6.4457, abs_tol=1e-4)  # log B(5, 5), which such a run misses


@pytest.mark.slow
def test_a_normal_head_trains_without_the_warning(space):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert main(["run", space, "--out", "run", *RUN, "steps=250"]) == 0
    assert _ours(record) == []
