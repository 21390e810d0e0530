"""Smoke tests of `gflownet-measure run quarter-disc` and `quarter-disc-figure1` (tiny steps; the run-folder contract, docs/references.md)."""
import json

import numpy as np
import pytest
import torch

from conftest import check_contract
from gflownet_measure.environments import quarter_disc as qd
from gflownet_measure.experiments.cli import main
from gflownet_measure.experiments.environment import make_environment
from gflownet_measure.experiments.quarter_disc import CONFIGS, ORDERINGS, Reference, curve_mean, orderings_held
from gflownet_measure.metrics import expected_sample_tv, total_variation

TINY = ["steps=4", "eval_every=2", "eval_samples=200", "batch_size=16", "hidden=16", "n_layers=1"]

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.slow
def test_run_writes_the_contract(tmp_path):
    """One configuration not covered by the figure-1 test below (which runs every loss x P_B x rho)."""
    out = tmp_path / "run"
    assert main(["run", "quarter-disc", "--out", str(out), "--threads", "1", "--set", *TINY, "objective=tb", "backward=learned", "jacobian=false"]) == 0
    check_contract(out)
    metrics = json.loads((out / "metrics.json").read_text())
    # JSDs lie in [0, log 2]; log Z exact is log 0.305
    assert all(0 <= metrics[k] <= np.log(2) for k in ("jsd_exact", "jsd_rejection", "jsd_floor", "jsd_rejection_floor"))
    # the level TV of the 200 samples is half the L1 distance of the reported fractions and masses
    fractions, exact = ([metrics[f"level_mass_{v}{tail}"] for v in ("0.1", "0.6", "2.6")] for tail in ("", "_exact"))
    assert metrics["level_tv"] == pytest.approx(0.5 * np.abs(np.subtract(fractions, exact)).sum(), abs=1e-12) and sum(fractions) == pytest.approx(1)
    assert 0 < metrics["level_tv_floor"] < 0.1 and 0 <= metrics["level_tv_exact_samples"] < 0.2
    assert metrics["log_Z_exact"] == pytest.approx(np.log(0.305))
    rows = [json.loads(r) for r in (out / "history.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4] and all("jsd_exact" in r and "level_tv" in r for r in rows)
    with np.load(out / "samples.npz") as z:
        x = z["x"]
    assert x.shape == (200, 2) and (x >= 0).all() and (x <= 1 + 1e-9).all()
    assert {"jsd.png", "level_tv.png", "figure2.png"} <= {p.name for p in out.glob("*.png")}


def test_the_papers_network_is_three_leaky_relu_layers_under_every_head():
    """n_layers=3 activation=leaky_relu flow_torso=shared: P_F's torso is 3 Linear+LeakyReLU blocks, and the learned P_B
    uses it; DB's state flow is a linear head on it (the default keeps 4 ELU blocks and a flow of its own)."""
    space, graph, pf, pb = make_environment("quarter-disc", qd.QuarterDiscConfig(n_layers=3, activation="leaky_relu", flow_torso="shared", backward="learned"))
    assert [type(m) for m in pf.torso] == [torch.nn.Linear, torch.nn.LeakyReLU] * 3 and pb.torso is pf.torso
    assert space.flow_torso == "shared"
    _, _, default, _ = make_environment("quarter-disc", qd.QuarterDiscConfig())
    assert [type(m) for m in default.torso] == [torch.nn.Linear, torch.nn.ELU] * 4


@pytest.mark.slow
def test_db_with_the_papers_network_trains(tmp_path):
    out = tmp_path / "run"
    assert main(["run", "quarter-disc", "--out", str(out), "--threads", "1", "--set", *(a for a in TINY if not a.startswith("n_layers")), "objective=db", "backward=learned", "n_layers=3", "activation=leaky_relu", "flow_torso=shared"]) == 0
    check_contract(out)


def test_level_tv_sees_what_the_kde_cannot():
    """Exact samples score near the level TV's floor. Spreading each sample of a 2.6-level square uniformly over the square
    of twice its side around the same centre moves 3/4 of that level's mass 0.341 to lower levels: level TV about 0.26, while
    the JSD to the rejection KDE stays below 0.002 (measured 0.0006-0.0012 over 4 seeds, exact samples 0.0003-0.0008). A sampler
    on one level (all in a 2.6 square) scores 1 - 0.341 analytically. 2,000 points: the floor is 0.0125; exact samples' TV
    ranged 0.005-0.016 over 4 seeds (measured), tolerance 0.025."""
    ref = Reference.build(2000, 0.1, seed=0)
    assert total_variation(ref.level_fractions(ref.control), ref.masses) < expected_sample_tv(ref.masses, 2000) + 0.025
    x = ref.control.clone()
    square = qd.reward_level(x) == 2
    noise = torch.rand(int(square.sum()), 2, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x[square] = torch.where(x[square] < 0.5, 0.15, 0.85) + 0.2 * (noise - 0.5)  # the squares are (0.1, 0.2) and (0.8, 0.9) per coordinate
    blurred = ref.scores(x)
    assert blurred["level_tv"] > 0.2 and blurred["jsd_rejection"] < 0.002
    assert ref.scores(torch.full((10, 2), 0.15, dtype=torch.float64))["level_tv"] == pytest.approx(1 - float(qd.level_masses()[2]), abs=1e-12)


@pytest.mark.parametrize("argv, message", [
    (["--set", "objective=fm"], "objective='fm' is not allowed; valid: db, subtb, tb, vargrad"),
    (["--set", "backward=tied"], "valid: uniform, learned"),
    (["--set", "rho=0.9"], "rho=0.9 is out of range"),
    (["--set", "jacobian=maybe"], "jacobian='maybe' is not a valid bool"),
    (["--set", "concentration_max=0.1"], "concentration_max=0.1 is out of range; valid: [0.2, inf]"),
    (["--set", "n_components=0"], "n_components=0 is out of range"),
])
def test_bad_settings_are_one_line(argv, message, capsys, tmp_path):
    assert main(["run", "quarter-disc", "--out", str(tmp_path / "r"), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and message in err


@pytest.mark.slow
def test_figure1_runs_every_configuration(tmp_path):
    out = tmp_path / "fig"
    assert main(["run", "quarter-disc-figure1", "--out", str(out), "--threads", "1", "--set", "steps=2", "eval_every=1", "eval_samples=50", "batch_size=8", "hidden=8", "n_layers=1", "seeds=1"]) == 0
    check_contract(out)
    metrics = json.loads((out / "metrics.json").read_text())
    names = [f"{loss}-{b}-rho{r}" for r in (0.25, 0.1) for loss in ("tb", "db") for b in ("uniform", "learned")]
    assert all(f"jsd_exact/{n}/mean" in metrics and f"jsd_rejection_curve/{n}/mean" in metrics and 0 <= metrics[f"level_tv/{n}/mean"] <= 1 for n in names)
    assert 0 < metrics["level_tv_floor/mean"] < 0.2 and all(metrics[f"held/{label}/level_tv/final"] <= 4 for label in ORDERINGS)
    assert 0 < metrics["jsd_rejection_floor/mean"] < metrics["jsd_floor/mean"]  # two KDEs of R's samples agree better than either with R
    # every ordering, counted on both metrics, at the end and over the curve, out of 4 pairs (one seed)
    assert all(metrics[f"pairs/{label}"] == 4 and 0 <= metrics[f"held/{label}/{key}/{when}"] <= 4 for label in ORDERINGS for key in ("jsd_exact", "jsd_rejection") for when in ("final", "curve"))
    assert {"figure1.png", "figure1_rejection.png", "figure1_levels.png", "figure2.png"} <= {p.name for p in out.glob("*.png")}
    assert all((out / n / "seed0" / "metrics.json").exists() for n in names)


@pytest.mark.slow
def test_figure1_resume_keeps_finished_runs_and_refuses_foreign_ones(tmp_path, capsys):
    """On resume a finished sub-run is kept only if its config.json holds the job's seed and settings."""
    out = tmp_path / "fig"
    args = ["--threads", "1", "--set", "steps=2", "eval_every=1", "eval_samples=50", "batch_size=8", "hidden=8", "n_layers=1", "seeds=1"]
    assert main(["run", "quarter-disc-figure1", "--out", str(out), *args]) == 0
    first = json.loads((out / "metrics.json").read_text())["seconds"]
    sub = out / "db-learned-rho0.1" / "seed0"
    before = (sub / "history.jsonl").read_text()
    assert main(["run", "quarter-disc-figure1", "--out", str(out), "--resume"]) == 0
    assert (sub / "history.jsonl").read_text() == before  # kept, not retrained
    capsys.readouterr()
    assert main(["run", "quarter-disc", "--out", str(sub), "--resume"]) == 2  # a sub-run is resumed through its table
    assert main(["run", "quarter-disc", "--out", str(out), "--resume"]) == 2  # a table is not a single run
    errors = capsys.readouterr().err.strip().splitlines()
    assert f"is a folder of the multi-run experiment quarter-disc-figure1 in {out}" in errors[0] and "holds a run of quarter-disc-figure1, not quarter-disc" in errors[1]
    assert json.loads((out / "metrics.json").read_text())["seconds"] > first  # the wall clock of both invocations
    record = json.loads((sub / "config.json").read_text())
    record["settings"]["steps"] = 3
    (sub / "config.json").write_text(json.dumps(record))
    capsys.readouterr()
    assert main(["run", "quarter-disc-figure1", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "db-learned-rho0.1/seed0 holds a run with another seed or other settings" in err


def test_curve_mean_is_the_trapezoidal_mean_height():
    assert curve_mean([1.0], [0.3]) == 0.3
    assert curve_mean([0, 1, 2], [0.2, 0.2, 0.2]) == pytest.approx(0.2)
    assert curve_mean([0, 10], [0.0, 1.0]) == pytest.approx(0.5)
    # uneven spacing: the wide second interval weighs 3x the first
    assert curve_mean([0, 1, 4], [1.0, 0.0, 0.0]) == pytest.approx(0.5 / 4)


def test_orderings_count_the_pairs_that_differ_in_one_factor():
    """Two seeds per configuration; a figure of 1 for the expected order everywhere, then one pair broken on purpose."""
    base = {(loss, backward, rho): [float(loss == "db") + float(backward == "uniform") + float(rho == 0.1)] * 2 for loss, backward, rho in CONFIGS}
    assert orderings_held(base) == {label: (8, 8) for label in ORDERINGS}  # 4 settings of the other two factors x 2 seeds
    base[("tb", "learned", 0.25)][1] = 5.0  # now worse than its DB, uniform and rho = 0.1 partners on seed 1
    assert orderings_held(base) == {label: (7, 8) for label in ORDERINGS}
    base[("tb", "learned", 0.1)] = [0.0]  # a configuration with fewer seeds than its partners is an error, not a silent truncation
    with pytest.raises(ValueError):
        orderings_held(base)
