"""The structure-learning baselines of JSP-GFN's tables (Deleu et al. 2023, section 5.2 and Table D.1), by name, imported lazily.

``STRUCTURE_BASELINES`` maps a table's name to where the function lives and the packages it needs (the optional
extra ``baselines``; none for ``bcd``, which is torch and scipy only); :func:`available` says whether those import,
and why not, so that a table can run what is installed and write which baselines it skipped; :func:`load` returns the
function. Importing this module imports none of those packages.
"""
from __future__ import annotations

from importlib import import_module
from typing import Callable, NamedTuple

__all__ = ["StructureBaseline", "STRUCTURE_BASELINES", "available", "load"]

INSTALL = "pip install 'gflownet-measure[baselines]'"


class StructureBaseline(NamedTuple):
    """``function`` in ``module``, which imports the ``requires`` pairs (import name, package name on PyPI)."""

    module: str
    function: str
    requires: tuple[tuple[str, str], ...]


STRUCTURE_BASELINES = {
    "b-ges": StructureBaseline("gflownet_measure.baselines.bootstrap", "bootstrap_ges", (("causallearn", "causal-learn"),)),
    "b-pc": StructureBaseline("gflownet_measure.baselines.bootstrap", "bootstrap_pc", (("causallearn", "causal-learn"),)),
    "dibs": StructureBaseline("gflownet_measure.baselines.dibs", "joint_dibs", (("jax", "jax"), ("dibs", "dibs-lib"))),
    "bcd": StructureBaseline("gflownet_measure.baselines.bcd", "bcd_nets", ()),
}


def _baseline(name: str) -> StructureBaseline:
    if name not in STRUCTURE_BASELINES:
        raise ValueError(f"unknown structure baseline {name!r}; choose one of {tuple(STRUCTURE_BASELINES)}")
    return STRUCTURE_BASELINES[name]


def available(name: str) -> tuple[bool, str]:
    """``(True, "")`` if every package of baseline ``name`` imports, else ``(False, reason)`` naming the first that does not and how to install it."""
    for module, package in _baseline(name).requires:
        try:
            import_module(module)
        except ImportError as error:
            if isinstance(error, ModuleNotFoundError) and error.name == module:
                return False, f"{package} is not installed: {INSTALL}"
            return False, f"{package} fails to import ({error}): {INSTALL}"
    return True, ""


def load(name: str) -> Callable:
    """The function of baseline ``name``; ``ImportError`` with :func:`available`'s reason if a package is missing."""
    ok, reason = available(name)
    if not ok:
        raise ImportError(f"structure baseline {name!r}: {reason}")
    baseline = _baseline(name)
    return getattr(import_module(baseline.module), baseline.function)
