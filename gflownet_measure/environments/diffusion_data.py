"""Data sets for the diffusion models of :mod:`gflownet_measure.environments.diffusion`, in the model's units, with the Jacobian back to the data's.

Each :class:`DataSet` holds a fixed train / test split and maps raw values to model units :math:`x = (y - a)/b` per
coordinate, so that a log-density in model units becomes one in data units by
:math:`\\log p_Y(y) = \\log p_X(x) - n \\log b` (``log_scale`` = :math:`\\log b`; the only Jacobian, stated once here).

- ``digits``: scikit-learn's 8x8 digits (1,797 images, 17 grey levels 0..16; 297 held out, a fixed split).
  Dequantised as :math:`y = \\tfrac{256}{17}(v + u)`, :math:`u \\sim U[0, 1)^{64}`, a density on :math:`[0, 256)^{64}` (the 17 levels
  stretched over the 0-255 scale), and :math:`x = y/128 - 1 \\in [-1, 1)^{64}`. Bits per dimension on the 0-255 scale are
  :math:`(-\\log p_X(x)/n + \\log 128)/\\log 2` (the convention of image models on :math:`[-1, 1]`); they equal the bits per
  dimension of the 17-level data, dequantised, plus :math:`\\log_2(256/17) = 3.91`.
- ``imagenet32``: downsampled ImageNet 32x32 (Chrabaszcz et al. 2017) from a user-supplied folder of the official
  ``*_data_batch_*.npz`` (train) and ``val_data.npz`` (test) files, key ``data`` ``[N, 3072]`` uint8; 256 levels,
  :math:`y = v + u` and the same :math:`x = y/128 - 1`.
- ``moons``: scikit-learn's two moons (noise 0.05), centred at (0.5, 0.25); ``ring``: 8 Gaussians of standard
  deviation 0.1 evenly spaced on a circle of radius 2. Model units are data units (``log_scale = 0``); 20,000 training
  and 5,000 test points, drawn once with a fixed seed, the same for every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

__all__ = ["DataSet", "DATASETS", "load_data", "check_data", "ImageFolderError"]

_POINTS_SEED = 1234  # the 2-D sets and the digits split are fixed: the same data for every run and row


class ImageFolderError(ValueError):
    """The ImageNet-32 folder is missing or holds no readable batch (one line)."""


@dataclass(frozen=True)
class DataSet:
    """Raw train and test arrays and how they become model units.

    Attributes:
        name: the data set.
        train, test: raw values ``[N, n]`` (grey levels for images, kept as stored: uint8 for ImageNet-32).
        levels: number of grey levels of an image set (dequantised uniformly per level), 0 for continuous data.
        shift, scale: model units :math:`x = (y - a)/b` with :math:`y` the (dequantised, stretched) data.
        image_shape: ``(channels, height, width)`` of an image set, else ``None``.
        train_labels, test_labels: class labels where the set has them (digits), else ``None``.
    """

    name: str
    train: np.ndarray
    test: np.ndarray
    levels: int = 0
    shift: float = 0.0
    scale: float = 1.0
    image_shape: tuple[int, int, int] | None = None
    train_labels: np.ndarray | None = None
    test_labels: np.ndarray | None = None

    @property
    def dim(self) -> int:
        return self.train.shape[1]

    @property
    def log_scale(self) -> float:
        """:math:`\\log b`: :math:`\\log p_Y = \\log p_X - n \\log b`."""
        return math.log(self.scale)

    def to_model(self, raw: np.ndarray | Tensor, generator: torch.Generator | None = None) -> Tensor:
        """Raw values ``[B, n]`` in model units (float32), dequantised with fresh uniforms from ``generator`` for images."""
        v = torch.as_tensor(np.asarray(raw.cpu() if isinstance(raw, Tensor) else raw), dtype=torch.float64, device="cpu")
        if self.levels:  # uniforms drawn on the CPU (the run's seeded stream, or ``generator``), the batch then moved to the default device
            v = (v + torch.rand(v.shape, generator=generator, dtype=torch.float64, device="cpu")) * (256.0 / self.levels)
        return ((v - self.shift) / self.scale).float().to(torch.get_default_device())

    def to_data(self, x: Tensor) -> np.ndarray:
        """Model units back to data units (for images: the 0-255 scale, clipped to ``[0, 256)``)."""
        y = x.detach().double().cpu().numpy() * self.scale + self.shift
        return np.clip(y, 0.0, 255.999) if self.levels else y

    def to_levels(self, x: Tensor) -> np.ndarray:
        """Model units back to the raw grey levels of an image set (the centre of a dequantisation bin is the level itself)."""
        return self.to_data(x) * (self.levels / 256.0) - 0.5

    def bits_per_dim(self, log_p_model: float) -> float:
        """Bits per dimension in data units of a mean log-density in model units (images: on the 0-255 scale)."""
        return (-log_p_model / self.dim + self.log_scale) / math.log(2)

    def nll_data_units(self, log_p_model: float) -> float:
        """:math:`-\\log p_Y(y)` in nats per point, data units."""
        return -log_p_model + self.dim * self.log_scale


def _digits() -> DataSet:
    from sklearn.datasets import load_digits

    digits = load_digits()
    x, y = digits.data.astype(np.float64), digits.target  # [1797, 64], levels 0..16
    perm = np.random.default_rng(_POINTS_SEED).permutation(len(x))
    train, test = perm[297:], perm[:297]
    return DataSet("digits", x[train], x[test], levels=17, shift=128.0, scale=128.0, image_shape=(1, 8, 8), train_labels=y[train], test_labels=y[test])


def _moons() -> DataSet:
    from sklearn.datasets import make_moons

    x, _ = make_moons(25000, noise=0.05, random_state=_POINTS_SEED)
    x = x - np.array([0.5, 0.25])
    return DataSet("moons", x[:20000], x[20000:])


def _ring() -> DataSet:
    rng = np.random.default_rng(_POINTS_SEED)
    angle = 2 * np.pi * rng.integers(8, size=25000) / 8
    x = 2.0 * np.stack([np.cos(angle), np.sin(angle)], 1) + 0.1 * rng.standard_normal((25000, 2))
    return DataSet("ring", x[:20000], x[20000:])


def _imagenet32_files(folder: str) -> tuple[list[Path], Path]:
    """The training batches and the validation file of the ImageNet-32 folder; :class:`ImageFolderError` (one line) if absent."""
    root = Path(folder) if folder else None
    if root is None or not root.is_dir():
        raise ImageFolderError(
            f"data=imagenet32 needs data_dir=<folder of the downsampled ImageNet 32x32 npz files>; {folder or '(none given)'} is not a folder"
        )
    train_files, test_file = sorted(root.glob("*data_batch_*.npz")), root / "val_data.npz"
    if not train_files or not test_file.is_file():
        raise ImageFolderError(
            f"data_dir={root} must hold train_data_batch_*.npz and val_data.npz (Imagenet32_train_npz / Imagenet32_val_npz); found {len(train_files)} training batches{'' if test_file.is_file() else ' and no val_data.npz'}"
        )
    return train_files, test_file


def check_data(name: str, folder: str = "") -> None:
    """Raise :class:`ImageFolderError` when ``name`` needs a folder that is missing or incomplete (no file is read)."""
    if name == "imagenet32":
        _imagenet32_files(folder)


def _imagenet32(folder: str) -> DataSet:
    train_files, test_file = _imagenet32_files(folder)

    def read(path: Path) -> np.ndarray:
        try:
            with np.load(path) as z:
                data = z["data"]
        except (OSError, ValueError, KeyError) as e:
            raise ImageFolderError(f"{path} cannot be read as a downsampled-ImageNet batch with key 'data' ({type(e).__name__})") from None
        if data.ndim != 2 or data.shape[1] != 3072:
            raise ImageFolderError(f"{path}: 'data' has shape {data.shape}, expected [N, 3072] (3 x 32 x 32 uint8)")
        return data

    return DataSet("imagenet32", np.concatenate([read(p) for p in train_files]), read(test_file), levels=256, shift=128.0, scale=128.0, image_shape=(3, 32, 32))


DATASETS = ("digits", "moons", "ring", "imagenet32")


def load_data(name: str, folder: str = "") -> DataSet:
    """The data set ``name`` (one of :data:`DATASETS`); ``folder`` is the ImageNet-32 folder."""
    loaders = {"digits": _digits, "moons": _moons, "ring": _ring, "imagenet32": lambda: _imagenet32(folder)}
    if name not in loaders:
        raise ValueError(f"unknown data set {name!r}; valid: {', '.join(DATASETS)}")
    return loaders[name]()
