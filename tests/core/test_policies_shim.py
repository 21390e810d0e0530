"""Issue 39: ``gflownet_measure.policies``, split into densities, heads and networks (issue 20), still imports for old
user code: it warns, naming the new modules, and gives the very same objects."""

import importlib
import sys

import pytest

from gflownet_measure import densities, heads, measures, networks


def test_policies_warns_naming_the_new_modules_and_reexports_the_same_objects():
    sys.modules.pop("gflownet_measure.policies", None)
    with pytest.warns(DeprecationWarning, match="gflownet_measure.policies is deprecated") as caught:
        policies = importlib.import_module("gflownet_measure.policies")
    message = str(caught[0].message)
    for module in ("gflownet_measure.densities", "gflownet_measure.heads", "gflownet_measure.networks", "gflownet_measure.measures"):
        assert module in message, message
    homes = {densities: ["KernelDensity", "Policy", "UniformPolicy", "gumbel_max"], heads: ["BetaHead", "BetaMixtureHead"],
             networks: ["MLPPolicy", "StateFlow", "mlp", "tied", "torso"]}
    for module, names in homes.items():
        for name in names:
            assert getattr(policies, name) is getattr(module, name), name
    assert policies.Draw is measures.SupportPoint and policies.Draw._fields == ("comp", "u")
    assert sorted(policies.__all__) == sorted([*sum(homes.values(), []), "Draw"])


def test_the_old_import_line_works():
    sys.modules.pop("gflownet_measure.policies", None)
    with pytest.warns(DeprecationWarning):
        from gflownet_measure.policies import BetaHead, MLPPolicy, UniformPolicy  # noqa: F401
