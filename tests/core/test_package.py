"""The package's public face: the deprecated ``gflownet_measure.transforms`` alias of the charts."""

import importlib
import sys

import pytest

from gflownet_measure import charts


def test_transforms_warns_and_reexports_the_charts():
    """Importing the old module name warns, naming the new one, and gives the very same classes."""
    sys.modules.pop("gflownet_measure.transforms", None)
    with pytest.warns(DeprecationWarning, match="gflownet_measure.charts"):
        transforms = importlib.import_module("gflownet_measure.transforms")
    for name in transforms.__all__:
        assert getattr(transforms, name) is getattr(charts, name)
    assert set(transforms.__all__) == set(charts.__all__)
