"""Issue 39: a space of one's own whose objects break a shape contract (``gflownet_measure.contracts``) is one line on
stderr and exit code 2, for ``check`` (no report: the other rows were not run) and for ``run`` (before the run folder
is touched). The spaces are the README's one-step Beta space of test_check_user_space with one line changed."""

import re
import sys

import pytest
import torch
from test_check_user_space import BETA

from gflownet_measure.experiments.cli import main

LOG_REWARD = "log_reward=lambda x: power * (x[:, 1].log() + (-x[:, 1]).log1p())"
BROKEN = {
    "column-reward": (BETA.replace(LOG_REWARD, f"{LOG_REWARD.replace('lambda x: ', 'lambda x: (')})[:, None]"),
                      r"one-beta\(power=1.0, hidden=32\): log_reward returned \[(\d+), 1\] for \1 states; expected a tensor of shape \[\1\]"),
    "nan-reward": (BETA.replace(LOG_REWARD, "log_reward=lambda x: torch.where(x[:, 1] > 0.5, torch.nan, x[:, 1])"),
                   r"one-beta\(power=1.0, hidden=32\): log_reward is nan at x=\[1\.0, 0\.[5-9]\d*\] \(\d+ of \d+ states\); a log-reward must be finite or -inf$"),
    "n_in": (BETA.replace("n_in=2,", "n_in=3,"), r"P_F \(MLPPolicy\): its network takes n_in=3 features, but encode returned \[\d+, 2\]; expected n_in=2$"),
    "wide-atoms": (BETA.replace("return atoms_measure(s.new_zeros(len(s), 1, 2), s[:, :1] == 1)", "return atoms_measure(s.new_zeros(len(s), 1, 3), s[:, :1] == 1)"),
                   r"kappa_b\(s, \.\): atoms\.x is \[(\d+), 1, 3\] at \1 states of width 2; expected \[\1, 1, 2\]"),
}


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """In ``tmp_path``, with ``sys.path``, ``sys.modules`` and torch's threads restored afterwards."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    modules, threads = set(sys.modules), torch.get_num_threads()
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    torch.set_num_threads(threads)


def test_the_variants_change_the_space(tmp_path):
    assert all(source != BETA for source, _ in BROKEN.values())


@pytest.mark.parametrize("name", BROKEN)
def test_check_says_which_object_has_the_wrong_shape_in_one_line_with_exit_2(tmp_path, capsys, name):
    source, message = BROKEN[name]
    module = "contracts_space_" + name.replace("-", "_")  # a module name of its own: test_user_run imports space_<id> too, and an imported module stays in sys.modules
    (tmp_path / f"{module}.py").write_text(source)
    assert main(["check", f"{module}.py:make_graph", "--samples", "16", "--threads", "1"]) == 2
    out = capsys.readouterr()
    err = out.err.strip()
    assert out.out == "" and "\n" not in err, out
    assert err.startswith(f"gflownet-measure: error: check: {module}.py:make_graph: ") and re.search(message, err), err


@pytest.mark.parametrize("name", ["n_in", "wide-atoms"])
def test_run_refuses_a_broken_shape_in_one_line_with_exit_2_before_the_folder_is_touched(tmp_path, capsys, name):
    source, message = BROKEN[name]
    module = "run_" + name.replace("-", "_")
    (tmp_path / f"{module}.py").write_text(source)
    assert main(["run", f"{module}.py:make_graph", "--out", "r", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"gflownet-measure: error: run: {module}.py:make_graph: ") and re.search(message, err), err
    assert not (tmp_path / "r").exists()
