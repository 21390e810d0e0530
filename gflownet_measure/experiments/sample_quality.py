"""Sample-quality scores that need no downloaded weights: a kernel MMD, and a Frechet distance in the features of a
digits classifier trained inside the run.

- :func:`mmd_rbf`: the unbiased squared maximum mean discrepancy (Gretton et al. 2012, eq. 3) with a Gaussian kernel
  :math:`k(a, b) = \\exp(-\\|a - b\\|^2 / (2 h^2))`, :math:`h` the median distance between reference points (the
  median heuristic), fixed by the reference set so that two models are scored with the same kernel.
- :func:`frechet_distance`: :math:`\\|\\mu_1 - \\mu_2\\|^2 + \\mathrm{tr}(C_1 + C_2 - 2 (C_1 C_2)^{1/2})` between Gaussian
  fits of two feature sets (the FID of Heusel et al. 2017, eq. 6, with other features).
- :class:`DigitsFeatures`: the hidden layer (ReLU, 64 units) of a small classifier trained in the run on the training
  digits (0-16 scale) with a fixed seed; its test accuracy is reported beside the distance.
"""

from __future__ import annotations

import numpy as np
import torch
from scipy import linalg

from gflownet_measure.training import seeded_generator

__all__ = ["mmd_rbf", "frechet_distance", "DigitsFeatures"]


def _sq_dists(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.maximum((a * a).sum(1)[:, None] + (b * b).sum(1)[None, :] - 2 * a @ b.T, 0.0)


def mmd_rbf(x: np.ndarray, ref: np.ndarray, max_points: int = 2000, seed: int = 0) -> float:
    """Unbiased :math:`\\mathrm{MMD}^2` between samples ``x [N, n]`` and reference points ``ref [M, n]`` (at most ``max_points`` of each, the first ones)."""
    x, ref = np.asarray(x, dtype=np.float64)[:max_points], np.asarray(ref, dtype=np.float64)[:max_points]
    d_rr = _sq_dists(ref, ref)
    h2 = np.median(d_rr[np.triu_indices(len(ref), 1)])
    k_rr, k_xx, k_xr = np.exp(-d_rr / (2 * h2)), np.exp(-_sq_dists(x, x) / (2 * h2)), np.exp(-_sq_dists(x, ref) / (2 * h2))
    n, m = len(x), len(ref)
    return float((k_xx.sum() - np.trace(k_xx)) / (n * (n - 1)) + (k_rr.sum() - np.trace(k_rr)) / (m * (m - 1)) - 2 * k_xr.mean())


def frechet_distance(f1: np.ndarray, f2: np.ndarray) -> float:
    """Frechet distance between Gaussian fits of features ``f1 [N, F]`` and ``f2 [M, F]``."""
    mu1, mu2 = f1.mean(0), f2.mean(0)
    eye = 1e-6 * np.eye(f1.shape[1])  # dead features (zero variance) make C_1 C_2 singular; an offset as in pytorch-fid
    c1, c2 = np.cov(f1, rowvar=False) + eye, np.cov(f2, rowvar=False) + eye
    root = linalg.sqrtm(c1 @ c2)
    return float(((mu1 - mu2) ** 2).sum() + np.trace(c1 + c2 - 2 * root.real))


class DigitsFeatures:
    """A digits classifier trained on ``train [N, 64]`` (0-16 scale) with ``labels``: one hidden layer of 64 ReLU units,
    full-batch Adam (lr 1e-2, 300 steps, seed 0, in a generator of its own so the run's random stream is untouched)."""

    def __init__(self, train: np.ndarray, labels: np.ndarray, steps: int = 300):
        gen = seeded_generator(0)
        self.hidden, self.out = torch.nn.Linear(64, 64), torch.nn.Linear(64, 10)
        with torch.no_grad():
            for layer in (self.hidden, self.out):
                bound = 1 / np.sqrt(layer.in_features)
                layer.weight.copy_(torch.rand(layer.weight.shape, generator=gen) * 2 * bound - bound)
                layer.bias.zero_()
        params = [*self.hidden.parameters(), *self.out.parameters()]
        opt = torch.optim.Adam(params, lr=1e-2)
        x, y = torch.as_tensor(train / 16.0, dtype=torch.float32), torch.as_tensor(labels, dtype=torch.long)
        for _ in range(steps):
            loss = torch.nn.functional.cross_entropy(self.out(torch.relu(self.hidden(x))), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """Hidden features ``[N, 64]`` of images ``x [N, 64]`` on the 0-16 scale."""
        with torch.no_grad():
            return torch.relu(self.hidden(torch.as_tensor(x / 16.0, dtype=torch.float32))).double().cpu().numpy()

    def accuracy(self, x: np.ndarray, labels: np.ndarray) -> float:
        with torch.no_grad():
            pred = self.out(torch.as_tensor(self(x), dtype=torch.float32)).argmax(1).cpu().numpy()
        return float((pred == labels).mean())
