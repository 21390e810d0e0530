"""Every preset of every registered experiment resolves against its settings and builds its typed settings: a preset
key that the experiment does not take (as `mle-diffusion-table --preset paper` once inherited `backward_rule`, a row
setting) is found here, not by the user who asks for it."""

import pytest

from gflownet_measure.experiments import EXPERIMENTS
from gflownet_measure.experiments.settings import ConfigError, flatten, resolve

CASES = [(name, preset) for name, exp in EXPERIMENTS.items() for preset in exp.presets]


@pytest.mark.parametrize("name, preset", CASES, ids=[f"{n}:{p}" for n, p in CASES])
def test_each_preset_resolves_and_builds_the_typed_settings(name, preset):
    exp = EXPERIMENTS[name]
    cfg = resolve(exp.settings, exp.presets[preset])
    try:
        settings = exp.typed(cfg)
    except ConfigError as e:  # a preset of an optional extra (the alanine presets: OpenMM) is refused where it is absent
        if "pip install" not in str(e):
            raise
        pytest.skip(str(e))
    if exp.settings_type is not dict:  # the typed settings hold every flat setting with its resolved value
        flat = flatten(settings)
        assert {k: flat[k] for k in cfg} == cfg
