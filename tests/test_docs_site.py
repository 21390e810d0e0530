"""The documentation site's generated pages (docs/settings_pages.py): every setting and preset of every experiment,
of every environment and of a user's own space is listed from the code. The site itself is built by CI
(``.ci/run``: Sphinx with warnings as errors); these tests need no Sphinx."""

from __future__ import annotations

import re

import pytest

from conftest import docs_script
from gflownet_measure.environments import ENVIRONMENTS
from gflownet_measure.experiments import EXPERIMENTS, user_run
from gflownet_measure.options import Setting


@pytest.fixture(scope="module")
def pages():
    return docs_script("settings_pages")


def _table_keys(text: str) -> list[str]:
    """The setting names of a page's settings table, in order (the first cell of each row under '## Settings')."""
    table = text.split("## Settings", 1)[1]
    return re.findall(r"^\| `([^`]+)` \|", table, flags=re.M)


@pytest.mark.parametrize("name", list(EXPERIMENTS))
def test_experiment_page_lists_every_setting_and_preset(pages, name):
    exp = EXPERIMENTS[name]
    text = pages.experiment_page(name)
    assert _table_keys(text) == list(exp.settings)
    presets = text.split("## Presets", 1)[1].split("## Settings", 1)[0]
    assert re.findall(r"^\| `([^`]+)` \|", presets, flags=re.M) == list(exp.presets)
    assert f"{{py:mod}}`{exp.run.__module__}`" in text  # the module whose docstring says what the run folder holds


@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_environment_page_lists_every_setting(pages, name):
    assert _table_keys(pages.environment_page(name)) == list(ENVIRONMENTS[name].settings)


def test_user_space_page_has_the_training_presets(pages):
    text = pages.user_space_page()
    assert _table_keys(text) == list(user_run.SETTINGS)
    assert "| `long` |" in text and "`lr_milestone=" in text


def test_a_row_shows_default_range_and_help(pages):
    rows = pages.setting_rows({"lr": Setting(1e-3, "learning rate | of Adam", low=0.0), "loss": Setting("tb", "the objective", choices=("tb", "db"))})
    assert rows[2] == "| `lr` | `0.001` | float in [0.0, inf] | learning rate \\| of Adam |"  # the | of the help escaped
    assert rows[3] == "| `loss` | `'tb'` | `'tb'`, `'db'` | the objective |"


def test_write_pages_writes_an_index_linking_every_page(pages, tmp_path):
    written = {p.name for p in pages.write_pages(tmp_path)}
    index = (tmp_path / "experiments.md").read_text()
    for page in written - {"experiments.md"}:
        assert f"]({page})" in index and page.removesuffix(".md") in index.split("```{toctree}")[1]
    assert {f"experiment-{n}.md" for n in EXPERIMENTS} | {f"environment-{n}.md" for n in ENVIRONMENTS} | {"user-space.md"} == written - {"experiments.md"}
