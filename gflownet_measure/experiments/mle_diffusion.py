"""`gflownet-measure run mle-diffusion` and `mle-diffusion-table`: diffusion models as GFlowNets trained from data
(Zhang et al. 2023a; Lahlou et al. 2023, section 4.5, Table 4).

One run trains the denoiser :math:`P_F` of :mod:`gflownet_measure.environments.diffusion` by maximum likelihood of data through the
variational bound (the ``mle`` objective of :mod:`gflownet_measure.objectives`), on trajectories walked back from
training points with :math:`P_B`: the noising process, learned (``learn_backward=true``, its variances
:math:`\\bar\\beta_t e^{\\phi_t}`, path-wise through reparametrised walks) or DDPM's (``false``, :math:`\\phi = 0` frozen).

Metrics (held-out points, one fixed dequantisation):

- the negative log-likelihood bound :math:`-\\mathbb E[w]` and the ``K``-sample importance-weighted bound
  :math:`-\\log \\frac1K \\sum_k e^{w_k}` (:func:`~gflownet_measure.likelihood.log_likelihood_bounds`), in bits per
  dimension on the 0-255 scale for images (``bpd_*``; the Jacobian of :mod:`gflownet_measure.environments.diffusion_data`), in nats per
  point for the 2-D sets (``nll_*``), each with its standard error over the held-out points;
- sample quality without downloaded weights: the unbiased kernel MMD² (Gaussian kernel, median heuristic) between samples
  and held-out points, and for digits the Frechet distance in the hidden features of a digits classifier trained in the
  run on the training split (``fd_digits``; ``fd_digits_train_vs_test``: the same distance between the training and
  held-out images, its floor at these sample sizes) (:mod:`gflownet_measure.experiments.sample_quality`).

``samples.npz``: ``x [K, dim]`` the model's samples in the data's units, ``phi [T]`` the learned offsets :math:`\\phi_t` of P_B's
log-variances (0 for DDPM's), ``log_beta [T]`` those log-variances :math:`\\log \\beta_t`.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch

from gflownet_measure.environments import diffusion as env
from gflownet_measure.environments.diffusion_data import DATASETS, DataSet, ImageFolderError, check_data, load_data
from gflownet_measure.likelihood import log_likelihood_bounds
from gflownet_measure.objectives import Batch, GFlowNet, get_objective
from gflownet_measure.options import Setting
from gflownet_measure.rollout import rsample_backward, sample_backward, sample_forward
from gflownet_measure.run_files import write_file

from .common import EXECUTION_SETTINGS, SubRun, configure, run_id, run_many, train_gflownet
from .environment import make_environment
from .plots import _finish, optional_figure, plot_history, plot_sample_panels, plt
from .registry import Experiment, register
from .sample_quality import DigitsFeatures, frechet_distance, mmd_rbf
from .settings import ConfigError, build
from .tables import write_table
from .training_config import TrainingConfig, training_settings

SETTINGS = {
    "data": Setting("moons", "training data: digits (sklearn 8x8), moons, ring (8 Gaussians), imagenet32 (data_dir)", choices=DATASETS),
    "data_dir": Setting("", "folder of the downsampled ImageNet 32x32 npz files (data=imagenet32)", path=True),
    **{k: v for k, v in env.SETTINGS.items() if k != "dim"},  # the dimension is the data's
    **training_settings(without=("lr_logZ", "lr_flow", "epsilon", "lr_backward")),  # no log Z, no state flow, batches of its own (data); lr_backward below
    "backward_rule": Setting(
        "elbo",
        "how a learned P_B trains (learn_backward=true): elbo (the same bound as P_F, path-wise through reparametrised walks) or tbc (MLE-GFN, Zhang et al. 2023a: trajectory-balance consistency over tbc_samples walks per point, P_F by the bound with P_B held)",
        choices=("elbo", "tbc"),
    ),
    "tbc_weight": Setting(1.0, "backward_rule=tbc: alpha, the weight of the consistency term", low=0.0),
    "tbc_samples": Setting(2, "backward_rule=tbc: K backward walks per data point (the batch holds batch_size x K walks)", low=2),
    "lr_backward": Setting(0.0, "Adam learning rate of a learned P_B (0 = lr); the theory paper's appendix C.6: 2e-5 against 2e-4 for P_F", low=0.0),
    "eval_points": Setting(0, "held-out points for the final NLL bounds (0 = the whole test set)", low=0),
    "iw_samples": Setting(64, "K: backward trajectories per held-out point for the importance-weighted bound", low=1),
    "monitor_points": Setting(256, "held-out points of the bound logged at each evaluation (one trajectory each)", low=1),
    "n_samples": Setting(2000, "samples drawn from the trained model for the sample-quality scores and figures", low=2),
}

PRESETS = {
    # a working sampler on a 2-D set in about two minutes on one CPU thread
    "quick": {
        "data": "moons",
        "n_steps": 20,
        "hidden": 64,
        "steps": 800,
        "batch_size": 256,
        "lr": 3e-3,
        "eval_every": 200,
        "eval_points": 1000,
        "iw_samples": 16,
        "n_samples": 2000,
    },
    # the CPU comparison: an MLP denoiser (width 256) on the 64 pixels of the digits, T = 10 (about 10 minutes a run on one thread)
    "digits": {
        "data": "digits",
        "n_steps": 10,
        "hidden": 256,
        "steps": 1000,
        "batch_size": 64,
        "lr": 2e-3,
        "lr_milestone": 400,
        "lr_gamma": 0.5,
        "eval_every": 250,
        "iw_samples": 64,
        "n_samples": 1000,
    },
    # Lahlou et al. 2023 section 4.5 and appendix C.6: ImageNet-32, T = 100, MLE-GFN's rule, lr 2e-4 (P_F) and 2e-5 (P_B);
    # an MLP (not the paper's U-Net), meant for a GPU; 100,000 of the paper's 200,000 updates
    "paper": {
        "data": "imagenet32",
        "n_steps": 100,
        "hidden": 2048,
        "steps": 100000,
        "batch_size": 128,
        "lr": 2e-4,
        "lr_backward": 2e-5,
        "backward_rule": "tbc",
        "eval_every": 5000,
        "eval_points": 10000,
        "iw_samples": 16,
        "monitor_points": 512,
        "n_samples": 1000,
    },
}


def _validate(cfg: dict) -> None:
    """The data must be there (the ImageNet-32 folder: a one-line error naming what is missing) and the settings consistent."""
    try:
        check_data(cfg["data"], cfg["data_dir"])
    except ImageFolderError as e:
        raise ConfigError(str(e)) from None
    if cfg["data_dir"] and cfg["data"] != "imagenet32":
        raise ConfigError(f"data_dir is read only with data=imagenet32, not data={cfg['data']}; drop it or set data=imagenet32")
    build(env.DiffusionConfig, cfg | {"dim": 1})


def make_gflownet(cfg: dict, data: DataSet):
    """The graph and a fresh GFlowNet (the denoiser, the noising process) for ``cfg`` on ``data``."""
    _, graph, pf, pb = make_environment("diffusion", cfg | {"dim": data.dim})
    return graph, GFlowNet(pf, pb)


def data_states(x: torch.Tensor, n_steps: int) -> torch.Tensor:
    """Data points ``x [B, n]`` (model units) as terminal states ``(x, T + 1)`` of the diffusion graph."""
    return torch.cat([x, torch.full((len(x), 1), float(n_steps + 1), dtype=x.dtype)], 1)


def objective_of(cfg: dict):
    """The registered objective of a run, its hyper-parameters set: ``mle_tbc`` for a learned P_B under ``backward_rule=tbc``, else ``mle``."""
    return configure(get_objective("mle_tbc" if cfg["learn_backward"] and cfg["backward_rule"] == "tbc" else "mle"), cfg)


def make_batches(gfn: GFlowNet, graph, data: DataSet, cfg: dict):
    """``step -> Batch``: ``batch_size`` training points (fresh dequantisation) walked back with :math:`P_B`: once each,
    reparametrised when :math:`P_B` is learned by the bound; ``tbc_samples`` times each, not reparametrised, under
    MLE-GFN's rule (the K blocks of :func:`~gflownet_measure.objectives` ``mle_tbc``)."""
    tbc = objective_of(cfg).name == "mle_tbc"
    pathwise = cfg["learn_backward"] and not tbc
    walk = rsample_backward if pathwise else sample_backward

    def batches(step: int) -> Batch:
        idx = torch.randint(len(data.train), (cfg["batch_size"],), device="cpu").numpy()  # the training set stays in host memory
        x = data.to_model(data.train[idx])
        if tbc:
            x = x.repeat(cfg["tbc_samples"], 1)
        return Batch(graph, walk(graph, gfn.pb, data_states(x, cfg["n_steps"])), pathwise=pathwise)

    return batches


def _nll_metrics(data: DataSet, elbo: torch.Tensor, iw: torch.Tensor, prefix: str = "") -> dict:
    """The two bounds in data units, with standard errors over the points: bits/dim (images) or nats per point."""
    out = {}
    for name, v in (("bound", elbo), ("iw", iw)):
        mean, se = float(v.mean()), float(v.std() / math.sqrt(len(v))) if len(v) > 1 else float("nan")
        if data.levels:
            out[f"{prefix}bpd_{name}"], out[f"{prefix}bpd_{name}_se"] = data.bits_per_dim(mean), se / (data.dim * math.log(2))
        else:
            out[f"{prefix}nll_{name}"], out[f"{prefix}nll_{name}_se"] = data.nll_data_units(mean), se
    return out


def _samples(graph, gfn: GFlowNet, n: int, chunk: int = 1000) -> torch.Tensor:
    return torch.cat([sample_forward(graph, gfn.pf, min(chunk, n - i)).terminal[:, :-1] for i in range(0, n, chunk)])


def sample_quality(data: DataSet, x: torch.Tensor) -> dict:
    """MMD² to the held-out points (data units; grey levels for images) and, for digits, the classifier-feature Frechet distance."""
    if data.levels:
        samples, ref = data.to_levels(x), data.test
    else:
        samples, ref = data.to_data(x), data.test
    out = {"mmd2": mmd_rbf(samples, ref)}
    if data.train_labels is not None:
        features = DigitsFeatures(data.train, data.train_labels)
        out |= {
            "fd_digits": frechet_distance(features(samples), features(data.test)),
            "fd_digits_train_vs_test": frechet_distance(features(data.train), features(data.test)),
            "digits_classifier_test_accuracy": features.accuracy(data.test, data.test_labels),
        }
    return out


@optional_figure
def _variance_figure(runs: list[tuple[str, Path]], path: Path, title: str) -> None:
    """P_B's noising variances :math:`\\log \\beta_t = \\log \\bar\\beta_t + \\varphi_t` per step ``t`` of each row's runs
    (``samples.npz``'s ``log_beta``; one line per seed), the fixed row being DDPM's schedule itself."""
    fig, ax = plt.subplots(figsize=(5.5, 3.8))
    colours: dict[str, str] = {}
    for label, npz in runs:
        with np.load(npz) as z:
            log_beta = z["log_beta"]
        first = label not in colours
        colour = colours.setdefault(label, f"C{len(colours)}")
        ax.plot(np.arange(1, len(log_beta) + 1), log_beta, color=colour, marker="o", ms=3, alpha=0.7, label=label if first else None)
    ax.set_xlabel("step t (x_{t-1} -> x_t)")
    ax.set_ylabel("log beta_t")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    _finish(fig, path, title)


@optional_figure
def _image_grid(data: DataSet, samples: np.ndarray, path: Path, title: str) -> None:
    """Held-out images beside model samples, 10 x 10 each (grey levels; the first channel of colour images as RGB)."""
    C, H, W = data.image_shape
    fig, axes = plt.subplots(1, 2, figsize=(8, 4.2))
    for ax, (name, imgs) in zip(axes, (("held-out data", data.test[:100]), ("samples", samples[:100]))):
        imgs = np.clip(imgs / (data.levels - 1), 0, 1).reshape(-1, C, H, W).transpose(0, 2, 3, 1)
        n = int(math.ceil(math.sqrt(len(imgs))))
        canvas = np.ones((n * (H + 1), n * (W + 1), C))
        for i, im in enumerate(imgs):
            r, c = divmod(i, n)
            canvas[r * (H + 1) : r * (H + 1) + H, c * (W + 1) : c * (W + 1) + W] = im
        ax.imshow(canvas[..., 0] if C == 1 else canvas, cmap="gray_r" if C == 1 else None, vmin=0, vmax=1)
        ax.set_title(name)
        ax.axis("off")
    _finish(fig, path, title)


def _figure(data: DataSet, x: torch.Tensor, path: Path, title: str) -> None:
    if data.image_shape is not None:
        _image_grid(data, data.to_levels(x), path, title)
        return
    ref = data.test
    lo, hi = np.minimum(ref.min(0), -1.0) - 0.5, np.maximum(ref.max(0), 1.0) + 0.5
    hist, _, _ = np.histogram2d(ref[:, 0], ref[:, 1], bins=100, range=[[lo[0], hi[0]], [lo[1], hi[1]]])
    plot_sample_panels(hist, (lo[0], hi[0], lo[1], hi[1]), {"held-out data": ref, "samples": data.to_data(x)}, path, title)


def run(cfg: dict, out: Path, resume: bool) -> dict:
    data = load_data(cfg["data"], cfg["data_dir"])
    graph, gfn = make_gflownet(cfg, data)
    T = cfg["n_steps"]
    n_eval = cfg["eval_points"] or len(data.test)
    held_out = data.to_model(data.test[:n_eval], torch.Generator().manual_seed(0))  # one fixed dequantisation
    monitor = data_states(held_out[: cfg["monitor_points"]], T)

    def evaluate() -> dict:
        elbo, _ = log_likelihood_bounds(graph, gfn.pf, gfn.pb, monitor, 1)
        return {k: v for k, v in _nll_metrics(data, elbo, elbo).items() if "bound" in k and not k.endswith("_se")}

    history = train_gflownet(gfn, graph, objective_of(cfg), build(TrainingConfig, cfg), run_id(cfg), out, resume, evaluate, make_batches(gfn, graph, data, cfg))
    elbo, iw = log_likelihood_bounds(graph, gfn.pf, gfn.pb, data_states(held_out, T), cfg["iw_samples"])
    x = _samples(graph, gfn, cfg["n_samples"])
    phi = gfn.pb.phi.detach().cpu()
    write_file(out / "samples.npz", lambda f: np.savez(f, x=data.to_data(x), phi=phi.numpy(), log_beta=gfn.pb.log_variances().detach().cpu().numpy()))
    row = f"learned P_B ({cfg['backward_rule']})" if cfg["learn_backward"] else "fixed P_B (DDPM)"
    plot_history(history, "bpd_bound" if data.levels else "nll_bound", out / "nll.png", f"held-out NLL bound during training ({data.name}, {row})", log_y=False)
    _figure(data, x, out / "samples.png", f"{data.name}, T = {T}, {row}")
    return {
        **_nll_metrics(data, elbo, iw),
        **sample_quality(data, x),
        "eval_points": n_eval,
        "iw_samples": cfg["iw_samples"],
        "phi_mean": float(phi.mean()),
        "phi_min": float(phi.min()),
        "phi_max": float(phi.max()),
        "seconds": history[-1]["seconds"],
        "steps": cfg["steps"],
    }


register(
    Experiment(
        "mle-diffusion",
        "diffusion model as a GFlowNet trained from data by maximum likelihood, P_B learned or DDPM's (Zhang et al. 2023a; section 4.5)",
        SETTINGS,
        PRESETS,
        run,
        _validate,
    )
)

# --- The comparison of Table 4: learned against fixed P_B, same steps and seeds -----------------------------

ROWS = (
    ("learned P_B, TBC (MLE-GFN)", "tbc", {"learn_backward": True, "backward_rule": "tbc"}),
    ("learned P_B, bound", "elbo", {"learn_backward": True, "backward_rule": "elbo"}),
    ("fixed P_B (DDPM)", "fixed", {"learn_backward": False}),
)
"""The rows: label, sub-folder, the settings that make them; the last is the baseline the others are paired with."""
PAPER = "Lahlou et al. 2023, Table 4 (ImageNet-32, T = 100, U-Net): NLL 4.57 -> 4.47 bits/dim, FID 17.65 -> 16.36 (fixed -> learned P_B)"

TABLE_SETTINGS = {k: v for k, v in SETTINGS.items() if k not in ("learn_backward", "backward_rule")} | {
    "seeds": Setting(3, "seeds per row: --seed, --seed + 1, ... (each seed trains every row)", low=1),
    **EXECUTION_SETTINGS,
}
TABLE_PRESETS = {
    "quick": PRESETS["quick"] | {"steps": 300, "seeds": 2},
    "digits": PRESETS["digits"] | {"seeds": 3},
    "paper": PRESETS["paper"] | {"seeds": 3},
}


def _validate_table(cfg: dict) -> None:
    _validate({k: v for k, v in cfg.items() if k not in ("seeds", *EXECUTION_SETTINGS)} | {"learn_backward": True, "backward_rule": "tbc"})


def _stats(v: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (``ddof = 1``; ``None`` for one seed)."""
    a = np.asarray(v, dtype=np.float64)
    return float(a.mean()), (float(a.std(ddof=1)) if len(a) > 1 else None)


def _cell(mean: float, std: float | None, sign: str = "") -> str:
    return f"{mean:>{sign}12.4f} ± {std:<7.4f}" if std is not None else f"{mean:>{sign}12.4f}" + " " * 10


def run_table(cfg: dict, out: Path, resume: bool) -> dict:
    """Every row over ``seeds`` seeds (``out/<row>/seed<k>``, finished ones kept on resume); the table with each learned
    row's differences from the fixed one, paired by seed."""
    base_seed = torch.initial_seed()
    common = {k: v for k, v in cfg.items() if k not in ("seeds", *EXECUTION_SETTINGS)}
    keys = [(label, folder, base_seed + k) for k in range(cfg["seeds"]) for label, folder, _ in ROWS]
    made = {folder: overrides for _, folder, overrides in ROWS}
    jobs = [SubRun(out / folder / f"seed{seed}", seed, common | {"backward_rule": "elbo"} | made[folder]) for label, folder, seed in keys]
    finished = run_many(run, jobs, resume, cfg["jobs"], executor=cfg["executor"], address=cfg["address"])
    unit = "bpd" if "bpd_bound" in finished[0] else "nll"
    names = [f"{unit}_bound", f"{unit}_iw", "mmd2"] + (["fd_digits"] if "fd_digits" in finished[0] else [])
    by_row = {label: {n: [m[n] for (lab, _, _), m in zip(keys, finished) if lab == label] for n in names} for label, _, _ in ROWS}
    history = [
        {"step": i + 1, "trajectories": 0, "row": label, "seed": seed, **{n: m[n] for n in names}}
        for i, ((label, _, seed), m) in enumerate(zip(keys, finished))
    ]
    metrics, lines = (
        {},
        [
            f"{cfg['data']}: mean ± sample std over {cfg['seeds']} seeds, {cfg['steps']} steps each, T = {cfg['n_steps']} ({'bits/dim, 0-255 scale' if unit == 'bpd' else 'nats per held-out point'})",
            f"{'row':<24}" + "".join(f"{n:>22}" for n in names),
        ],
    )
    for label, vals in by_row.items():
        cells = []
        for n in names:
            mean, std = _stats(vals[n])
            metrics[f"{n}/{label}/mean"] = mean
            if std is not None:
                metrics[f"{n}/{label}/std"] = std
            cells.append(_cell(mean, std))
        lines.append(f"{label:<24}" + "".join(cells))
    fixed = ROWS[-1][0]
    for learned, folder, _ in ROWS[:-1]:
        diff_cells = []
        for n in names:  # paired by seed: the same seed trains every row
            mean, std = _stats([a - b for a, b in zip(by_row[learned][n], by_row[fixed][n])])
            metrics[f"{n}/{folder}-fixed/mean"] = mean
            if std is not None:
                metrics[f"{n}/{folder}-fixed/std"] = std
            diff_cells.append(_cell(mean, std, "+"))
        lines.append(f"{folder + ' - fixed (paired)':<24}" + "".join(diff_cells))
    lines.append(f"paper: {PAPER}")
    write_table(out, "\n".join(lines) + "\n", history, jobs[0].out, ("samples.png",))
    _variance_figure(
        [(label, job.out / "samples.npz") for (label, _, _), job in zip(keys, jobs)],
        out / "variances.png",
        f"{cfg['data']}, T = {cfg['n_steps']}: P_B's noising variances, every seed",
    )
    return metrics | {"seeds": cfg["seeds"]}


register(
    Experiment(
        "mle-diffusion-table",
        "Table 4: learned P_B (MLE-GFN's TBC rule, and the bound) against fixed (DDPM) over seeds, held-out NLL and sample quality, paired differences",
        TABLE_SETTINGS,
        TABLE_PRESETS,
        run_table,
        _validate_table,
        multi_run=True,
    )
)
