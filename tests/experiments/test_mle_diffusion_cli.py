"""Smoke tests of `gflownet-measure run mle-diffusion` and `mle-diffusion-table` (tiny settings; the run-folder contract)."""
import json

import numpy as np
import pytest

from conftest import check_contract
from gflownet_measure.experiments.cli import main
from gflownet_measure.experiments.sample_quality import frechet_distance, mmd_rbf

TINY = ["steps=4", "eval_every=2", "n_steps=3", "hidden=8", "batch_size=16", "eval_points=40", "iw_samples=2", "monitor_points=16", "n_samples=60"]

pytestmark = pytest.mark.usefixtures("one_thread")


def test_run_writes_the_contract(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "mle-diffusion", "--out", str(out), "--threads", "1", "--set", *TINY, "data=digits"]) == 0
    check_contract(out)
    m = json.loads((out / "metrics.json").read_text())
    assert m["bpd_iw"] <= m["bpd_bound"] + 1e-9  # per point the log-mean-exp of w is at least the mean of w
    assert m["phi_min"] != 0 or m["phi_max"] != 0  # learned by default
    assert m["fd_digits"] > m["fd_digits_train_vs_test"] and m["digits_classifier_test_accuracy"] > 0.9
    with np.load(out / "samples.npz") as z:
        assert z["x"].shape == (60, 64) and z["phi"].shape == (3,)


def test_table_pairs_each_learned_rule_with_the_fixed_row(tmp_path):
    out = tmp_path / "table"
    assert main(["run", "mle-diffusion-table", "--out", str(out), "--threads", "1", "--set", *TINY, "data=ring", "seeds=1"]) == 0
    check_contract(out)
    m = json.loads((out / "metrics.json").read_text())
    fixed = m["nll_bound/fixed P_B (DDPM)/mean"]
    for label, folder in (("learned P_B, TBC (MLE-GFN)", "tbc"), ("learned P_B, bound", "elbo")):
        assert m[f"nll_bound/{folder}-fixed/mean"] == pytest.approx(m[f"nll_bound/{label}/mean"] - fixed)
        assert f"nll_bound/{folder}-fixed/std" not in m  # one seed: no spread to report
        assert f"{folder} - fixed (paired)" in (out / "table.txt").read_text()
    seed = json.loads((out / "config.json").read_text())["seed"]
    phi = {folder: json.loads((out / folder / f"seed{seed}" / "metrics.json").read_text())["phi_max"] for folder in ("tbc", "elbo", "fixed")}
    assert phi["fixed"] == 0.0 and phi["tbc"] != 0.0 and phi["elbo"] != 0.0 and phi["tbc"] != phi["elbo"]
    assert (out / "variances.png").exists()  # log beta_t per step, every row


@pytest.mark.parametrize("argv, message", [
    (["--set", "data=imagenet32"], "data=imagenet32 needs data_dir="),
    (["--set", "data=mnist"], "data='mnist' is not allowed"),
    (["--set", "learn_backward=maybe"], "learn_backward='maybe' is not a valid bool"),
])
def test_bad_settings_are_one_line(argv, message, capsys, tmp_path):
    assert main(["run", "mle-diffusion", "--out", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


def test_missing_imagenet_files_are_named(capsys, tmp_path):
    (tmp_path / "inet").mkdir()
    assert main(["run", "mle-diffusion", "--preset", "paper", "--out", str(tmp_path / "r"), "--set", f"data_dir={tmp_path / 'inet'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "must hold train_data_batch_*.npz and val_data.npz" in err


def test_sample_quality_scores_separate_distributions():
    rng = np.random.default_rng(0)
    a, b, far = rng.normal(size=(400, 3)), rng.normal(size=(400, 3)), rng.normal(2.0, 1.0, size=(400, 3))
    # same law: unbiased MMD^2 ~ 0 (sd ~1e-3 at 400 points), Frechet distance ~ sampling noise; shifted by 2: both large
    assert abs(mmd_rbf(a, b)) < 0.01 < mmd_rbf(far, b)
    assert frechet_distance(a, b) < 0.2 < 10 < frechet_distance(far, b)
