"""Smoke tests of `gflownet-measure run torus` (tiny steps): the run-folder contract, the exact references, the hybrid's exact P_T."""
import json
import math

import numpy as np
import pytest

from conftest import check_contract
from gflownet_measure.experiments.cli import main

TINY = ["steps=4", "eval_every=2", "eval_samples=100", "batch_size=16", "hidden=16", "n_layers=1", "n_steps=2", "eval_grid=24", "paper_samples=50"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("space", ["torus", "hybrid"])
def test_run_writes_the_contract(space, tmp_path):
    out = tmp_path / space
    assert main(["run", "torus", "--preset", "quick", "--out", str(out), "--threads", "1", "--set", *TINY, f"space={space}"]) == 0
    check_contract(out)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["log_Z_exact"] == pytest.approx(math.log(56 * math.pi**2), abs=1e-9)  # R6: Z = 56 pi^2 (docs/torus.md)
    assert all(0 <= metrics[k] <= math.log(2) for k in ("jsd", "floor_jsd", "paper_jsd", "floor_paper_jsd"))
    assert metrics["paper_jsd_sets"] == metrics["floor_paper_jsd_sets"] == 2  # eval_samples // paper_samples
    assert sum(metrics[f"mass_exact/mode{j}"] for j in range(6)) == pytest.approx(1.0)  # the basins tile the torus
    assert sum(metrics[f"mass/mode{j}"] for j in range(6)) == pytest.approx(1.0)
    if space == "hybrid":
        assert 0 <= metrics["exact_P_T/jsd"] <= math.log(2)
    with np.load(out / "samples.npz") as z:
        x = z["x"]
    assert x.shape == (100, 2) and (x >= 0).all() and (x < 2 * math.pi).all()
    assert {"jsd.png", "figure4.png"} <= {p.name for p in out.glob("*.png")}


def test_a_weight_average_leaves_training_and_the_last_iterate_as_without_it(tmp_path):
    """With ``ema`` the average is the sampler and the last iterate is scored beside it from the stream a run without the
    average draws: the losses and the last iterate's scores equal the plain run's (one thread: the runs are deterministic),
    while the average, a different policy after a few updates, scores otherwise."""
    rows = {}
    for ema in ("0", "0.9"):
        out = tmp_path / ema
        assert main(["run", "torus", "--preset", "quick", "--out", str(out), "--threads", "1", "--set", *TINY[1:], "steps=6", f"ema={ema}"]) == 0
        rows[ema] = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    check_contract(tmp_path / "0.9")
    plain, averaged = rows["0"], rows["0.9"]
    assert [r["loss"] for r in averaged] == [r["loss"] for r in plain]
    for key in ("jsd", "paper_jsd", "mass_max_abs_error", "mass/mode0"):
        assert [r[f"last_{key}"] for r in averaged] == [r[key] for r in plain]
    assert averaged[-1]["jsd"] != plain[-1]["jsd"]
    metrics = json.loads((tmp_path / "0.9" / "metrics.json").read_text())
    assert metrics["last_jsd"] == plain[-1]["jsd"] and "last_jsd" not in json.loads((tmp_path / "0" / "metrics.json").read_text())


@pytest.mark.parametrize("argv, message", [
    (["--set", "target=r7"], "target='r7' is not allowed; valid: r6, alanine"),
    (["--set", "temperature=0"], "temperature=0.0 must be > 0 kelvin"),
    (["--set", "backward=maybe"], "valid: learned, tied, uniform"),
    (["--set", "eval_samples=500", "paper_samples=1000"], "paper_samples=1000 exceeds eval_samples=500"),
])
def test_bad_settings_are_one_line(argv, message, capsys, tmp_path):
    assert main(["run", "torus", "--out", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


@pytest.mark.slow
def test_the_paper_jsd_target_draws_score_as_rejection_draws_do():
    """The paper's JSD compares with draws of the exact grid density (a cell by its probability, uniform within it) where the
    public code uses rejection samples of R: on R6 the two score alike. 10 sets of 1,000 each; the floor's spread per set is
    0.005 (measured), so each mean carries about 0.0016 and their difference 0.0023: the bound 0.007 is 3 of those."""
    import torch

    from gflownet_measure.environments.torus_targets import r6
    from gflownet_measure.experiments.torus import Reference
    from gflownet_measure.metrics import rejection_sample

    ref, g = Reference.build(r6(2), 120, 0.1), torch.Generator().manual_seed(3)
    box = torch.zeros(2, dtype=torch.float64), torch.full((2,), 2 * math.pi, dtype=torch.float64)
    rejection = ref.paper_jsd(rejection_sample(ref.target.log_reward, *box, 3 * math.log(4) + 1e-9, 10000, g), 1000, seed=5)
    grid = ref.paper_jsd(ref.exact_draws(10000, g), 1000, seed=5)
    assert rejection["paper_jsd_sets"] == 10 and 0.045 < grid["paper_jsd"] < 0.08
    assert abs(rejection["paper_jsd"] - grid["paper_jsd"]) < 0.007


def test_alanine_preset_runs_the_molecule_with_absolute_locations_and_local_search(tmp_path):
    """`--preset alanine` (a few updates): the molecule's target, absolute locations, local search, the weight average;
    the run writes the contract and its four Ramachandran basins' exact masses sum to one."""
    pytest.importorskip("openmm", reason="the molecule extra (OpenMM) is not installed")
    out = tmp_path / "ala"
    tiny = ["steps=4", "eval_every=2", "eval_samples=100", "paper_samples=50", "batch_size=16", "hidden=16", "n_layers=1", "n_steps=2", "eval_grid=24", "ls_every=2", "ls_moves=3"]
    assert main(["run", "torus", "--preset", "alanine", "--out", str(out), "--threads", "1", "--set", *tiny]) == 0
    check_contract(out)
    settings = json.loads((out / "config.json").read_text())["settings"]
    assert settings["target"] == "alanine" and settings["location"] == "absolute" and settings["local_search"] is True and settings["ema"] == 0.999
    assert settings["rank_weight"] == 1000.0  # uniform replay: rank priority biases the basin masses (docs/torus.md)
    metrics = json.loads((out / "metrics.json").read_text())
    assert sum(v for k, v in metrics.items() if k.startswith("mass_exact/")) == pytest.approx(1.0)
    assert (out / "ramachandran.png").exists()
