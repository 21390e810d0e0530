"""The package's public face: ``__all__``, ``__version__``, a light import, and the deprecated ``transforms`` alias."""

import importlib
import importlib.metadata
import subprocess
import sys

import pytest

import gflownet_measure
from conftest import APPLICATIONS
from gflownet_measure import charts


def test_every_public_name_resolves():
    """Each name of ``gflownet_measure.__all__`` is an attribute of the package, listed once."""
    names = gflownet_measure.__all__
    assert len(names) == len(set(names))
    assert [name for name in names if not hasattr(gflownet_measure, name)] == []


def test_version_is_the_installed_distributions():
    assert gflownet_measure.__version__ == importlib.metadata.version("gflownet-measure")


def test_importing_the_package_leaves_its_subpackages_and_plotting_alone():
    """``import gflownet_measure`` loads the core only: no environments, experiments, baselines or matplotlib."""
    code = f"import sys, gflownet_measure; print(sorted(m for m in sys.modules if m.startswith({(*APPLICATIONS, 'matplotlib')!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_transforms_warns_and_reexports_the_charts():
    """Importing the old module name warns, naming the new one, and gives the very same classes."""
    sys.modules.pop("gflownet_measure.transforms", None)
    with pytest.warns(DeprecationWarning, match="gflownet_measure.charts"):
        transforms = importlib.import_module("gflownet_measure.transforms")
    for name in transforms.__all__:
        assert getattr(transforms, name) is getattr(charts, name)
    assert set(transforms.__all__) == set(charts.__all__)
