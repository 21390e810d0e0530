"""Deprecated: the charts moved to :mod:`gflownet_measure.charts`; importing this module warns and re-exports them."""

import warnings

from .charts import AffineChart, ArcChart, Chart, PolarChart, WithoutJacobian

__all__ = ["Chart", "AffineChart", "PolarChart", "ArcChart", "WithoutJacobian"]

warnings.warn(
    "gflownet_measure.transforms is deprecated: import the charts from gflownet_measure.charts",
    DeprecationWarning,
    stacklevel=2,
)
