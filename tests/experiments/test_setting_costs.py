"""Every setting's memory cost is checked before the run folder is written (issue: "Settings that fail only after the
folder is written or after training"): a sample count of the final evaluation, a model's width, a batch, a baseline's
particles or a table's number of sub-runs that cannot fit is one line naming the setting with its value, exit code 2,
and no run folder; the quick presets are not refused (:mod:`gflownet_measure.experiments.memory`)."""

import pytest

from gflownet_measure.experiments import EXPERIMENTS, memory
from gflownet_measure.experiments.cli import main
from gflownet_measure.experiments.settings import ConfigError, parse_assignments, resolve

pytestmark = pytest.mark.usefixtures("one_thread")

CASES = [
    ("hypergrid", ["steps=1", "eval_samples=1e9"], "eval_samples=1000000000"),
    ("hypergrid", ["hidden=300000"], "hidden=300000"),
    ("quarter-disc", ["steps=1", "eval_samples=1e9"], "eval_samples=1000000000"),
    ("quarter-disc-figure1", ["steps=1", "eval_samples=1e9"], "eval_samples=1000000000"),
    ("quarter-disc-figure1", ["seeds=1e12"], "seeds=1000000000000"),
    ("torus", ["steps=1", "eval_samples=1e9"], "eval_samples=1000000000"),
    ("torus", ["hidden=300000"], "hidden=300000"),
    ("sde", ["steps=1", "eval_samples=1e10"], "eval_samples=10000000000"),
    ("sde", ["hidden=300000"], "hidden=300000"),
    ("sde-table", ["smc_particles=1e12"], "smc_particles=1000000000000"),
    ("sde-table", ["seeds=1e12", "steps=1"], "seeds=1000000000000"),
    ("sde-table", ["steps=1", "eval_samples=1e10"], "eval_samples=10000000000"),
    ("mle-diffusion", ["batch_size=1e15"], "batch_size=1000000000000000"),
    ("mle-diffusion", ["hidden=300000"], "hidden=300000"),
    ("mle-diffusion", ["steps=1", "iw_samples=1e9"], "iw_samples=1000000000"),
    ("mle-diffusion", ["steps=1", "n_samples=1e10"], "n_samples=10000000000"),
    ("mle-diffusion-table", ["seeds=1e12", "steps=1"], "seeds=1000000000000"),
    ("mle-diffusion-table", ["steps=1", "n_samples=1e10"], "n_samples=10000000000"),
    ("jsp-gfn", ["steps=1", "posterior_samples=1e10"], "posterior_samples=10000000000"),
    ("jsp-gfn", ["steps=1", "exact=off", "eval_samples=1e10"], "eval_samples=10000000000"),
    ("jsp-gfn", ["steps=1", "weight_samples=1e11"], "weight_samples=100000000000"),
    ("jsp-gfn", ["hidden=300000"], "hidden=300000"),
    ("jsp-table", ["datasets=1e12", "steps=1"], "datasets=1000000000000"),
    ("jsp-table", ["steps=1", "posterior_samples=1e10"], "posterior_samples=10000000000"),
]


@pytest.mark.parametrize("name, sets, setting", CASES, ids=[f"{n}:{' '.join(s)}" for n, s, _ in CASES])
def test_a_setting_that_cannot_fit_is_refused_before_the_folder(name, sets, setting, tmp_path, capsys):
    out = tmp_path / "r"
    assert main(["run", name, "--preset", "quick", "--threads", "1", "--set", *sets, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err, err
    assert f"{setting} needs about" in err and "GiB" in err and err.endswith("lower it"), err
    assert not out.exists()


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_the_quick_preset_is_not_refused(name):
    exp = EXPERIMENTS[name]
    exp.validate(exp.typed(resolve(exp.settings, exp.presets["quick"])))


def test_the_largest_phase_is_named(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda: 10 * 2**30)
    memory.require_phases((1.0, "batch_size=1"), (2.0, "hidden=2"))
    with pytest.raises(ConfigError, match=r"^eval_samples=5 needs about 40.0 GiB .*, and 10.0 GiB is available; lower it$"):
        memory.require_phases((20 * 2**30, "batch_size=4"), (40 * 2**30, "eval_samples=5"), (1.0, "hidden=2"))


def test_an_estimate_scales_with_its_setting(monkeypatch):
    """Each phase is refused where its own setting grows past the memory, not another's: the hypergrid's evaluation
    refused at 10 GiB of estimated memory, allowed at 1/10 of that."""
    exp = EXPERIMENTS["hypergrid"]
    monkeypatch.setattr(memory, "available_bytes", lambda: 10 * 2**30)
    per_sample = memory.scored_bytes(128, 2, 16) + 50 * 16  # scored at the longest trajectory (16 transitions of 8 x 8), its states kept
    fits = int(10 * 2**30 / per_sample)
    exp.validate(exp.typed(resolve(exp.settings, exp.presets["quick"], parse_assignments([f"eval_samples={fits // 10}"]))))
    with pytest.raises(ConfigError, match=f"eval_samples={fits + 10} needs about"):
        exp.validate(exp.typed(resolve(exp.settings, exp.presets["quick"], parse_assignments([f"eval_samples={fits + 10}"]))))
