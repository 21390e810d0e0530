"""Figures shared by experiments (matplotlib, Agg backend, PNG files).

A figure is never worth a run's results: every drawing function here, and an experiment's own figure built on them,
is wrapped by :func:`optional_figure`, so that a figure that fails is a :class:`FigureWarning` naming the file and
the cause while the run goes on to write its samples and metrics. A figure's file is written as every run file is
(:func:`gflownet_measure.run_files.write_file`: through no symbolic link, inside the run folder); a file that cannot be
written so stops the run (:class:`~gflownet_measure.run_files.RunFileError`), as any run file would.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path
from typing import Callable

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from gflownet_measure.run_files import RunFileError, write_file  # noqa: E402

__all__ = [
    "FigureWarning",
    "optional_figure",
    "plot_history",
    "plot_terminal_samples",
    "plot_grid_pair",
    "plot_bands",
    "plot_density_panels",
    "plot_sample_panels",
    "plot_scatter_panels",
    "plot_per_dataset",
    "plot_edge_marginals",
]


class FigureWarning(UserWarning):
    """A figure was not drawn; the run's results are unaffected."""


def optional_figure(draw: Callable[..., None]) -> Callable[..., None]:
    """``draw(..., path, ...)`` that warns instead of raising: the warning names the figure's file (its first ``Path``
    argument) and the error. Only ``Exception``: Ctrl-C and exits still stop the run."""

    @functools.wraps(draw)
    def guarded(*args, **kwargs) -> None:
        try:
            draw(*args, **kwargs)
        except RunFileError:
            plt.close("all")
            raise
        except Exception as e:
            path = next((a for a in (*args, *kwargs.values()) if isinstance(a, Path)), draw.__name__)
            plt.close("all")
            warnings.warn(f"figure {path} not drawn: {type(e).__name__}: {e}", FigureWarning, stacklevel=2)

    return guarded


def _save(fig, path: Path, **kwargs) -> None:
    """``fig.savefig`` into the run file ``path`` (its format from the suffix), written atomically through no link."""
    write_file(Path(path), lambda f: fig.savefig(f, format=Path(path).suffix.lstrip(".") or "png", **kwargs))


def _finish(fig, path: Path, title: str) -> None:
    """Title the figure, lay it out, write it to ``path`` (PNG, 120 dpi) and free it."""
    fig.suptitle(title)
    fig.tight_layout()
    _save(fig, path, dpi=120)
    plt.close(fig)


@optional_figure
def plot_history(history: list[dict], key: str | list[str], path: Path, title: str, log_y: bool = True) -> None:
    """``key`` (or each of several keys, with a legend) against trajectories seen, one point per evaluation."""
    fig, ax = plt.subplots(figsize=(5, 3.5))
    keys = [key] if isinstance(key, str) else key
    ys_all = []
    for k in keys:
        xs = [r["trajectories"] for r in history if k in r]
        ys = [r[k] for r in history if k in r]
        ys_all += ys
        ax.plot(xs, ys, marker="o", ms=3, label=k)
    ax.set_xlabel("trajectories sampled")
    ax.set_ylabel(keys[0] if len(keys) == 1 else "value")
    if len(keys) > 1:
        ax.legend(fontsize=7)
    if log_y and all(y > 0 for y in ys_all):
        ax.set_yscale("log")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    _save(fig, path, dpi=120)
    plt.close(fig)


@optional_figure
def plot_grid_pair(target: np.ndarray, learned: np.ndarray, path: Path, title: str) -> None:
    """Two 2-D distributions side by side on a shared colour scale (target left, learned right)."""
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.8))
    vmax = max(target.max(), learned.max())
    for ax, img, name in zip(axes, (target, learned), ("target R/Z", "learned P_T")):
        im = ax.imshow(img.T, origin="lower", vmin=0, vmax=vmax, cmap="viridis")
        ax.set_title(name)
        ax.set_xlabel("x_1")
        ax.set_ylabel("x_2")
    fig.colorbar(im, ax=axes, shrink=0.85)
    fig.suptitle(title)
    _save(fig, path, dpi=120)
    plt.close(fig)


@optional_figure
def plot_bands(
    curves: dict[str, tuple], path: Path, title: str, ylabel: str, panels: dict[str, list[str]] | None = None, floor: tuple[str, float] | None = None
) -> None:
    """Mean curves with a band of one standard deviation across seeds (Lahlou et al. 2023, Figure 1: mean ± std of 6 runs):
    ``curves[label] = (x [T], values [S, T])``. The band's lower edge is clipped at a hundredth of the mean, for the logarithmic axis.

    ``panels`` groups labels into side-by-side axes (``{panel title: [labels]}``); default one axis. ``floor = (label,
    value)`` draws a dashed horizontal line on every axis (e.g. what a perfect sampler scores).
    """
    panels = panels or {title: list(curves)}
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.6), squeeze=False)
    for ax, (name, labels) in zip(axes[0], panels.items()):
        for label in labels:
            x, v = curves[label]
            v = np.asarray(v)
            mean, std = v.mean(0), v.std(0)
            ax.plot(x, mean, label=label)
            ax.fill_between(x, np.maximum(mean - std, mean / 100), mean + std, alpha=0.2)
        if floor is not None:
            ax.axhline(floor[1], color="k", linestyle="--", linewidth=0.8, label=floor[0])
        ax.set_yscale("log")
        ax.set_xlabel("trajectories sampled")
        ax.set_ylabel(ylabel)
        ax.set_title(name)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _finish(fig, path, title)


@optional_figure
def plot_density_panels(panels: list[tuple[str, np.ndarray, tuple[float, float, float, float]]], path: Path, title: str, share: tuple[int, ...] = ()) -> None:
    """Side-by-side images ``(title, values [nx, ny], extent (x0, x1, y0, y1))``; NaN is blank.

    Each panel has its own colour scale, except the panels listed in ``share``: they are drawn from 0 to the maximum
    of the first of them (larger values saturate), so that densities of the same quantity can be compared by eye.
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    shared = (0.0, float(np.nanmax(panels[share[0]][1]))) if share else None
    for k, (ax, (name, img, extent)) in enumerate(zip(axes[0], panels)):
        vmin, vmax = shared if shared is not None and k in share else (None, None)
        im = ax.imshow(np.asarray(img).T, origin="lower", extent=extent, cmap="viridis", aspect="equal", vmin=vmin, vmax=vmax)
        ax.set_title(name, fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8, extend="max" if k in share[1:] else "neither")
    _finish(fig, path, title)


@optional_figure
def plot_sample_panels(
    density: np.ndarray, extent: tuple[float, float, float, float], samples: dict[str, np.ndarray], path: Path, title: str, max_points: int = 2000
) -> None:
    """One panel per sample set ``[K, 2]``: the points over the target's density image ``[nx, ny]`` on ``extent``."""
    fig, axes = plt.subplots(1, len(samples), figsize=(4.2 * len(samples), 4), squeeze=False)
    for ax, (name, x) in zip(axes[0], samples.items()):
        ax.imshow(np.asarray(density).T, origin="lower", extent=extent, cmap="Greys", aspect="equal")
        ax.scatter(x[:max_points, 0], x[:max_points, 1], s=2, alpha=0.5, color="tab:red")
        ax.set_xlim(extent[0], extent[1])
        ax.set_ylim(extent[2], extent[3])
        ax.set_title(name, fontsize=9)
    _finish(fig, path, title)


@optional_figure
def plot_scatter_panels(panels: list[tuple[str, np.ndarray, np.ndarray, str, str, bool]], path: Path, title: str) -> None:
    """Side-by-side scatter plots ``(title, x, y, x label, y label, unit square)``, each with the line y = x."""
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    for ax, (name, x, y, xl, yl, unit) in zip(axes[0], panels):
        x, y = np.asarray(x), np.asarray(y)
        ax.scatter(x, y, s=8, alpha=0.6)
        lo, hi = (0.0, 1.0) if unit else (float(min(x.min(), y.min())), float(max(x.max(), y.max())))
        ax.plot([lo, hi], [lo, hi], color="grey", lw=1, ls="--")
        ax.set_xlabel(xl)
        ax.set_ylabel(yl)
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
    _finish(fig, path, title)


@optional_figure
def plot_fit(arrays: dict, path: Path, title: str) -> None:
    """``log P_T`` against ``log R`` of posterior samples, coloured by edge count, with the least-squares line (Deleu et
    al. 2023, Fig. 3c): ``arrays`` holds ``log_pt``, ``log_r`` and ``n_edges``."""
    x, y, k = (np.asarray(arrays[key]) for key in ("log_r", "log_pt", "n_edges"))
    fig, ax = plt.subplots(figsize=(5.2, 4.2))
    points = ax.scatter(x, y, c=k, s=8, alpha=0.7, cmap="viridis")
    fig.colorbar(points, ax=ax, label="edges |E(G)|")
    if len(x) > 1 and x.std() > 0:
        slope, intercept = np.polyfit(x, y, 1)
        xs = np.array([x.min(), x.max()])
        ax.plot(xs, intercept + slope * xs, color="black", lw=1, label=f"least squares, slope {slope:.3f}")
        ax.legend(fontsize=8)
    ax.set_xlabel("log R(G, theta)")
    ax.set_ylabel("log P_T(G, theta) (beam search + IS)")
    ax.grid(alpha=0.3)
    _finish(fig, path, title)


@optional_figure
def plot_per_dataset(panels: list[tuple[str, dict[str, np.ndarray], dict[str, tuple[float, float]]]], path: Path, title: str) -> None:
    """Side-by-side panels of one value per dataset ``(title, {series: values [n]}, {reference: (mean, spread)})``.

    A series is drawn as markers at datasets 0 .. n-1 and its mean as a solid line of its colour; a reference (e.g. a
    paper's mean and standard deviation) as a dashed grey line with a band of +- spread (none when the spread is 0).
    The y axis is logarithmic where every value of the panel is positive.
    """
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for ax, (name, series, references) in zip(axes[0], panels):
        for k, (label, values) in enumerate(series.items()):
            v = np.asarray(values, dtype=float)
            line = ax.plot(np.arange(len(v)), v, marker="os^v"[k % 4], ls="none", ms=5, alpha=0.8, label=f"{label} (mean {v.mean():.4g})")[0]
            ax.axhline(v.mean(), color=line.get_color(), lw=1)
        for k, (label, (mean, spread)) in enumerate(references.items()):
            ax.axhline(mean, color="grey", ls=("--", ":")[k % 2], lw=1.2, label=f"{label} ({mean:.4g}" + (f" ± {spread:.2g})" if spread else ")"))
            if spread > 0:
                ax.axhspan(mean - spread, mean + spread, color="grey", alpha=0.12)
        if all(np.all(np.asarray(v) > 0) for v in series.values()) and all(m > 0 for m, _ in references.values()):
            ax.set_yscale("log")
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))
        ax.set_xlabel("dataset")
        ax.set_title(name, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    _finish(fig, path, title)


@optional_figure
def plot_edge_marginals(marginals: dict[str, np.ndarray], truth: np.ndarray, names: list[str], path: Path, title: str) -> None:
    """Heat maps of posterior edge marginals ``P(i -> j)`` (one panel per sampler in ``marginals``, rows = parent i,
    columns = child j) beside the reference graph ``truth [d, d]`` (0/1), the reference's edges outlined in every panel."""
    panels = {**marginals, "reference graph": np.asarray(truth, dtype=float)}
    d = len(names)
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels) + 0.8, 3.9), squeeze=False)
    for k, (ax, (name, m)) in enumerate(zip(axes[0], panels.items())):
        image = ax.imshow(np.asarray(m), vmin=0.0, vmax=1.0, cmap="Blues")
        for i, j in zip(*np.nonzero(np.asarray(truth))):
            ax.add_patch(matplotlib.patches.Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="crimson", lw=1.2))
        ax.set_xticks(range(d), names, rotation=90, fontsize=7)
        ax.set_yticks(range(d), names if k == 0 else [], fontsize=7)
        ax.set_xlabel("child j", fontsize=8)
        if k == 0:
            ax.set_ylabel("parent i", fontsize=8)
        ax.set_title(name, fontsize=9)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8, label="P(i -> j)")
    fig.suptitle(title)
    _save(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)


@optional_figure
def plot_terminal_samples(x: np.ndarray, path: Path, title: str) -> None:
    """The coordinates of terminal states ``x [K, D]`` that vary: a histogram of one, or a scatter of the first two."""
    varying = [j for j in range(x.shape[1]) if np.ptp(x[:, j]) > 0]
    fig, ax = plt.subplots(figsize=(4.5, 4))
    if len(varying) == 1:
        ax.hist(x[:, varying[0]], bins=60, density=True)
        ax.set_xlabel(f"coordinate {varying[0]}")
        ax.set_ylabel("density")
    elif varying:
        ax.scatter(x[:, varying[0]], x[:, varying[1]], s=2, alpha=0.4)
        ax.set_xlabel(f"coordinate {varying[0]}")
        ax.set_ylabel(f"coordinate {varying[1]}")
    _finish(fig, path, title)
