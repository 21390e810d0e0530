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

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from gflownet_measure.environments import diffusion as env
from gflownet_measure.environments.diffusion_data import DATASETS, DataSet, ImageFolderError, check_data, load_data
from gflownet_measure.likelihood import log_likelihood_bounds
from gflownet_measure.objectives import Batch, GFlowNet, get_objective
from gflownet_measure.options import check_options, option, settings_of
from gflownet_measure.rollout import rsample_backward, sample_backward, sample_forward
from gflownet_measure.run_files import write_file

from .common import ExecutionConfig, SubRun, configure, run_many, train_gflownet
from .environment import make_environment
from .memory import PARAMETER_BYTES, SUB_RUN_BYTES, require_memory, require_phases
from .plots import _finish, optional_figure, plot_history, plot_sample_panels, plt
from .registry import Experiment, RunContext, register
from .sample_quality import DigitsFeatures, frechet_distance, mmd_rbf
from .settings import ConfigError, build, flatten
from .tables import write_table
from .training_config import TRAINING_SETTINGS, TrainingConfig, training_settings


@dataclass(frozen=True)
class DataSource:
    """The data a run trains on and is scored against (:mod:`gflownet_measure.environments.diffusion_data`)."""

    data: str = option("moons", "training data: digits (sklearn 8x8), moons, ring (8 Gaussians), imagenet32 (data_dir)", choices=DATASETS)
    data_dir: str = option("", "folder of the downsampled ImageNet 32x32 npz files (data=imagenet32)", path=True)

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class BackwardRule:
    """How a learned P_B trains (``learn_backward=true``), and MLE-GFN's consistency term (``backward_rule=tbc``); its
    learning rate is the training's ``lr_backward``."""

    backward_rule: str = option(
        "elbo",
        "how a learned P_B trains (learn_backward=true): elbo (the same bound as P_F, path-wise through reparametrised walks) or tbc (MLE-GFN, Zhang et al. 2023a: trajectory-balance consistency over tbc_samples walks per point, P_F by the bound with P_B held)",
        choices=("elbo", "tbc"),
    )
    tbc_weight: float = option(1.0, "backward_rule=tbc: alpha, the weight of the consistency term", low=0.0)
    tbc_samples: int = option(2, "backward_rule=tbc: K backward walks per data point (the batch holds batch_size x K walks)", low=2)

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class Evaluation:
    """What the trained model is scored on: the held-out points of the NLL bounds, and the samples of the sample-quality scores."""

    eval_points: int = option(0, "held-out points for the final NLL bounds (0 = the whole test set)", low=0)
    iw_samples: int = option(64, "K: backward trajectories per held-out point for the importance-weighted bound", low=1)
    monitor_points: int = option(256, "held-out points of the bound logged at each evaluation (one trajectory each)", low=1)
    n_samples: int = option(2000, "samples drawn from the trained model for the sample-quality scores and figures", low=2)

    def __post_init__(self):
        check_options(self)


@dataclass(frozen=True)
class MleDiffusionRun:
    """The settings of ``run mle-diffusion``: the data (:class:`DataSource`), the schedule, denoiser and P_B
    (:class:`~gflownet_measure.environments.diffusion.DiffusionConfig`; its ``dim`` is not a setting: the data's, set
    when the run loads them), the training (:class:`~gflownet_measure.experiments.training_config.TrainingConfig`), the
    rule of a learned P_B (:class:`BackwardRule`) and the scores (:class:`Evaluation`)."""

    source: DataSource
    space: env.DiffusionConfig
    training: TrainingConfig
    backward: BackwardRule
    evaluation: Evaluation


LR_BACKWARD = dataclasses.replace(
    TRAINING_SETTINGS["lr_backward"], help="Adam learning rate of a learned P_B (0 = lr); the theory paper's appendix C.6: 2e-5 against 2e-4 for P_F"
)
"""The training's ``lr_backward`` (:attr:`TrainingConfig.lr_backward`), with this experiment's help."""

SETTINGS = {
    **settings_of(DataSource),
    **{k: v for k, v in env.SETTINGS.items() if k != "dim"},  # the dimension is the data's
    **training_settings(without=("lr_logZ", "lr_flow", "epsilon", "lr_backward")),  # no log Z, no state flow, batches of its own (data); lr_backward below
    **settings_of(BackwardRule),
    "lr_backward": LR_BACKWARD,
    **settings_of(Evaluation),
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


DATA_DIMS = {"digits": 64, "moons": 2, "ring": 2, "imagenet32": 3072}
"""The dimension of each data set (:mod:`gflownet_measure.environments.diffusion_data`), for the memory estimate made before they are loaded."""

TRANSITION_BYTES = (23.4, 21.0, 16.0)
"""Bytes per trajectory and transition (T + 2 of them): per unit of the denoiser with gradients (an update) and without
(the importance-weighted bound), and per coordinate of the data (the states and the network's input and output layers,
counted at 4 float32 copies). Measured on moons, T = 20, hidden 64: 32.9 KB per trajectory of an update from batches
of 1,024 to 8,192; 29.4 KB per trajectory of the bound, ``eval_points=1``, ``iw_samples`` from 16,384 to 65,536."""

SAMPLE_BYTES = (50.0, 24.0)
"""Bytes per sample of the sample-quality scores and figure, fixed and per coordinate (kept in float32, converted to the
data's units in float64; drawn 1,000 at a time): measured on moons from 2,000 to 200,000 samples, 47 bytes per sample."""

IW_CHUNK = 4096
"""Trajectories per walk of :func:`~gflownet_measure.likelihood.log_likelihood_bounds` (its ``chunk``): ``iw_samples`` at least."""


def _require_memory(settings: MleDiffusionRun) -> None:
    """The memory of each phase (:func:`~gflownet_measure.experiments.memory.require_phases`): one update (``batch_size``
    walks, ``tbc_samples`` each under MLE-GFN's rule, with gradients), the model (the PIS denoiser: about 7 hidden x
    hidden blocks and its input and output layers, :data:`~gflownet_measure.experiments.memory.PARAMETER_BYTES`), the
    importance-weighted bound (``iw_samples`` walks per point, at least :data:`IW_CHUNK` at once) and the samples
    (``n_samples``): :data:`TRANSITION_BYTES`, :data:`SAMPLE_BYTES`; measured in 2-D, the per-coordinate terms estimated."""
    space, dim, batch_size = settings.space, DATA_DIMS[settings.source.data], settings.training.batch_size
    walks = batch_size * (settings.backward.tbc_samples if space.learn_backward and settings.backward.backward_rule == "tbc" else 1)
    iw, n_samples, h, steps = settings.evaluation.iw_samples, settings.evaluation.n_samples, space.hidden, space.n_steps + 2
    grad, no_grad, coordinate = TRANSITION_BYTES
    require_phases(
        (walks * steps * (grad * h + coordinate * dim), f"batch_size={batch_size}"),
        (PARAMETER_BYTES * (7 * (h + 1) * h + 3 * dim * (h + 1)), f"hidden={h}"),
        (max(iw, IW_CHUNK) * steps * (no_grad * h + coordinate * dim), f"iw_samples={iw}"),
        (n_samples * (SAMPLE_BYTES[0] + SAMPLE_BYTES[1] * dim), f"n_samples={n_samples}"),
    )


def validate(settings: MleDiffusionRun) -> None:
    """The data must be there (the ImageNet-32 folder: a one-line error naming what is missing) and ``data_dir`` read
    (the schedule's consistency is checked when the settings are built), and each phase must fit in memory (:func:`_require_memory`)."""
    source = settings.source
    try:
        check_data(source.data, source.data_dir)
    except ImageFolderError as e:
        raise ConfigError(str(e)) from None
    if source.data_dir and source.data != "imagenet32":
        raise ConfigError(f"data_dir is read only with data=imagenet32, not data={source.data}; drop it or set data=imagenet32")
    _require_memory(settings)


def make_gflownet(space: env.DiffusionConfig, data: DataSet):
    """The graph and a fresh GFlowNet (the denoiser, the noising process) of ``space`` on ``data`` (its ``dim`` is the data's)."""
    _, graph, pf, pb = make_environment("diffusion", dataclasses.replace(space, dim=data.dim))
    return graph, GFlowNet(pf, pb)


def data_states(x: torch.Tensor, n_steps: int) -> torch.Tensor:
    """Data points ``x [B, n]`` (model units) as terminal states ``(x, T + 1)`` of the diffusion graph."""
    return torch.cat([x, torch.full((len(x), 1), float(n_steps + 1), dtype=x.dtype)], 1)


def objective_of(settings: MleDiffusionRun):
    """The registered objective of a run, its hyper-parameters set: ``mle_tbc`` for a learned P_B under ``backward_rule=tbc``, else ``mle``."""
    tbc = settings.space.learn_backward and settings.backward.backward_rule == "tbc"
    return configure(get_objective("mle_tbc" if tbc else "mle"), settings)


def make_batches(gfn: GFlowNet, graph, data: DataSet, settings: MleDiffusionRun) -> Callable[[int], Batch]:
    """``step -> Batch``: ``batch_size`` training points (fresh dequantisation) walked back with :math:`P_B`: once each,
    reparametrised when :math:`P_B` is learned by the bound; ``tbc_samples`` times each, not reparametrised, under
    MLE-GFN's rule (the K blocks of :func:`~gflownet_measure.objectives` ``mle_tbc``)."""
    tbc = objective_of(settings).name == "mle_tbc"
    pathwise = settings.space.learn_backward and not tbc
    walk = rsample_backward if pathwise else sample_backward
    batch_size, tbc_samples, n_steps = settings.training.batch_size, settings.backward.tbc_samples, settings.space.n_steps

    def batches(step: int) -> Batch:
        idx = torch.randint(len(data.train), (batch_size,), device="cpu").numpy()  # the training set stays in host memory
        x = data.to_model(data.train[idx])
        if tbc:
            x = x.repeat(tbc_samples, 1)
        return Batch(graph, walk(graph, gfn.pb, data_states(x, n_steps)), pathwise=pathwise)

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
    if data.train_labels is not None and data.test_labels is not None:  # digits
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
    assert data.image_shape is not None  # an image set: _figure calls it for those only
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


def run(settings: MleDiffusionRun, context: RunContext) -> dict:
    source, evaluation, out = settings.source, settings.evaluation, context.out
    data = load_data(source.data, source.data_dir)
    graph, gfn = make_gflownet(settings.space, data)
    T = settings.space.n_steps
    n_eval = evaluation.eval_points or len(data.test)
    held_out = data.to_model(data.test[:n_eval], torch.Generator().manual_seed(0))  # one fixed dequantisation
    monitor = data_states(held_out[: evaluation.monitor_points], T)

    def evaluate() -> dict:
        elbo, _ = log_likelihood_bounds(graph, gfn.pf, gfn.pb, monitor, 1)
        return {k: v for k, v in _nll_metrics(data, elbo, elbo).items() if "bound" in k and not k.endswith("_se")}

    batches = make_batches(gfn, graph, data, settings)
    history = train_gflownet(gfn, graph, objective_of(settings), settings.training, context, evaluate, batches)
    elbo, iw = log_likelihood_bounds(graph, gfn.pf, gfn.pb, data_states(held_out, T), evaluation.iw_samples)
    x = _samples(graph, gfn, evaluation.n_samples)
    phi = gfn.pb.phi.detach().cpu()
    write_file(out / "samples.npz", lambda f: np.savez(f, x=data.to_data(x), phi=phi.numpy(), log_beta=gfn.pb.log_variances().detach().cpu().numpy()))
    row = f"learned P_B ({settings.backward.backward_rule})" if settings.space.learn_backward else "fixed P_B (DDPM)"
    plot_history(history, "bpd_bound" if data.levels else "nll_bound", out / "nll.png", f"held-out NLL bound during training ({data.name}, {row})", log_y=False)
    _figure(data, x, out / "samples.png", f"{data.name}, T = {T}, {row}")
    return {
        **_nll_metrics(data, elbo, iw),
        **sample_quality(data, x),
        "eval_points": n_eval,
        "iw_samples": evaluation.iw_samples,
        "phi_mean": float(phi.mean()),
        "phi_min": float(phi.min()),
        "phi_max": float(phi.max()),
        "seconds": history[-1]["seconds"],
        "steps": settings.training.steps,
    }


register(
    Experiment(
        "mle-diffusion",
        "diffusion model as a GFlowNet trained from data by maximum likelihood, P_B learned or DDPM's (Zhang et al. 2023a; section 4.5)",
        SETTINGS,
        PRESETS,
        run,
        validate,
        settings_type=MleDiffusionRun,
        evaluation_settings=("n_samples", "iw_samples", "eval_points"),
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

ROW_SETTINGS = ("learn_backward", "backward_rule")
"""The settings each row sets (:data:`ROWS`): not the table's."""


@dataclass(frozen=True)
class MleDiffusionTable:
    """The settings of ``run mle-diffusion-table``: every row's (``run``; its :data:`ROW_SETTINGS` are not the table's,
    they keep their defaults there and each row sets its own), the seeds, and how the runs are spread (:class:`~gflownet_measure.experiments.common.ExecutionConfig`)."""

    run: MleDiffusionRun
    execution: ExecutionConfig
    seeds: int = option(3, "seeds per row: --seed, --seed + 1, ... (each seed trains every row)", low=1)

    def __post_init__(self):
        check_options(self)


TABLE_SETTINGS = {k: v for k, v in SETTINGS.items() if k not in ROW_SETTINGS} | {**settings_of(MleDiffusionTable), **settings_of(ExecutionConfig)}
TABLE_PRESETS = {
    "quick": PRESETS["quick"] | {"steps": 300, "seeds": 2},
    "digits": PRESETS["digits"] | {"seeds": 3},
    "paper": {k: v for k, v in PRESETS["paper"].items() if k not in ROW_SETTINGS} | {"seeds": 3},  # each row sets how P_B trains
}


def _row_settings(settings: MleDiffusionTable, overrides: dict) -> dict:
    """A row's flat settings, as its ``config.json`` records them: the table's (but :data:`ROW_SETTINGS`), then the
    row's ``overrides`` (:data:`ROWS`) over the default rule, the bound."""
    flat = flatten(settings)
    return {k: flat[k] for k in SETTINGS if k not in ROW_SETTINGS} | {"backward_rule": "elbo"} | overrides


def validate_table(settings: MleDiffusionTable) -> None:
    """:func:`validate` of each row's run, and the memory of the table's sub-runs, one per row and seed
    (:data:`~gflownet_measure.experiments.memory.SUB_RUN_BYTES`)."""
    for _, _, overrides in ROWS:  # the rows differ in how P_B trains: MLE-GFN's rule walks tbc_samples per point
        validate(build(MleDiffusionRun, _row_settings(settings, overrides)))
    seeds = settings.seeds
    require_memory(SUB_RUN_BYTES * len(ROWS) * seeds, f"seeds={seeds}")


def _stats(v: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (``ddof = 1``; ``None`` for one seed)."""
    a = np.asarray(v, dtype=np.float64)
    return float(a.mean()), (float(a.std(ddof=1)) if len(a) > 1 else None)


def _cell(mean: float, std: float | None, sign: str = "") -> str:
    return f"{mean:>{sign}12.4f} ± {std:<7.4f}" if std is not None else f"{mean:>{sign}12.4f}" + " " * 10


def run_table(settings: MleDiffusionTable, context: RunContext) -> dict:
    """Every row over ``seeds`` seeds (``out/<row>/seed<k>``, finished ones kept on resume); the table with each learned
    row's differences from the fixed one, paired by seed."""
    out, base, execution = context.out, settings.run, settings.execution
    keys = [(label, folder, context.seed + k) for k in range(settings.seeds) for label, folder, _ in ROWS]
    made = {folder: overrides for _, folder, overrides in ROWS}
    jobs = [SubRun(out / folder / f"seed{seed}", seed, _row_settings(settings, made[folder]), settings_type=MleDiffusionRun) for label, folder, seed in keys]
    finished = run_many(run, jobs, context.resume, execution.jobs, executor=execution.executor, address=execution.address)
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
            f"{base.source.data}: mean ± sample std over {settings.seeds} seeds, {base.training.steps} steps each, T = {base.space.n_steps} ({'bits/dim, 0-255 scale' if unit == 'bpd' else 'nats per held-out point'})",
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
        f"{base.source.data}, T = {base.space.n_steps}: P_B's noising variances, every seed",
    )
    return metrics | {"seeds": settings.seeds}


register(
    Experiment(
        "mle-diffusion-table",
        "Table 4: learned P_B (MLE-GFN's TBC rule, and the bound) against fixed (DDPM) over seeds, held-out NLL and sample quality, paired differences",
        TABLE_SETTINGS,
        TABLE_PRESETS,
        run_table,
        validate_table,
        multi_run=True,
        settings_type=MleDiffusionTable,
    )
)
