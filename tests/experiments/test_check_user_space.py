"""`gflownet-measure check MODULE:FACTORY`: the theory checks on a space of one's own, its `--set` and its errors.

Each test writes a small space into ``tmp_path``: the README's one-step Beta space (a continuous piece, with policies)
and a discrete chain ``0 -> 1 -> ... -> n-1`` (FiniteKernel, the graph alone), its settings either a dataclass of
``option`` fields or plain keyword arguments.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from gflownet_measure.experiments.cli import main

BETA = '''
"""The README's one-step space: s0 = [0, 0] -> [1, y], y in [0, 1] (Lebesgue) -> the sink; R(y) = (y (1 - y))^power."""
import torch
from gflownet_measure.densities import UniformPolicy
from gflownet_measure.graph import PointedGraph
from gflownet_measure.heads import BetaHead
from gflownet_measure.kernels import Kernel, atoms_measure
from gflownet_measure.measures import Box, Piece, charted, counting, sum_measures
from gflownet_measure.networks import MLPPolicy
from gflownet_measure.charts import AffineChart

chart = AffineChart(Box((0.0,), (1.0,)), slots=(1,), fixed={0: 1.0})


class Forward(Kernel):
    def __call__(self, s):
        done = s[:, :1] == 1
        return atoms_measure(s.new_zeros(len(s), 1, 2), done, torch.ones_like(done), (Piece(chart, s, ~done[:, 0]),))


class Backward(Kernel):
    def __call__(self, s):
        return atoms_measure(s.new_zeros(len(s), 1, 2), s[:, :1] == 1)


def make_graph(power: float = 1.0, hidden: int = 32):
    segment = charted(chart, state_dim=2)
    graph = PointedGraph(name=f"one-beta(power={power}, hidden={hidden})", source=torch.zeros(2), kappa=Forward(),
                         kappa_b=Backward(), nu=sum_measures(counting(torch.zeros(1, 2)), segment), terminal=segment,
                         log_reward=lambda x: power * (x[:, 1].log() + (-x[:, 1]).log1p()), max_length=2, encode=lambda s: s)
    pf = MLPPolicy(graph.kappa, graph.encode, n_in=2, n_atoms=1, heads=[BetaHead(1)], hidden=hidden)
    return graph, pf, UniformPolicy(graph.kappa_b)
'''

CHAIN = '''
"""A chain 0 -> 1 -> ... -> n-1 on the states [i]; every state but s0 may stop."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from gflownet_measure.graph import PointedGraph
from gflownet_measure.kernels import FiniteKernel
from gflownet_measure.measures import counting
from gflownet_measure.options import check_options, option


@dataclass(frozen=True)
class ChainConfig:
    length: int = option(4, "states 0..length-1", low=2, high=100)
    reward: str = option("flat", "the log-reward: 0, or the state's index", choices=("flat", "tilted"))

    def __post_init__(self):
        check_options(self)


def chain(n: int, tilted: bool = False) -> PointedGraph:
    points = torch.arange(n, dtype=torch.float32)[:, None]
    return PointedGraph(name=f"chain(n={n}, tilted={tilted})", source=torch.zeros(1),
                        kappa=FiniteKernel([[i + 1] if i + 1 < n else [] for i in range(n)], [i > 0 for i in range(n)]),
                        kappa_b=FiniteKernel([[i - 1] if i > 0 else [] for i in range(n)]),
                        nu=counting(points), terminal=counting(points[1:]),
                        log_reward=lambda x: x[:, 0] * float(tilted), max_length=n,
                        encode=lambda x: torch.nn.functional.one_hot(x[:, 0].long(), n).float())


def make_graph(config: ChainConfig) -> PointedGraph:
    return chain(config.length, config.reward == "tilted")


def as_tuple(n: int = 3):
    return (chain(n),)


def broken():
    return 1 / 0


def not_a_graph(n: int = 3):
    return n, "x"


def needs_a_list(sizes: list):
    return chain(sum(sizes))


NOT_CALLABLE = 3
'''


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    """Each test in ``tmp_path`` as the current directory, with ``sys.path``, ``sys.modules`` and torch's threads as
    they were: the command line adds the space's folder and module, and ``--threads`` sets the process's threads."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))
    modules, threads = set(sys.modules), torch.get_num_threads()
    yield
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    torch.set_num_threads(threads)


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def one_line_error(capsys, argv: list[str]) -> str:
    """The stderr of ``check argv``, asserted to be one line with exit code 2."""
    assert main(["check", *argv]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert "\n" not in err and err.startswith("gflownet-measure: error: ") and captured.out == ""
    return err


def test_a_file_path_with_policies_passes(tmp_path, capsys):
    path = write(tmp_path / "spaces" / "beta.py", BETA)
    assert main(["check", f"{path}:make_graph", "--samples", "32"]) == 0
    out = capsys.readouterr().out
    assert "theory checks for one-beta(power=1.0, hidden=32)" in out and "all conditions hold" in out and "FAIL" not in out
    assert "eq. 15 P_F integrates to 1" in out and "eq. 16 P_B integrates to 1" in out  # the factory's policies


def test_a_relative_file_path_and_plain_keyword_settings(tmp_path, capsys):
    write(tmp_path / "spaces" / "beta.py", BETA)
    assert main(["check", "spaces/beta.py:make_graph", "--samples", "32", "--set", "power=2", "hidden=16"]) == 0
    assert "theory checks for one-beta(power=2.0, hidden=16)" in capsys.readouterr().out  # parsed as annotated


def test_a_dotted_module_from_the_current_directory(tmp_path, capsys):
    write(tmp_path / "userspaces" / "__init__.py", "")
    write(tmp_path / "userspaces" / "chain.py", CHAIN)
    assert main(["check", "userspaces.chain:as_tuple", "--samples", "32", "--set", "n=5"]) == 0
    out = capsys.readouterr().out
    assert "theory checks for chain(n=5, tilted=False)" in out and "all conditions hold" in out
    assert "eq. 15" not in out  # the graph alone: no policy to check


def test_typed_settings_are_parsed_into_the_dataclass(tmp_path, capsys):
    write(tmp_path / "typed_chain.py", CHAIN)
    assert main(["check", "typed_chain:make_graph", "--samples", "32", "--set", "length=6", "reward=tilted"]) == 0
    assert "theory checks for chain(n=6, tilted=True)" in capsys.readouterr().out
    assert "length=1 is out of range; valid: [2, 100]" in one_line_error(capsys, ["typed_chain:make_graph", "--set", "length=1"])
    assert "reward='steep' is not allowed; valid: flat, tilted" in one_line_error(capsys, ["typed_chain:make_graph", "--set", "reward=steep"])
    assert "unknown setting 'lenght'; valid: length, reward" in one_line_error(capsys, ["typed_chain:make_graph", "--set", "lenght=3"])


def test_a_registered_environments_factory_through_the_module_form(capsys):
    assert main(["check", "gflownet_measure.environments.hypergrid:make_graph", "--set", "height=4", "ndim=2"]) == 0
    assert "theory checks for hypergrid(H=4, D=2)" in capsys.readouterr().out


def test_plain_keyword_settings_errors(tmp_path, capsys):
    write(tmp_path / "kw_chain.py", CHAIN)
    assert "unknown setting 'm' for kw_chain:chain; valid: n, tilted" in one_line_error(capsys, ["kw_chain:chain", "--set", "m=3"])
    assert "n='x' is not a valid int" in one_line_error(capsys, ["kw_chain:chain", "--set", "n=x"])
    assert "tilted='maybe' is not a valid bool" in one_line_error(capsys, ["kw_chain:chain", "--set", "n=3", "tilted=maybe"])
    assert "check: kw_chain:chain: chain needs n; give --set n=VALUE" in one_line_error(capsys, ["kw_chain:chain"])
    assert "--set sizes: parameter sizes of kw_chain:needs_a_list is annotated list; --set gives int, float, bool or str" in one_line_error(capsys, ["kw_chain:needs_a_list", "--set", "sizes=3"])


@pytest.mark.parametrize(
    "target, message",
    [
        ("no_such_space:make_graph", "check: no_such_space:make_graph: no module named no_such_space in "),
        ("no_such.py:make_graph", "check: no_such.py:make_graph: no file no_such.py; expected MODULE:FACTORY"),
        ("err_chain:make_grph", "check: err_chain:make_grph: module err_chain has no attribute make_grph; valid: as_tuple, broken, chain, make_graph, needs_a_list, not_a_graph"),
        ("err_chain:NOT_CALLABLE", "check: err_chain:NOT_CALLABLE: NOT_CALLABLE is an object of type int, not callable; expected a function returning a PointedGraph or (graph, pf, pb)"),
        ("err_chain:broken", "check: err_chain:broken: broken raised ZeroDivisionError: division by zero ("),
        ("err_chain:not_a_graph", "check: err_chain:not_a_graph: not_a_graph returned (int, str); expected a PointedGraph or a tuple (graph, pf, pb)"),
        ("err_chain:ChainConfig", "check: err_chain:ChainConfig: ChainConfig returned ChainConfig; expected a PointedGraph"),
        ("bad_import:make_graph", "check: bad_import:make_graph: importing bad_import raised ModuleNotFoundError: No module named 'no_such_dependency'"),
        ("bad_syntax.py:make_graph", "check: bad_syntax.py:make_graph: importing bad_syntax.py raised SyntaxError: '(' was never closed ("),
        ("json.py:make_graph", "check: json.py:make_graph: the module name json is already taken by "),
        ("err_chain:", "check: err_chain:: expected MODULE:FACTORY"),
        ("not-a-module:make_graph", "check: not-a-module:make_graph: 'not-a-module' is not a dotted module name"),
    ],
)
def test_each_mistake_is_one_line_with_exit_code_2(target, message, tmp_path, capsys):
    write(tmp_path / "err_chain.py", CHAIN)
    write(tmp_path / "bad_import.py", "import no_such_dependency\n")
    write(tmp_path / "bad_syntax.py", "x = (\n")
    write(tmp_path / "json.py", CHAIN)
    assert message in one_line_error(capsys, [target])


def test_a_raising_factory_names_its_file_and_line(tmp_path, capsys):
    path = write(tmp_path / "raising.py", CHAIN)
    line = CHAIN.splitlines().index("    return 1 / 0") + 1
    assert one_line_error(capsys, ["raising:broken"]).endswith(f"({path}, line {line})")


def test_threads(tmp_path, capsys):
    write(tmp_path / "threaded.py", CHAIN)
    assert main(["check", "threaded:as_tuple", "--threads", "1", "--samples", "32"]) == 0
    assert torch.get_num_threads() == 1 and "all conditions hold" in capsys.readouterr().out
    assert "--threads=0 is out of range; valid: >= 1" in one_line_error(capsys, ["threaded:as_tuple", "--threads", "0"])
    assert "--threads=0 is out of range; valid: >= 1" in one_line_error(capsys, ["hypergrid", "--threads", "0"])


def test_help_documents_the_forms(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert stop.value.code == 0
    assert all(form in out for form in ("MODULE:FACTORY", "PATH.py:FACTORY", "(graph, pf, pb)", "--threads"))


@pytest.mark.slow
def test_the_installed_command_imports_from_the_current_directory_without_a_traceback(tmp_path):
    """As the ``gflownet-measure`` script runs: ``sys.path`` without the current directory (``python -c`` puts it first)."""
    write(tmp_path / "cwd_chain.py", CHAIN)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    script = "import sys; del sys.path[0]; from gflownet_measure.experiments.cli import main; sys.exit(main())"
    p = subprocess.run([sys.executable, "-c", script, "check", "cwd_chain:broken"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert p.returncode == 2 and "Traceback" not in p.stderr and p.stderr.count("\n") == 1
    assert "check: cwd_chain:broken: broken raised ZeroDivisionError" in p.stderr
