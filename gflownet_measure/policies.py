"""Deprecated: this module was split (issue 20) into :mod:`gflownet_measure.densities` (densities w.r.t. a kernel),
:mod:`gflownet_measure.heads` (coordinate heads) and :mod:`gflownet_measure.networks` (networks); importing it warns and
re-exports its names from there. ``Draw`` is now :class:`gflownet_measure.measures.SupportPoint` (the same fields)."""

import warnings

from .densities import KernelDensity, Policy, UniformPolicy, gumbel_max
from .heads import BetaHead, BetaMixtureHead
from .measures import SupportPoint as Draw
from .networks import MLPPolicy, StateFlow, mlp, tied, torso

__all__ = ["Draw", "KernelDensity", "Policy", "UniformPolicy", "MLPPolicy", "BetaHead", "BetaMixtureHead", "StateFlow", "gumbel_max", "mlp", "tied", "torso"]

warnings.warn(
    "gflownet_measure.policies is deprecated: import KernelDensity, Policy, UniformPolicy and gumbel_max from gflownet_measure.densities, "
    "BetaHead and BetaMixtureHead from gflownet_measure.heads, MLPPolicy, StateFlow, mlp, tied and torso from gflownet_measure.networks, "
    "and Draw as SupportPoint from gflownet_measure.measures",
    DeprecationWarning,
    stacklevel=2,
)
