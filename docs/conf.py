"""Sphinx configuration of the documentation site: ``python -m sphinx -W --keep-going -b html docs docs/_build/html``.

The pages are the Markdown files of ``docs/`` (read by MyST), an API reference generated from the package's docstrings
(autodoc and autosummary; the docstrings use Sphinx's ``:math:`` and cross-reference roles, Google-style sections read by
napoleon), and one page per experiment and environment listing every setting and preset, generated from their typed
definitions when the build starts (``docs/settings_pages.py``, into ``docs/_generated/``).
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # settings_pages.py beside this file

from settings_pages import write_pages  # noqa: E402

project = "gflownet-measure"
author = "the gflownet-measure authors"
extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.napoleon", "sphinx.ext.mathjax"]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "results/records", "results/README.md", "README.md"]
myst_heading_anchors = 3  # the pages link to their own sections as #section-title
autosummary_generate = True
# a module documents what it defines: the names a package re-exports (gflownet_measure.Box is gflownet_measure.boxes.Box)
# would otherwise be documented twice and make every cross-reference to them ambiguous
autodoc_default_options = {"members": True, "show-inheritance": True, "ignore-module-all": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_ivar = True  # "Attributes:" sections as fields of their class, not second descriptions of its members
# the optional extras' libraries (pyproject.toml): their modules are documented without them installed
autodoc_mock_imports = ["causallearn", "dibs", "jax", "jaxlib", "openmm", "ray", "pgmpy", "torchgfn"]
html_theme = "alabaster"
html_title = "gflownet-measure"
html_static_path: list[str] = []


def _generate(app) -> None:
    write_pages(HERE / "_generated")


def setup(app) -> None:
    app.connect("builder-inited", _generate)
