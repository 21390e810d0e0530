"""The documentation site's settings pages, generated from the typed definitions (never written by hand).

Every registered experiment (``gflownet_measure.experiments.EXPERIMENTS``) gets a page with its description, each
setting's default, valid values and meaning (its :class:`~gflownet_measure.options.Setting`), and each preset as the
settings it changes; so does ``run MODULE:FACTORY``, a user's own space (its training settings); every environment of ``gflownet-measure check`` (``gflownet_measure.environments.ENVIRONMENTS``)
gets the same for its settings. ``docs/conf.py`` calls :func:`write_pages` when a build starts, into
``docs/_generated/`` (not in git), so a setting added in code appears on the site at the next build.

Run alone, ``python docs/settings_pages.py DEST`` writes the pages into ``DEST``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from gflownet_measure.environments import ENVIRONMENTS
from gflownet_measure.experiments import EXPERIMENTS, user_run
from gflownet_measure.options import Setting

__all__ = ["setting_rows", "experiment_page", "user_space_page", "environment_page", "write_pages"]


def _cell(text: object) -> str:
    """``text`` as one cell of a Markdown table: ``|`` escaped, line breaks folded."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _sentence(text: str) -> str:
    return text if text.endswith((".", ")", "!", "?")) else text + "."


def _code(value: object) -> str:
    return f"`{value!r}`" if isinstance(value, str) else f"`{value}`"


def _valid(setting: Setting) -> str:
    """The values a setting accepts: its choices, or its range, or its type alone."""
    if setting.choices is not None:
        return ", ".join(_code(c) for c in setting.choices)
    kind = type(setting.default).__name__
    if setting.low is None and setting.high is None:
        return kind + (" (a path)" if setting.path else "")
    low = "-inf" if setting.low is None else setting.low
    high = "inf" if setting.high is None else setting.high
    return f"{kind} in [{low}, {high}]"


def setting_rows(settings: dict[str, Setting]) -> list[str]:
    """A Markdown table, one row per setting: key, default, valid values, meaning (its help; former names last)."""
    rows = ["| setting | default | valid | meaning |", "|---|---|---|---|"]
    for key, setting in settings.items():
        meaning = setting.help + (f" (formerly: {', '.join(setting.aliases)})" if setting.aliases else "")
        rows.append(f"| `{key}` | {_cell(_code(setting.default))} | {_cell(_valid(setting))} | {_cell(meaning)} |")
    return rows


def _sections(presets: dict[str, dict], settings: dict[str, Setting]) -> list[str]:
    """A page's '## Presets' table (each preset and the settings it changes) and '## Settings' table (:func:`setting_rows`)."""
    rows = ["## Presets", "", "| preset | settings it changes |", "|---|---|"]
    for preset, changes in presets.items():
        rows.append(f"| `{preset}` | {_cell(', '.join(f'`{k}={v}`' for k, v in changes.items()) or '(the defaults)')} |")
    return [*rows, "", "## Settings", "", *setting_rows(settings), ""]


def _revisable(names: tuple[str, ...]) -> list[str]:
    """The sentence naming the settings a resume may change (evaluation alone reads them), where there are any."""
    if not names:
        return []
    listed = ", ".join(f"`{k}`" for k in names)
    return [f"A run that failed after training is finished with other values of {listed}, which evaluation alone reads:", "`--resume --set KEY=VALUE`.", ""]


def experiment_page(name: str) -> str:
    """The page of experiment ``name``: how to run it, the module that writes its run folder (what ``samples.npz`` and
    ``metrics.json`` hold is in that module's docstring), its presets (the settings each changes) and every setting."""
    exp = EXPERIMENTS[name]
    module = exp.run.__module__
    lines = [
        f"# `{name}`",
        "",
        _sentence(_cell(exp.description)),
        "",
        f"Run: `gflownet-measure run {name} --preset PRESET --set KEY=VALUE ...` (the default preset is `quick`). The run",
        f"and what its folder holds: {{py:mod}}`{module}`.",
        "",
        *_revisable(exp.evaluation_settings),
        *_sections(exp.presets, exp.settings),
    ]
    return "\n".join(lines)


def user_space_page() -> str:
    """The training settings and presets of ``gflownet-measure run MODULE:FACTORY``, a space of one's own (the factory
    adds its own settings beside them)."""
    lines = [
        "# A space of your own: `run MODULE:FACTORY`",
        "",
        "`gflownet-measure run MODULE:FACTORY --preset PRESET --set KEY=VALUE ...` trains a space written by a user",
        f"(docs/tutorial.md, section 8; {{py:mod}}`{user_run.__name__}`). These training settings and presets come with",
        "every such space; the factory's own keyword arguments are settings beside them.",
        "",
        *_sections(user_run.PRESETS, user_run.SETTINGS),
    ]
    return "\n".join(lines)


def environment_page(name: str) -> str:
    """The page of environment ``name`` of ``gflownet-measure check``: its settings."""
    spec = ENVIRONMENTS[name]
    lines = [
        f"# `{name}` (environment)",
        "",
        _sentence(_cell(spec.description)),
        "",
        f"Check it: `gflownet-measure check {name} --set KEY=VALUE ...`.",
        "",
        "## Settings",
        "",
        *setting_rows(spec.settings),
        "",
    ]
    return "\n".join(lines)


def write_pages(dest: Path) -> list[Path]:
    """Write ``experiments.md`` (an index with a table of contents), one page per experiment and one per environment,
    into ``dest``; the paths written. Files are rewritten only where their text changed (Sphinx rebuilds what changed)."""
    dest.mkdir(parents=True, exist_ok=True)
    pages = {f"experiment-{name}.md": experiment_page(name) for name in EXPERIMENTS}
    pages |= {f"environment-{name}.md": environment_page(name) for name in ENVIRONMENTS}
    pages["user-space.md"] = user_space_page()
    index = [
        "# Experiments and environments: every setting",
        "",
        "Generated from the code's typed settings at each build (docs/settings_pages.py). An experiment's settings are",
        "given on the command line as `--set KEY=VALUE`; a preset is a named set of them. `gflownet-measure list`",
        "names the same experiments and environments.",
        "",
        "| name | what it is |",
        "|---|---|",
        *(f"| [`{name}`](experiment-{name}.md) | {_cell(EXPERIMENTS[name].description)} |" for name in EXPERIMENTS),
        "| [`MODULE:FACTORY`](user-space.md) | a space of your own, trained from the command line |",
        *(f"| [`{name}`](environment-{name}.md) (environment) | {_cell(ENVIRONMENTS[name].description)} |" for name in ENVIRONMENTS),
        "",
        "```{toctree}",
        ":hidden:",
        "",
        *(page.removesuffix(".md") for page in pages),
        "```",
        "",
    ]
    pages["experiments.md"] = "\n".join(index)
    written = []
    for page, text in pages.items():
        path = dest / page
        if not path.exists() or path.read_text() != text:
            path.write_text(text)
        written.append(path)
    return written


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python docs/settings_pages.py DEST")
    for path in write_pages(Path(sys.argv[1])):
        print(path)
