"""Checkpoints that cannot be turned against the user (issue 64, items 5 and 7): each checkpoint carries a SHA-256
digest of its content, checked on resume, and fields checked to be sane before anything is restored. A damaged
``checkpoint.pt`` (a flipped byte, random bytes, a cut) or a crafted one (a step of 1e9, a NaN time, a random state
numpy would read past) is skipped with a one-line warning, the run resuming from ``checkpoint.prev.pt`` exactly as an
uninterrupted run; a checkpoint without a run id is refused; with no usable checkpoint left, one line."""

import random
from dataclasses import replace

import pytest
import torch

from gflownet_measure.environments import hypergrid
from gflownet_measure.experiments.cli import main
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet
from gflownet_measure.rollout import sample_forward
from gflownet_measure.training import CheckpointError, Trainer, _digest, make_optimizer, seed_everything

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise reproducibility of float sums

RUN = {"seed": 0, "settings": {"lr": 0.01, "steps": 30}, "data": None}
FALLBACK = "; resuming from checkpoint.prev.pt \\(step 10\\)"


class Interrupt(Exception):
    pass


def _trainer(out, fail_at=None, run_id=None):
    """A hypergrid run of 30 updates, checkpointed every 10; ``fail_at``: killed at that update."""
    seed_everything(0)
    cfg = hypergrid.HypergridConfig(height=4)
    g = hypergrid.make_graph(cfg)
    pf, pb = hypergrid.make_policies(g, replace(cfg, hidden=16))
    gfn = GFlowNet(pf, pb)
    opt = make_optimizer(gfn, 1e-2, 1e-1)

    def step_fn(step):
        if step == fail_at:
            raise Interrupt
        return OBJECTIVES["tb"](gfn, Batch(g, sample_forward(g, pf, 8, 0.1)))

    def evaluate():
        return {"log_Z": float(gfn.log_Z.detach()), "probe": float(torch.rand(()))}  # probe: the random state after evaluation

    return gfn, Trainer(gfn, opt, torch.optim.lr_scheduler.StepLR(opt, 7, 0.5), step_fn, evaluate, out, 30, 10, 8, grad_clip=5.0, run_id=run_id)


def _interrupted(out, run_id=None):
    """A run killed at update 25: checkpoint.pt at step 20, checkpoint.prev.pt at step 10."""
    out.mkdir()
    _, t = _trainer(out, fail_at=25, run_id=run_id)
    with pytest.raises(Interrupt):
        t.run()
    return out


def _flip_weight_byte(path):
    """One byte of the file flipped: the lowest byte of the first number of the largest weight, so the weight stays
    finite and the file loads, silently different (what the probe found)."""
    data = bytearray(path.read_bytes())
    weight = max(torch.load(path, weights_only=True)["model"].values(), key=torch.numel)
    at = data.find(weight.numpy().tobytes())
    assert at > 0
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _random_bytes(path):
    path.write_bytes(random.Random(0).randbytes(4096))


def _cut(path):
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_64_bytes(path):
    data = bytearray(path.read_bytes())
    for at in random.Random(1).sample(range(len(data)), 64):
        data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def _craft(path, change):
    """``checkpoint.pt`` changed by ``change(state)`` and saved with the digest of its new content: made by someone who
    knows the format, so the digest matches and the fields' own checks must refuse it."""
    state = torch.load(path, weights_only=True)
    change(state)
    state["sha256"] = _digest(state)
    torch.save(state, path)


def test_both_checkpoints_carry_the_digest_of_their_content(tmp_path):
    out = _interrupted(tmp_path / "b")
    for name, step in (("checkpoint.pt", 20), ("checkpoint.prev.pt", 10)):  # the previous one was renamed, still verifiable
        state = torch.load(out / name, weights_only=True)
        assert state["step"] == step and state["sha256"] == _digest(state)


def test_a_flipped_byte_falls_back_to_the_previous_checkpoint_and_resumes_exactly(tmp_path):
    (tmp_path / "a").mkdir()
    full, t = _trainer(tmp_path / "a")
    hist_full = t.run()
    _flip_weight_byte(_interrupted(tmp_path / "b") / "checkpoint.pt")
    with pytest.warns(UserWarning, match=f"checkpoint.pt does not match its SHA-256 digest \\(corrupt\\){FALLBACK}") as record:
        resumed, t = _trainer(tmp_path / "b")
        hist = t.run(resume=True)
    assert all("\n" not in str(w.message) for w in record)
    assert [(r["step"], r["log_Z"], r["probe"]) for r in hist] == [(r["step"], r["log_Z"], r["probe"]) for r in hist_full]
    for (name, p), q in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name


@pytest.mark.parametrize(
    "damage, problem",
    [
        (_random_bytes, "cannot be read \\(corrupt: \\w+\\)"),
        (_cut, "cannot be read \\(corrupt: \\w+\\)"),
        (_flip_64_bytes, "(cannot be read \\(corrupt: \\w+\\)|does not match its SHA-256 digest \\(corrupt\\))"),
    ],
    ids=["random bytes", "cut in half", "64 flipped bytes"],
)
def test_a_damaged_file_is_corrupt_not_pickled_objects(tmp_path, damage, problem):
    """The probe's files: random bytes were reported as "pickled objects" (with advice to switch the guard off), 64
    flipped bytes resumed into "loss is inf"; each is corrupt, and the run resumes from the previous checkpoint."""
    out = _interrupted(tmp_path / "b")
    damage(out / "checkpoint.pt")
    with pytest.warns(UserWarning, match=f"checkpoint.pt {problem}{FALLBACK}") as record:
        _, t = _trainer(out)
        assert [r["step"] for r in t.run(resume=True)] == [10, 20, 30]
    assert not any("pickled" in str(w.message) or "TRUST" in str(w.message) for w in record)


@pytest.mark.parametrize(
    "change, problem",
    [
        (lambda s: s.update(step=1e9), "holds step 1000000000.0, not a whole number from 0 to 30 \\(the run's steps\\)"),
        (lambda s: s.update(step=10**9), "holds step 1000000000, not a whole number from 0 to 30"),
        (lambda s: s.update(step=-50), "holds step -50, not a whole number from 0 to 30"),
        (lambda s: s.update(step=True), "holds step True, not a whole number"),
        (lambda s: s.update(seconds=float("nan")), "holds seconds nan, not a finite number >= 0"),
        (lambda s: s.update(seconds=-1.0), "holds seconds -1.0, not a finite number >= 0"),
        (lambda s: s.update(model=[1, 2]), "holds a list as its model state, not a mapping"),
        (lambda s: s.pop("optimizer"), "holds a NoneType as its optimizer state, not a mapping"),
        (lambda s: s["rng"].update(torch=s["rng"]["torch"][:3]), "holds a random state \\(rank 0\\) that cannot be restored \\(RuntimeError: Expected"),
        (lambda s: s["rng"]["numpy"].__setitem__(2, 10**6), "holds a random state \\(rank 0\\) that cannot be restored \\(numpy's is not a key of 624 numbers"),
        (
            lambda s: s["rng"]["numpy"].__setitem__(1, s["rng"]["numpy"][1][:10]),
            "holds a random state \\(rank 0\\) that cannot be restored \\(numpy's is not a key of 624 numbers",
        ),
        (
            lambda s: s["rng"].update(python=(3, (0,) * 10, None)),
            "holds a random state \\(rank 0\\) that cannot be restored \\(ValueError: state vector is the wrong size\\)",
        ),
        (lambda s: s.pop("rng"), "holds a random state \\(rank 0\\) that cannot be restored \\(a NoneType, not the states of torch, numpy and python\\)"),
        (lambda s: s.update(replica_rng=[{}]), "holds a random state \\(rank 1\\) that cannot be restored \\(KeyError"),
    ],
    ids=[
        "step 1e9",
        "step 10**9",
        "step -50",
        "step True",
        "seconds NaN",
        "seconds -1",
        "model a list",
        "no optimizer",
        "torch rng cut",
        "numpy position 10**6",
        "numpy key cut",
        "python rng cut",
        "no rng",
        "replica rng empty",
    ],
)
def test_a_crafted_checkpoint_with_a_matching_digest_falls_back(tmp_path, change, problem):
    """Fields that a digest cannot vouch for (the file may have been made with a matching one): a step of 1e9 made a
    finished run of it, -50 was accepted, a bad random state was a traceback, and numpy's position 10**6 a crash."""
    out = _interrupted(tmp_path / "b", run_id=RUN)
    _craft(out / "checkpoint.pt", change)
    with pytest.warns(UserWarning, match=f"checkpoint.pt {problem}.*{FALLBACK}") as record:
        _, t = _trainer(out, run_id=RUN)
        assert [r["step"] for r in t.run(resume=True)] == [10, 20, 30]
    assert all("\n" not in str(w.message) for w in record)


@pytest.mark.parametrize(
    "run_id, problem",
    [
        (None, "holds no run id \\(a checkpoint of an earlier version, or one made elsewhere\\), so it cannot be shown to be this run's"),
        ("a string", "belongs to another run \\(it differs in its identity\\)"),
        (RUN | {"settings": "x"}, "belongs to another run \\(it differs in settings\\)"),
    ],
    ids=["none", "a string", "settings a string"],
)
def test_a_checkpoint_that_is_not_this_runs_is_refused_in_one_line(tmp_path, run_id, problem):
    out = _interrupted(tmp_path / "b", run_id=RUN)
    _craft(out / "checkpoint.pt", lambda s: s.update(run_id=run_id))
    _, t = _trainer(out, run_id=RUN)
    with pytest.raises(CheckpointError, match=f"checkpoint.pt {problem}; start this run afresh in another folder, or with --overwrite") as e:
        t.run(resume=True)
    assert "\n" not in str(e.value)


def test_a_model_state_of_another_shape_is_one_line(tmp_path):
    out = _interrupted(tmp_path / "b")
    _craft(out / "checkpoint.pt", lambda s: s["model"].popitem())
    _, t = _trainer(out)
    with pytest.raises(CheckpointError, match="checkpoint.pt does not fit this run's model or optimizer \\(RuntimeError: .*Missing key") as e:
        t.run(resume=True)
    assert "\n" not in str(e.value)


def test_no_usable_checkpoint_left_is_one_line(tmp_path):
    out = _interrupted(tmp_path / "b")
    _random_bytes(out / "checkpoint.pt")
    _flip_weight_byte(out / "checkpoint.prev.pt")
    _, t = _trainer(out)
    with pytest.raises(
        CheckpointError,
        match="no usable checkpoint in .*b \\(checkpoint.pt cannot be read \\(corrupt: \\w+\\); checkpoint.prev.pt does not match its SHA-256 digest \\(corrupt\\)\\); start the run afresh with --overwrite",
    ) as e:
        t.run(resume=True)
    assert "\n" not in str(e.value) and "pickled" not in str(e.value)


def test_a_checkpoint_without_a_digest_resumes_with_one_warning(tmp_path):
    """A checkpoint of an earlier version has no digest: it is resumed from, unverified, and the user is told."""
    out = _interrupted(tmp_path / "b")
    state = torch.load(out / "checkpoint.pt", weights_only=True)
    del state["sha256"]
    torch.save(state, out / "checkpoint.pt")
    with pytest.warns(UserWarning, match="checkpoint.pt has no SHA-256 digest \\(a checkpoint of an earlier version\\): resumed from it unverified"):
        _, t = _trainer(out)
        assert [r["step"] for r in t.run(resume=True)] == [10, 20, 30]


TINY = ["--threads", "1", "--set", "steps=20", "eval_every=10", "eval_samples=50"]


def test_the_command_line_falls_back_then_stops_in_one_line(tmp_path, capsys):
    """``run --resume``: a crafted checkpoint.pt (step 1e9 made a finished run, exit 0) is skipped for the previous one;
    with both damaged, exit 2 and one line."""
    out = tmp_path / "r"
    assert main(["run", "hypergrid", "--out", str(out), *TINY]) == 0
    (out / "metrics.json").unlink()
    _craft(out / "checkpoint.pt", lambda s: s.update(step=1e9))
    with pytest.warns(UserWarning, match=f"checkpoint.pt holds step 1000000000.0, not a whole number from 0 to 20.*{FALLBACK}"):
        assert main(["run", "hypergrid", "--out", str(out), "--resume", "--threads", "1"]) == 0
    assert torch.load(out / "checkpoint.pt", weights_only=True)["step"] == 20
    (out / "metrics.json").unlink()
    _random_bytes(out / "checkpoint.pt")
    _flip_weight_byte(out / "checkpoint.prev.pt")
    capsys.readouterr()
    assert main(["run", "hypergrid", "--out", str(out), "--resume", "--threads", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"gflownet-measure: error: --resume: no usable checkpoint in {out} (checkpoint.pt cannot be read (corrupt"), err
    assert not (out / "metrics.json").exists()
