"""A run folder never loses a run to a failing command: validation before the folder is touched, ownership, the lock,
checkpoints that belong to their run, figures that cannot fail a run, and one-line errors (the README's Reliability).
A run cannot be turned against its user: no write through a symbolic link, --overwrite deletes only what the run's
manifest lists, and a diverged model is never checkpointed (issue 64, items 1-3)."""

import dataclasses
import fcntl
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from gflownet_measure.experiments import get_experiment, plots
from gflownet_measure.experiments.cli import main
from gflownet_measure.experiments.run_folder import RunFolder
from gflownet_measure.experiments.settings import resolve
from gflownet_measure.jsp_gfn.bayesnets.datasets.csv_files import load_csv
from gflownet_measure.jsp_gfn.dag_params import DagParamsConfig, make_problem

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
        (["run", "hypergrid", "--resume", "--set", "steps=5"], "a resume changes only settings that evaluation alone reads, not steps; valid: eval_samples"),
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
    assert (
        main(
            [
                "run",
                "sde",
                "--out",
                str(finished),
                "--overwrite",
                "--threads",
                "1",
                "--set",
                "steps=2",
                "n_steps=5",
                "eval_every=1",
                "eval_samples=20",
                "batch_size=8",
            ]
        )
        == 0
    )
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


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seed", "-1"], "--seed=-1 is out of range"),
        (["--seed", str(2**64)], "is out of range; valid: 0 to 4294967295"),
        (["--set", "steps=3", "steps=4"], "--set gives steps twice"),
    ],
)
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
    argv = [
        sys.executable,
        "-m",
        "gflownet_measure.experiments.cli",
        "run",
        "hypergrid",
        "--out",
        str(out),
        "--threads",
        "1",
        "--set",
        "steps=100000",
        "eval_every=50",
        "eval_samples=50",
    ]
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
    assert (
        "Traceback" not in err
        and last == f"gflownet-measure: interrupted; the last checkpoint is kept in {out}: continue with `gflownet-measure run hypergrid --out {out} --resume`"
    )
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
    _fails(
        ["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--set", "d=100", "model=mlp", "batch_size=256", "theta_samples=64", "prefill=64"],
        capsys,
        "of memory at its peak",
    )


def test_jsp_batch_larger_than_the_buffer_is_an_error(tmp_path, capsys):
    _fails(
        ["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--set", "batch_size=500", "replay_capacity=100"], capsys, "batch_size=500 exceeds replay_capacity=100"
    )
    _fails(["run", "jsp-gfn", "--out", str(tmp_path / "r"), "--set", "batch_size=64", "prefill=2"], capsys, "raise prefill to at least 8")


def test_check_refuses_samples_that_cannot_fit(capsys):
    _fails(["check", "quarter-disc", "--samples", "100000000"], capsys, "--samples=100000000 needs about")


def test_overwrite_deletes_nothing_when_the_folder_holds_a_file_no_run_writes(finished, capsys):
    (finished / "notes.txt").write_text("my notes on this run")
    before = _snapshot(finished)
    _fails(
        ["run", "hypergrid", "--out", str(finished), "--overwrite"],
        capsys,
        "holds notes.txt, a file that the run did not write (its manifest.json does not list it); move it away first (nothing was deleted)",
    )
    assert _snapshot(finished) == before


@pytest.fixture
def unfinished(finished) -> Path:
    """A run stopped after its checkpoint of step 10 (of 20): ``--resume`` trains, checkpoints and writes every run file."""
    (finished / "checkpoint.pt").write_bytes((finished / "checkpoint.prev.pt").read_bytes())
    (finished / "metrics.json").unlink()
    return finished


def _outside(tmp_path) -> Path:
    target = tmp_path / "notes.txt"
    target.write_text("my notes, outside the run folder")
    return target


LINKED = ("history.jsonl", "checkpoint.tmp", "samples.npz", "metrics.json.tmp")


# each case trains its own run (about 0.5 s): the probe's checkpoint.tmp in the fast loop, the other names in the full suite
@pytest.mark.parametrize("name", [pytest.param(n, marks=[] if n == "checkpoint.tmp" else [pytest.mark.slow]) for n in LINKED])
def test_resume_refuses_a_folder_with_a_symlink_among_its_run_files(unfinished, tmp_path, name, capsys):
    """The probe's case: `cp -a RUN X; ln -s ~/notes.txt X/checkpoint.tmp; run hypergrid --out X --resume` replaced the
    notes. Refused before anything is written, naming the link."""
    target = _outside(tmp_path)
    (unfinished / name).unlink(missing_ok=True)
    (unfinished / name).symlink_to(target)
    before = _snapshot(unfinished)
    capsys.readouterr()
    _fails(["run", "hypergrid", "--out", str(unfinished), "--resume", "--threads", "1"], capsys, f"holds {name}, a symbolic link where a run writes a file")
    assert target.read_text() == "my notes, outside the run folder" and _snapshot(unfinished) == before and (unfinished / name).is_symlink()


# each case trains its own run (about 0.9 s): one refused write and one temporary name in the fast loop
@pytest.mark.parametrize(
    "name, code",
    [
        ("history.jsonl", 2),
        ("checkpoint.tmp", 0),
        pytest.param("samples.npz", 2, marks=pytest.mark.slow),
        pytest.param("metrics.json.tmp", 0, marks=pytest.mark.slow),
    ],
)
def test_no_write_goes_through_a_symlink_even_unchecked(unfinished, tmp_path, name, code, monkeypatch, capsys):
    """Without the check on --resume (a link placed after it): the write that meets the link stops the run with one line
    (history.jsonl, samples.npz), or the link is a name no write uses (temporary files have fresh names); the target is
    never written."""
    monkeypatch.setattr(RunFolder, "_refuse_links", lambda self: None)
    target = _outside(tmp_path)
    (unfinished / name).unlink(missing_ok=True)
    (unfinished / name).symlink_to(target)
    capsys.readouterr()
    assert main(["run", "hypergrid", "--out", str(unfinished), "--resume", "--threads", "1"]) == code
    err = capsys.readouterr().err.strip().splitlines()
    if code == 2:
        assert err[-1].startswith("gflownet-measure: error: ") and f"{name} is a symbolic link: a run never writes through one" in err[-1]
    assert target.read_text() == "my notes, outside the run folder" and (unfinished / name).is_symlink()
    assert not [p for p in unfinished.iterdir() if p.name.endswith(".tmp") and not p.is_symlink()]  # no temporary file left


def test_resume_never_writes_through_a_linked_folder(tmp_path, capsys):
    """A table's sub-run folder that is a link to elsewhere, in a folder of an earlier version (no manifest names it):
    the first write there is refused, before any training, and nothing is written elsewhere."""
    out, elsewhere = tmp_path / "t", tmp_path / "elsewhere"
    exp = get_experiment("quarter-disc-figure1")
    cfg = resolve(exp.settings, exp.presets["quick"], {"steps": "2", "seeds": "1"})
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"experiment": exp.name, "preset": "quick", "seed": 0, "device": "cpu", "settings": cfg}))
    elsewhere.mkdir()
    (out / "tb-uniform-rho0.25").symlink_to(elsewhere, target_is_directory=True)
    _fails(["run", exp.name, "--out", str(out), "--resume", "--threads", "1"], capsys, "tb-uniform-rho0.25 is a symbolic link: a run never writes through one")
    assert list(elsewhere.iterdir()) == []


@pytest.mark.parametrize("mine", ["thesis_plot.png", "my/draft.tmp"])
def test_overwrite_deletes_nothing_when_the_folder_holds_a_users_file_named_like_a_run_file(finished, mine, capsys):
    """The probe's case: a user's thesis_plot.png or my/draft.tmp matched what a run writes (*.png, *.tmp) and was deleted."""
    (finished / mine).parent.mkdir(exist_ok=True)
    (finished / mine).write_text("x")
    before = _snapshot(finished)
    _fails(
        ["run", "hypergrid", "--out", str(finished), "--overwrite", *TINY],
        capsys,
        f"holds {mine.split('/')[0]}, a {'file' if '/' not in mine else 'folder'} that the run did not write (its manifest.json does not list it); move it away first (nothing was deleted)",
    )
    assert _snapshot(finished) == before


def test_overwrite_refuses_a_link_and_a_folder_without_manifest(finished, tmp_path, capsys):
    target = _outside(tmp_path)
    (finished / "samples.npz").unlink()
    (finished / "samples.npz").symlink_to(target)
    before = _snapshot(finished)
    _fails(["run", "hypergrid", "--out", str(finished), "--overwrite", *TINY], capsys, "holds samples.npz, a symbolic link that the run did not write")
    assert _snapshot(finished) == before and target.read_text() == "my notes, outside the run folder"
    (finished / "samples.npz").unlink()
    (finished / "manifest.json").unlink()  # as a run of an earlier version left it
    before = _snapshot(finished)
    _fails(
        ["run", "hypergrid", "--out", str(finished), "--overwrite", *TINY],
        capsys,
        "holds a run of an earlier version of gflownet-measure, without the manifest.json that lists the files it wrote; delete the folder by hand",
    )
    assert _snapshot(finished) == before


def test_overwrite_deletes_exactly_what_the_run_wrote(finished):
    (finished / "checkpoint.pt.4242-0123abcd.tmp").write_bytes(b"left by a kill during a write")
    assert main(["run", "hypergrid", "--out", str(finished), "--overwrite", "--threads", "1", "--set", "steps=10", "eval_every=5", "eval_samples=50"]) == 0
    manifest = json.loads((finished / "manifest.json").read_text())
    assert sorted(p.name for p in finished.iterdir()) == sorted(manifest["files"] + ["manifest.json"])
    assert json.loads((finished / "config.json").read_text())["settings"]["steps"] == 10


def test_a_diverged_model_is_never_checkpointed_and_resume_stops_cleanly(tmp_path, capsys):
    """The probe's case: lr=1e300 saved non-finite weights at step 1 and ended in a traceback, at every resume."""
    out = tmp_path / "r"
    argv = ["run", "hypergrid", "--out", str(out), "--threads", "1", "--set", "steps=50", "eval_every=1", "eval_samples=50", "lr=1e300"]
    for command in (argv, ["run", "hypergrid", "--out", str(out), "--resume", "--threads", "1"]):
        assert main(command) == 1  # the NaN guard's code
        err = capsys.readouterr().err.strip()
        assert "Traceback" not in err
        assert err.splitlines()[-1].startswith("gflownet-measure: training stopped: weights are non-finite after the update of step 0 (")
        assert err.splitlines()[-1].endswith(f"; stopped, last good checkpoint kept at {out / 'checkpoint.pt'}")
        for name in ("checkpoint.pt", "checkpoint.prev.pt"):
            if (out / name).exists():
                state = torch.load(out / name, weights_only=True)
                assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())
    assert not (out / "metrics.json").exists()


def test_a_policy_whose_outputs_diverge_with_finite_weights_stops_in_one_line(tmp_path, capsys):
    """The probe's case: lr=1e30 keeps the weights finite but makes the logits NaN; the draw then picked moves off the
    grid and `one_hot` raised a traceback in the next encoding."""
    out = tmp_path / "r"
    argv = ["run", "hypergrid", "--out", str(out), "--threads", "1", "--set", "steps=30", "eval_every=5", "eval_samples=50", "lr=1e30"]
    assert main(argv) == 1
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err, err
    assert err.splitlines()[-1].startswith("gflownet-measure: training stopped: the policy's component probabilities are not finite at ")
    assert not (out / "metrics.json").exists()


def test_a_finished_run_whose_history_was_emptied_is_one_line_on_resume(finished, capsys):
    (finished / "history.jsonl").write_text("")
    assert main(["run", "hypergrid", "--out", str(finished), "--resume", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "Traceback" not in err and "history.jsonl has no row for step 20, the last of this run" in err.splitlines()[-1], err


def test_a_checkpoint_with_non_finite_weights_is_skipped_on_resume(finished):
    """A checkpoint.pt of an earlier version that saved a diverged model: the run resumes from checkpoint.prev.pt."""
    (finished / "metrics.json").unlink()
    state = torch.load(finished / "checkpoint.pt", weights_only=True)
    del state["sha256"]  # written before checkpoints had a digest
    for v in state["model"].values():
        v.fill_(float("nan"))
    torch.save(state, finished / "checkpoint.pt")
    with pytest.warns(UserWarning, match="checkpoint.pt holds non-finite weights \\(.*\\); resuming from checkpoint.prev.pt \\(step 10\\)"):
        assert main(["run", "hypergrid", "--out", str(finished), "--resume", "--threads", "1"]) == 0
    assert [json.loads(r)["step"] for r in (finished / "history.jsonl").read_text().splitlines()] == [10, 20]


# --- issue 64, item 8: a run folder's own files, read on --resume, are one line where they hold nonsense -----------


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("seed", "abc", 'config.json: seed is "abc"; valid: a whole number from 0 to 4294967295'),
        # each case trains its own run (about 0.6 s): a bad seed and a bad device in the fast loop, the other seeds in the full suite
        pytest.param("seed", 0.5, "config.json: seed is 0.5; valid: a whole number from 0 to 4294967295", marks=pytest.mark.slow),
        pytest.param("seed", True, "config.json: seed is true; valid: a whole number from 0 to 4294967295", marks=pytest.mark.slow),
        pytest.param("seed", 2**40, f"config.json: seed is {2**40}; valid: a whole number from 0 to 4294967295", marks=pytest.mark.slow),
        ("device", "tpu", 'config.json: device is "tpu"; valid: cpu, cuda'),
    ],
)
def test_a_config_with_a_bad_seed_or_device_is_one_line_on_resume(finished, key, value, message, capsys):
    """The probe's cases: `config.json` with seed "abc" or 0.5, or device "tpu", gave tracebacks on --resume."""
    record = json.loads((finished / "config.json").read_text())
    (finished / "config.json").write_text(json.dumps(record | {key: value}))
    before = _snapshot(finished)
    _fails(["run", "hypergrid", "--out", str(finished), "--resume"], capsys, f"--resume: {finished / message}")
    assert _snapshot(finished) == before  # refused before the folder is touched


@pytest.mark.parametrize(
    "history, message",
    [
        (b'{"step": 10, "loss": 1.0}\n\xff\xfe{"step": 20}\n', "history.jsonl is not UTF-8 text (byte 26 is b'\\xff'), so not a run's history"),
        (b'{"step": null, "loss": 1.0}\n{"step": 20, "loss": 1.0}\n', "history.jsonl line 1: step is null; valid: a whole number >= 0"),
        # each case trains its own run (about 0.5 s): a step of the wrong type on a later line, in the full suite
        pytest.param(
            b'{"step": 10, "loss": 1.0}\n{"step": "20", "loss": 1.0}\n',
            'history.jsonl line 2: step is "20"; valid: a whole number >= 0',
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_history_that_is_not_utf8_or_has_a_bad_step_is_one_line_on_resume(unfinished, history, message, capsys):
    """The probe's cases: `history.jsonl` not UTF-8, or with a row whose step is null, gave tracebacks on --resume."""
    (unfinished / "history.jsonl").write_bytes(history)
    _fails(["run", "hypergrid", "--out", str(unfinished), "--resume", "--threads", "1"], capsys, f"{unfinished / message}")
    assert (unfinished / "history.jsonl").read_bytes() == history  # left as it was, for the user to restore
    assert not (unfinished / "metrics.json").exists()


# --- issue 64, item 4: a table's runs are locked, and are the table's alone ----------------------------------------


TABLE_TINY = ["--threads", "1", "--set", "steps=2", "eval_every=1", "eval_samples=50", "batch_size=8", "hidden=8", "n_layers=1", "seeds=1"]


def _hold(folder: Path) -> int:
    """An exclusive flock on ``folder``, as a run (or a table's run) holds it; released by closing the descriptor."""
    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.slow  # trains a tiny quarter-disc-figure1 table: about 10 s
def test_a_run_on_its_own_in_the_folder_of_a_tables_run_is_refused_and_deletes_nothing(tmp_path, capsys):
    """The probe's case: `run quarter-disc --out T/tb-uniform-rho0.25/seed0 --overwrite` succeeded while the table ran,
    the table then crashed and --resume refused that run for good. Now every form of it is one line naming the table,
    also while the run's folder is locked (its table trains it), and the table resumes."""
    table = tmp_path / "T"
    assert main(["run", "quarter-disc-figure1", "--out", str(table), *TABLE_TINY]) == 0
    capsys.readouterr()
    sub = table / "tb-uniform-rho0.25" / "seed0"
    before = _snapshot(table)
    named = f"is a folder of the multi-run experiment quarter-disc-figure1 in {table}: its runs are trained, resumed and replaced by that table alone; continue it with `run quarter-disc-figure1 --out {table} --resume`"
    link = tmp_path / "Y"
    link.symlink_to(sub)  # the probe's form: the table's run reached through a link
    _fails(["run", "quarter-disc", "--out", str(link), "--threads", "1", "--overwrite", "--set", "steps=2"], capsys, f"--out {link} {named}")
    for out in (sub, sub.parent):
        for extra in (["--overwrite"], [], ["--resume"]):
            settings = [] if extra == ["--resume"] else ["--set", "steps=2"]
            _fails(["run", "quarter-disc", "--out", str(out), "--threads", "1", *extra, *settings], capsys, f"--out {out} {named}")
    fd = _hold(sub)  # the table training this run
    try:
        _fails(["run", "quarter-disc", "--out", str(sub), "--overwrite", "--threads", "1"], capsys, named)
    finally:
        os.close(fd)
    assert _snapshot(table) == before
    assert main(["run", "quarter-disc-figure1", "--out", str(table), "--resume", "--threads", "1"]) == 0


@dataclasses.dataclass(frozen=True)
class NoSettings:
    """The typed settings of :func:`report_the_lock`: it has none."""


def report_the_lock(settings: NoSettings, context) -> dict:
    """A table's run function that reports whether its folder is locked (by the process that trains it) while it runs."""
    try:
        os.close(_hold(context.out))
    except BlockingIOError:
        return {"locked": True, "pid": os.getpid()}
    return {"locked": False, "pid": os.getpid()}


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])  # 2: spawned worker processes, about 10 s
def test_a_tables_run_holds_the_lock_on_its_folder_while_it_trains(tmp_path, workers):
    from gflownet_measure.experiments.common import SubRun, run_many

    jobs = [SubRun(tmp_path / "t" / f"run{k}", k, {}, NoSettings) for k in range(2)]
    metrics = run_many(report_the_lock, jobs, resume=False, workers=workers)
    assert all(m["locked"] for m in metrics), metrics
    assert (len({m["pid"] for m in metrics} - {os.getpid()}) > 0) == (workers > 1)  # in worker processes with workers=2
    os.close(_hold(jobs[0].out))  # released once trained


@pytest.mark.parametrize("workers", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_a_tables_run_whose_folder_another_process_holds_is_refused(tmp_path, workers):
    from gflownet_measure.experiments.common import SubRun, run_many
    from gflownet_measure.experiments.settings import ConfigError

    jobs = [SubRun(tmp_path / "t" / f"run{k}", k, {}, NoSettings) for k in range(2)]
    jobs[1].out.mkdir(parents=True)
    fd = _hold(jobs[1].out)  # a run started there on its own
    try:
        with pytest.raises(ConfigError, match=f"{jobs[1].out} is in use by another process of gflownet-measure"):
            run_many(report_the_lock, jobs, resume=False, workers=workers)
    finally:
        os.close(fd)
    assert list(jobs[1].out.iterdir()) == []  # nothing written in it
