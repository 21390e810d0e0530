"""A run folder never loses a run to a failing command: validation before the folder is touched, ownership, the lock,
checkpoints that belong to their run, figures that cannot fail a run, and one-line errors (the README's Reliability)."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from gflownet_measure.bayesnets.datasets.csv_files import load_csv
from gflownet_measure.environments.dag_params import DagParamsConfig, make_problem
from gflownet_measure.experiments import plots
from gflownet_measure.experiments.cli import main

TINY = ["--threads", "1", "--set", "steps=20", "eval_every=10", "eval_samples=50"]
JSP_TINY = ["steps=4", "eval_every=2", "prefill=10", "batch_size=8", "theta_samples=2", "hidden=8", "posterior_samples=20"]

pytestmark = pytest.mark.usefixtures("one_thread")


def _snapshot(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def finished(tmp_path) -> Path:
    out = tmp_path / "done"
    assert main(["run", "hypergrid", "--out", str(out), *TINY]) == 0
    return out


def _fails(argv, capsys, message: str) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err, err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "hypergrid", "--set", "steps=5"], "holds a finished run of hypergrid (seed 0); continue it with --resume, replace it with --overwrite"),
        (["run", "quarter-disc"], "holds a finished run of hypergrid"),
        (["run", "hypergrid", "--overwrite", "--set", "height=64", "ndim=4"], "is a grid of 16,777,216 states"),  # checked inside the experiment
        (["run", "jsp-gfn", "--overwrite", "--set", "data=missing.csv"], "no such file"),
        (["run", "hypergrid", "--overwrite", "--set", "batch_size=100000000"], "batch_size=100000000 needs about"),
        (["run", "hypergrid", "--resume", "--seed", "1"], "drop --seed"),
        (["run", "hypergrid", "--resume", "--preset", "paper"], "drop --preset"),
        (["run", "hypergrid", "--resume", "--set", "steps=5"], "drop --set"),
        (["run", "hypergrid", "--resume", "--overwrite"], "drop --overwrite"),
        (["run", "quarter-disc", "--resume"], "holds a run of hypergrid, not quarter-disc"),
    ],
)
@pytest.mark.slow  # each case trains its own finished run (about 1 s, 10 cases)
def test_a_finished_run_survives_a_failing_command(finished, argv, message, capsys):
    before = _snapshot(finished)
    _fails(argv + ["--out", str(finished)], capsys, message)
    assert _snapshot(finished) == before


def test_overwrite_replaces_the_run_and_its_figures(finished, tmp_path):
    assert main(["run", "sde", "--out", str(finished), "--overwrite", "--threads", "1", "--set", "steps=2", "n_steps=5", "eval_every=1", "eval_samples=20", "batch_size=8"]) == 0
    assert json.loads((finished / "config.json").read_text())["experiment"] == "sde"
    assert not (finished / "distribution.png").exists() and not (finished / "l1_to_target.png").exists()  # the hypergrid's


@pytest.mark.parametrize("out, message", [("", "--out '' names no folder"), (".", "is not empty and holds no run")])
def test_a_folder_that_holds_no_run_is_never_written(out, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # a user's own file, not a run's
    (tmp_path / "notes.txt").write_text("mine")
    before = _snapshot(tmp_path)
    _fails(["run", "hypergrid", "--out", out, "--overwrite"], capsys, message)
    assert _snapshot(tmp_path) == before


def test_an_out_under_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "file").write_text("")
    _fails(["run", "hypergrid", "--out", str(tmp_path / "file" / "run")], capsys, "cannot create or open the run folder")


@pytest.mark.parametrize("argv, message", [(["--seed", "-1"], "--seed=-1 is out of range"), (["--seed", str(2**64)], "is out of range; valid: 0 to 4294967295"), (["--set", "steps=3", "steps=4"], "--set gives steps twice")])
def test_silent_changes_are_errors(argv, message, tmp_path, capsys):
    _fails(["run", "hypergrid", "--out", str(tmp_path / "r"), *argv], capsys, message)
    assert not (tmp_path / "r").exists()  # validated before the folder was made


@pytest.mark.slow
def test_a_checkpoint_of_another_run_is_refused(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", "hypergrid", "--out", str(a), *TINY]) == 0
    assert main(["run", "hypergrid", "--out", str(b), "--seed", "1", *TINY]) == 0
    (b / "checkpoint.pt").write_bytes((a / "checkpoint.pt").read_bytes())  # a stale checkpoint under seed 1's config
    (b / "metrics.json").unlink()
    capsys.readouterr()
    _fails(["run", "hypergrid", "--out", str(b), "--resume", "--threads", "1"], capsys, "belongs to another run (it differs in seed)")
    assert not (b / "metrics.json").exists()  # nothing reported under the wrong config


def test_a_run_killed_before_its_first_checkpoint_resumes_from_the_start(finished, capsys):
    for name in ("checkpoint.pt", "checkpoint.prev.pt", "metrics.json", "history.jsonl"):
        (finished / name).unlink()
    assert main(["run", "hypergrid", "--out", str(finished), "--resume", "--threads", "1"]) == 0
    assert "no checkpoint yet" in capsys.readouterr().err
    assert [json.loads(r)["step"] for r in (finished / "history.jsonl").read_text().splitlines()] == [10, 20]


def test_a_corrupt_config_is_one_line(finished, capsys):
    (finished / "config.json").write_text('{"experiment": "hyper')
    _fails(["run", "hypergrid", "--out", str(finished), "--resume"], capsys, "config.json cannot be read (JSONDecodeError")


@pytest.mark.slow
def test_a_relative_data_path_resumes_from_another_folder(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    (tmp_path / "data.csv").write_text("a,b,c\n" + "\n".join(",".join(f"{v:.4f}" for v in row) for row in rng.normal(size=(30, 3))) + "\n")
    monkeypatch.chdir(tmp_path)
    assert main(["run", "jsp-gfn", "--out", "r", "--threads", "1", "--set", *JSP_TINY, "data=data.csv"]) == 0
    assert json.loads((tmp_path / "r" / "config.json").read_text())["settings"]["data"] == str(tmp_path / "data.csv")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--resume", "--threads", "1"]) == 0
    assert (tmp_path / "r" / "metrics.json").exists()


def test_a_figure_that_fails_is_a_warning_and_the_results_are_written(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise ValueError("the reference kernel is the zero measure at 1 of 2882 states")

    monkeypatch.setattr(plots.plt, "subplots", broken)
    out = tmp_path / "r"
    with pytest.warns(plots.FigureWarning, match=f"figure {out / 'l1_to_target.png'} not drawn: ValueError: the reference kernel"):
        assert main(["run", "hypergrid", "--out", str(out), *TINY]) == 0
    assert (out / "metrics.json").exists() and (out / "samples.npz").exists()


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def _long_run(out: Path) -> subprocess.Popen:
    """A run that trains for minutes, in a child whose Ctrl-C (SIGINT) acts as in a terminal: a shell that starts jobs in
    the background (CI, ``nohup``) hands them SIGINT ignored, and Python then never raises KeyboardInterrupt."""
    argv = [sys.executable, "-m", "gflownet_measure.experiments.cli", "run", "hypergrid", "--out", str(out), "--threads", "1", "--set", "steps=100000", "eval_every=50", "eval_samples=50"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


@pytest.mark.slow
def test_two_processes_cannot_write_one_folder(tmp_path, capsys):
    out = tmp_path / "r"
    p = _long_run(out)
    try:
        _wait_for(out / "history.jsonl")
        _fails(["run", "hypergrid", "--out", str(out), "--resume"], capsys, "is in use by another run of gflownet-measure")
        _fails(["run", "hypergrid", "--out", str(out), "--overwrite"], capsys, "is in use by another process of gflownet-measure")
    finally:
        p.kill()
        p.wait()


@pytest.mark.slow
def test_ctrl_c_stops_with_one_line_and_the_run_resumes(tmp_path):
    out = tmp_path / "r"
    p = _long_run(out)
    try:
        _wait_for(out / "checkpoint.prev.pt")  # two checkpoints written
        p.send_signal(signal.SIGINT)
        err = p.communicate(timeout=60)[1]
    finally:
        p.kill()
        p.wait()
    assert p.returncode == 130
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err and last == f"gflownet-measure: interrupted; the last checkpoint is kept in {out}: continue with `gflownet-measure run hypergrid --out {out} --resume`"
    assert not (out / "metrics.json").exists() and (out / "checkpoint.pt").exists()


@pytest.mark.parametrize(
    "content, message",
    [
        (b"1,2,3\n4,5,6\n7,8,9\n", "the first row of .* is numbers, not variable names; add a header row"),
        (b"a;b;c\n1;2;3\n4;5;6\n", "got 1 in .*; its header contains ';': the file must be comma-separated"),
        (b"a,b\n1,2\n3,\xe9\n", "is not UTF-8 text \\(byte 0xe9 at offset 10\\); save it as UTF-8"),
    ],
)
def test_csv_messages_say_what_to_do(tmp_path, content, message):
    path = tmp_path / "data.csv"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        load_csv(path)


def test_a_folder_is_not_a_missing_csv(tmp_path):
    with pytest.raises(ValueError, match="is a folder; give the path of a CSV file"):
        load_csv(tmp_path)


def test_a_wide_csv_names_its_columns_and_the_limit(tmp_path):
    path = tmp_path / "wide.csv"
    path.write_text(",".join(f"v{i}" for i in range(101)) + "\n" + "\n".join(",".join("0.5" for _ in range(101)) for _ in range(3)) + "\n")
    with pytest.raises(ValueError, match="has 101 columns \\(variables\\); .* at most 100: keep at most 100 columns"):
        make_problem(DagParamsConfig(data=str(path)))


def test_an_update_beyond_the_memory_is_a_one_line_error(tmp_path, capsys):
    """d = 100 MLP CPDs (P = 51,100 parameters) with 256 transitions x 64 theta samples would need terabytes: refused before training."""
    _fails(["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--set", "d=100", "model=mlp", "batch_size=256", "theta_samples=64", "prefill=64"], capsys, "of memory at its peak")


def test_jsp_batch_larger_than_the_buffer_is_an_error(tmp_path, capsys):
    _fails(["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--set", "batch_size=500", "replay_capacity=100"], capsys, "batch_size=500 exceeds replay_capacity=100")
    _fails(["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--set", "batch_size=64", "prefill=2"], capsys, "raise prefill to at least 8")


def test_check_refuses_samples_that_cannot_fit(capsys):
    _fails(["check", "quarter-disc", "--samples", "100000000"], capsys, "--samples=100000000 needs about")


def test_overwrite_deletes_nothing_when_the_folder_holds_a_file_no_run_writes(finished, capsys):
    (finished / "notes.txt").write_text("my notes on this run")
    before = _snapshot(finished)
    _fails(["run", "hypergrid", "--out", str(finished), "--overwrite"], capsys, "holds notes.txt, which no run writes; move it away first (nothing was deleted)")
    assert _snapshot(finished) == before
