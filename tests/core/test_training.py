"""The training loop: resume reproduces an uninterrupted run exactly; a NaN stops training and keeps the last good checkpoint."""
import json

import pytest
import torch

from environments import hypergrid
from gflownet_measure.losses import square
from gflownet_measure.objectives import OBJECTIVES, GFlowNet
from gflownet_measure.policies import StateFlow
from gflownet_measure.rollout import sample_forward
from gflownet_measure.training import Trainer, TrainingDiverged, make_optimizer, seed_everything, use_device


class Interrupt(Exception):
    pass


def _trainer(out, steps=30, fail_at=None, nan_at=None):
    seed_everything(0)
    cfg = {k: s.default for k, s in hypergrid.SETTINGS.items()} | {"height": 4}
    g = hypergrid.make_graph(cfg)
    pf, pb = hypergrid.make_policies(g, cfg, hidden=16)
    gfn = GFlowNet(pf, pb)
    opt = make_optimizer(gfn, 1e-2, 1e-1)

    def step_fn(step):
        if step == fail_at:
            raise Interrupt
        loss = OBJECTIVES["tb"](gfn, g, sample_forward(g, pf, 8, 0.1), 0.9, square)
        return loss * float("nan") if step == nan_at else loss

    def evaluate():
        return {"log_Z": float(gfn.log_Z.detach()), "probe": float(torch.rand(()))}  # probe: RNG state after evaluation

    return gfn, Trainer(gfn, opt, torch.optim.lr_scheduler.StepLR(opt, 7, 0.5), step_fn, evaluate, out, steps, 10, 8, grad_clip=5.0)


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
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        t.run(resume=True)


def test_optimizer_groups_have_their_own_learning_rates():
    cfg = {k: s.default for k, s in hypergrid.SETTINGS.items()}
    g = hypergrid.make_graph(cfg)
    pf, pb = hypergrid.make_policies(g, cfg, backward="learned", hidden=8)
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
