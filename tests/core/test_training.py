"""The training loop: resume reproduces an uninterrupted run exactly; a NaN (loss, gradient or weight) stops training and
keeps the last good checkpoint; a checkpoint with non-finite weights is never written, and never resumed from."""

import json
from dataclasses import replace

import pytest
import torch

from gflownet_measure.environments import hypergrid
from gflownet_measure.networks import StateFlow
from gflownet_measure.objectives import OBJECTIVES, Batch, GFlowNet
from gflownet_measure.rollout import sample_forward
from gflownet_measure.training import TRUST_CHECKPOINTS, CheckpointError, Trainer, TrainingDiverged, WeightAverage, make_optimizer, seed_everything, use_device


class Interrupt(Exception):
    pass


def _trainer(out, steps=30, fail_at=None, nan_at=None, run_id=None, lr=1e-2, revised=(), draws=1):
    seed_everything(0)
    cfg = hypergrid.HypergridConfig(height=4)
    g = hypergrid.make_graph(cfg)
    pf, pb = hypergrid.make_policies(g, replace(cfg, hidden=16))
    gfn = GFlowNet(pf, pb)
    opt = make_optimizer(gfn, lr, 1e-1)

    def step_fn(step):
        if step == fail_at:
            raise Interrupt
        loss = OBJECTIVES["tb"](gfn, Batch(g, sample_forward(g, pf, 8, 0.1)))
        return loss * float("nan") if step == nan_at else loss

    def evaluate():
        return {"log_Z": float(gfn.log_Z.detach()), "probe": float(torch.rand(draws)[-1])}  # probe: RNG state after evaluation

    scheduler = torch.optim.lr_scheduler.StepLR(opt, 7, 0.5)
    return gfn, Trainer(gfn, opt, scheduler, step_fn, evaluate, out, steps, 10, 8, grad_clip=5.0, run_id=run_id, revised=revised)


def test_resume_reproduces_the_uninterrupted_run(tmp_path):
    torch.set_num_threads(1)  # bitwise reproducibility of float sums
    full, t = _trainer(tmp_path / "a")
    (tmp_path / "a").mkdir()
    hist_full = t.run()
    (tmp_path / "b").mkdir()
    _, t = _trainer(tmp_path / "b", fail_at=25)
    with pytest.raises(Interrupt):
        t.run()
    resumed, t = _trainer(tmp_path / "b")
    hist_resumed = t.run(resume=True)
    assert [r["step"] for r in hist_resumed] == [10, 20, 30]
    for a, b in zip(hist_full, hist_resumed):
        assert a["log_Z"] == b["log_Z"] and a["probe"] == b["probe"]
    for (name, p), q in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name


def test_a_resume_with_other_evaluation_settings_replays_the_updates_when_only_the_last_evaluation_is_left(tmp_path):
    """The evaluation here draws ``draws`` numbers from the run's stream, as an ``eval_samples`` does: resumed from step
    20 of 30 (evaluations at 10, 20, 30) with another count, the weights are the uninterrupted run's to the bit, and only
    the last evaluation differs."""
    torch.set_num_threads(1)  # bitwise reproducibility of float sums
    (tmp_path / "a").mkdir()
    full, t = _trainer(tmp_path / "a")
    hist_full = t.run()
    _interrupted(tmp_path / "b", fail_at=25)
    resumed, t = _trainer(tmp_path / "b", revised=("eval_samples",), draws=5)
    hist = t.run(resume=True)
    for (name, p), q in zip(full.state_dict().items(), resumed.state_dict().values()):
        assert torch.equal(p, q), name
    assert [r["probe"] for r in hist[:2]] == [r["probe"] for r in hist_full[:2]] and hist[2]["probe"] != hist_full[2]["probe"]


def test_a_resume_with_other_evaluation_settings_is_refused_while_an_evaluation_steers_the_updates(tmp_path):
    _interrupted(tmp_path / "r", fail_at=15)  # checkpoint at step 10; the evaluation at 20 draws before the updates 21-30
    _, t = _trainer(tmp_path / "r", revised=("eval_samples",), draws=5)
    with pytest.raises(CheckpointError, match="--resume --set eval_samples: .* at step 10, and the evaluation at step 20"):
        t.run(resume=True)
    assert torch.load(tmp_path / "r" / "checkpoint.pt", weights_only=True)["step"] == 10  # nothing trained, nothing written


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path):
    _, t = _trainer(tmp_path, nan_at=24)
    with pytest.raises(TrainingDiverged, match="step 24.*last good checkpoint"):
        t.run()
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=False)
    assert state["step"] == 20
    assert all(torch.isfinite(v).all() for v in state["model"].values())
    rows = [json.loads(r) for r in (tmp_path / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [10, 20]


def test_resume_without_checkpoint_is_an_error(tmp_path):
    _, t = _trainer(tmp_path)
    with pytest.raises(CheckpointError, match="no checkpoint"):
        t.run(resume=True)


def _interrupted(out, fail_at=25, run_id=None):
    out.mkdir()
    _, t = _trainer(out, fail_at=fail_at, run_id=run_id)
    with pytest.raises(Interrupt):
        t.run()


def test_a_truncated_last_checkpoint_falls_back_to_the_one_before(tmp_path):
    torch.set_num_threads(1)
    _interrupted(tmp_path / "b")  # checkpoints at steps 10 and 20
    last = tmp_path / "b" / "checkpoint.pt"
    last.write_bytes(last.read_bytes()[:1000])  # a kill or a full disk in the middle of a write
    with pytest.warns(UserWarning, match="cannot be read.*checkpoint.prev.pt \\(step 10\\)"):
        _, t = _trainer(tmp_path / "b")
        hist = t.run(resume=True)
    assert [r["step"] for r in hist] == [10, 20, 30]  # step 20's row was dropped with its checkpoint, then logged again
    (tmp_path / "b" / "checkpoint.prev.pt").write_bytes(b"")
    last.write_bytes(b"\x80garbage")
    with pytest.raises(CheckpointError, match="no usable checkpoint in .*checkpoint.pt cannot be read"):
        _trainer(tmp_path / "b")[1].run(resume=True)


def test_an_update_to_non_finite_weights_stops_before_any_checkpoint_holds_them(tmp_path):
    """lr = 1e300: the first update overflows every weight it moves (the loss and the gradient were finite); training
    stops right after it, and the checkpoint kept is the one of step 0, with finite weights."""
    _, t = _trainer(tmp_path, lr=1e300)
    with pytest.raises(
        TrainingDiverged, match="weights are non-finite after the update of step 0 \\(pf\\..* more\\); stopped, last good checkpoint kept at"
    ) as e:
        t.run()
    assert "\n" not in str(e.value)
    state = torch.load(tmp_path / "checkpoint.pt", weights_only=True)
    assert state["step"] == 0 and all(torch.isfinite(v).all() for v in state["model"].values())
    assert not (tmp_path / "checkpoint.prev.pt").exists()
    _, t = _trainer(tmp_path, lr=1e300)  # a resume meets the same update: it stops the same way, the checkpoint intact
    with pytest.raises(TrainingDiverged, match="after the update of step 0"):
        t.run(resume=True)
    assert torch.load(tmp_path / "checkpoint.pt", weights_only=True)["step"] == 0


def test_non_finite_weights_are_never_checkpointed(tmp_path):
    gfn, t = _trainer(tmp_path)
    t._save(0, 0.0)
    before = (tmp_path / "checkpoint.pt").read_bytes()
    with torch.no_grad():
        gfn.log_Z.fill_(float("inf"))
    with pytest.raises(TrainingDiverged, match="weights are non-finite at step 5 \\(log_Z\\); not checkpointed, last good checkpoint kept"):
        t._save(5, 1.0)
    assert (tmp_path / "checkpoint.pt").read_bytes() == before and not (tmp_path / "checkpoint.prev.pt").exists()


def _poison(path):
    """A checkpoint of an earlier version (no digest) that saved a diverged model: one weight NaN."""
    state = torch.load(path, weights_only=True)
    state.pop("sha256")
    state["model"][next(iter(state["model"]))].view(-1)[0] = float("nan")
    torch.save(state, path)


def test_a_last_checkpoint_with_non_finite_weights_falls_back_to_the_one_before(tmp_path):
    _interrupted(tmp_path / "b")  # checkpoints at steps 10 and 20
    _poison(tmp_path / "b" / "checkpoint.pt")
    with pytest.warns(UserWarning, match="checkpoint.pt holds non-finite weights \\(.*\\); resuming from checkpoint.prev.pt \\(step 10\\)"):
        gfn, t = _trainer(tmp_path / "b")
        hist = t.run(resume=True)
    assert [r["step"] for r in hist] == [10, 20, 30]
    assert all(torch.isfinite(p).all() for p in gfn.parameters())
    for name in ("checkpoint.pt", "checkpoint.prev.pt"):
        _poison(tmp_path / "b" / name)
    with pytest.raises(CheckpointError, match="no usable checkpoint in .*checkpoint.pt holds non-finite weights.*checkpoint.prev.pt holds non-finite weights"):
        _trainer(tmp_path / "b")[1].run(resume=True)


def test_a_checkpoint_of_another_run_is_refused(tmp_path):
    run = {"seed": 0, "settings": {"lr": 0.01, "steps": 30}, "data": None}
    _interrupted(tmp_path / "b", run_id=run)
    with pytest.raises(CheckpointError, match="belongs to another run \\(it differs in lr, seed\\)"):
        _trainer(tmp_path / "b", run_id=run | {"seed": 1, "settings": {"lr": 0.02, "steps": 30}})[1].run(resume=True)
    _, t = _trainer(tmp_path / "b", run_id=run)  # its own run resumes
    assert [r["step"] for r in t.run(resume=True)] == [10, 20, 30]


def test_a_history_line_cut_short_is_dropped_on_resume(tmp_path):
    _interrupted(tmp_path / "b")
    with (tmp_path / "b" / "history.jsonl").open("a") as f:
        f.write('{"step": 30, "lo')  # killed while writing a row
    _, t = _trainer(tmp_path / "b")
    assert [r["step"] for r in t.run(resume=True)] == [10, 20, 30]


def test_optimizer_groups_have_their_own_learning_rates():
    cfg = hypergrid.HypergridConfig()
    g = hypergrid.make_graph(cfg)
    pf, pb = hypergrid.make_policies(g, replace(cfg, backward="learned", hidden=8))
    opt = make_optimizer(GFlowNet(pf, pb, StateFlow(g.encode, 16, 8)), 1e-3, 1e-1, 1e-2)
    lrs = {grp["name"]: (grp["lr"], len(grp["params"])) for grp in opt.param_groups}
    assert lrs["log_Z"] == (1e-1, 1) and lrs["log_F"][0] == 1e-2 and lrs["policy"][0] == 1e-3


def test_cpu_as_default_device_installs_no_function_mode():
    """A default device is a TorchFunctionMode on every torch call; CPU is the default already, so none is pushed."""
    before = torch._C._len_torch_function_stack()
    use_device("cpu")
    use_device(torch.device("cpu"))
    assert torch._C._len_torch_function_stack() == before
    assert torch.get_default_device() == torch.device("cpu")
    try:
        use_device("meta")  # another device installs the mode; CPU afterwards removes it again
        assert torch.get_default_device() == torch.device("meta")
        use_device("cpu")
        assert torch._C._len_torch_function_stack() == before and torch.get_default_device() == torch.device("cpu")
    finally:
        torch.set_default_device(None)  # whatever happened above, later tests run on CPU


def test_weight_average_is_the_exponential_average_of_the_weights_after_each_step(tmp_path):
    """The Trainer's average after k steps is sum_i (1 - b) b^(k-i) w_i over the weights w_1..w_k after each step, with
    w_1 itself as the start (b^(k-1) w_1): recomputed here from the weights recorded at every step, in float64 (float32
    averaging of 30 terms: relative error about 1e-6), and restored by a resume as the uninterrupted run has it."""
    torch.set_num_threads(1)
    decay, seen = 0.8, []

    def build(out, fail_at=None):
        gfn, t = _trainer(out, fail_at=fail_at)
        t.average = WeightAverage(gfn.pf, decay)
        t.model = torch.nn.ModuleDict({"gfn": gfn, "average": t.average})
        step_fn = t.step_fn

        def recording(step):
            if step > 0 and out.name == "a":
                seen.append([p.detach().double().clone() for p in gfn.pf.parameters()])  # the weights after step `step`
            return step_fn(step)

        t.step_fn = recording
        return gfn, t

    (tmp_path / "a").mkdir()
    gfn, t = build(tmp_path / "a")
    t.run()
    seen.append([p.detach().double().clone() for p in gfn.pf.parameters()])
    expected = [w.clone() for w in seen[0]]
    for weights in seen[1:]:
        expected = [decay * e + (1 - decay) * w for e, w in zip(expected, weights)]
    for e, a in zip(expected, t.average.module.parameters()):
        torch.testing.assert_close(a.detach().double(), e, rtol=1e-5, atol=1e-6)
    (tmp_path / "b").mkdir()
    _, cut = build(tmp_path / "b", fail_at=25)
    with pytest.raises(Interrupt):
        cut.run()
    _, resumed = build(tmp_path / "b")
    resumed.run(resume=True)
    for p, q in zip(t.average.module.parameters(), resumed.average.module.parameters()):
        assert torch.equal(p, q)


def test_an_objective_on_transitions_needs_its_batch_source(tmp_path):
    from gflownet_measure.experiments.common import train_gflownet
    from gflownet_measure.experiments.registry import RunContext
    from gflownet_measure.experiments.training_config import TrainingConfig
    from gflownet_measure.jsp_gfn.dag_params.objective import UNDIRECTED_SUBTB

    cfg = hypergrid.HypergridConfig(height=4)
    g = hypergrid.make_graph(cfg)
    gfn = GFlowNet(*hypergrid.make_policies(g, replace(cfg, hidden=8)))
    with pytest.raises(ValueError, match="trains on transitions"):
        train_gflownet(gfn, g, UNDIRECTED_SUBTB, TrainingConfig(steps=1, batch_size=4, eval_every=1, grad_clip=0.0), RunContext(tmp_path, False, 0, {}), dict)


class _Planted:
    """A pickled object in a checkpoint: unpickling it would run ``__reduce__``'s call (here harmless: ``list``)."""

    def __reduce__(self):
        return (list, ())


def test_a_checkpoint_carrying_a_pickled_object_is_refused(tmp_path, monkeypatch):
    """Checkpoints hold tensors and plain values (random states included) and are read with weights_only=True: a file
    carrying any other pickled object is refused with a one-line error naming the variable that loads it knowingly."""
    _interrupted(tmp_path / "b")
    state = torch.load(tmp_path / "b" / "checkpoint.pt", weights_only=True)  # what the Trainer writes loads safely
    del state["sha256"]  # as a checkpoint of an earlier version, written before checkpoints had a digest
    torch.save(state | {"planted": _Planted()}, tmp_path / "b" / "checkpoint.pt")
    (tmp_path / "b" / "checkpoint.prev.pt").unlink()
    _, t = _trainer(tmp_path / "b")
    with pytest.raises(CheckpointError, match=f"pickled objects.*{TRUST_CHECKPOINTS}=1") as e:
        t.run(resume=True)
    assert "\n" not in str(e.value)
    monkeypatch.setenv(TRUST_CHECKPOINTS, "1")
    _, t = _trainer(tmp_path / "b")
    assert [r["step"] for r in t.run(resume=True)] == [10, 20, 30]


def test_lr_modules_put_a_module_at_its_own_rate_and_the_rest_stays_in_the_policy_group():
    """``lr_modules``: (part, rate) pairs; a parameter joins the first part that holds it; log Z keeps lr_logZ; a part
    outside the model is one line."""
    from torch import nn

    model = nn.Module()
    model.log_Z = nn.Parameter(torch.zeros(()))
    model.body, model.head = nn.Linear(2, 2), nn.Linear(2, 2)
    opt = make_optimizer(model, 1e-4, 1e-1, lr_modules=[(model.head, 3e-3), (model.head.bias, 1.0)])
    rates = {g["name"]: (g["lr"], sum(p.numel() for p in g["params"])) for g in opt.param_groups}
    assert rates == {"policy": (1e-4, 6), "log_Z": (1e-1, 1), "head": (3e-3, 6)}  # the bias is in the head, named first
    opt = make_optimizer(model, 1e-4, 1e-1, lr_modules=[(model.head.bias, 1.0)])
    assert {g["name"]: g["lr"] for g in opt.param_groups}["head.bias"] == 1.0
    with pytest.raises(ValueError, match="a Linear given a rate of its own is not a part of the Module trained"):
        make_optimizer(model, 1e-4, 1e-1, lr_modules=[(nn.Linear(2, 2), 1.0)])
