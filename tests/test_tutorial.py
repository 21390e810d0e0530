"""docs/tutorial.md runs: its ``python`` blocks, joined in order, execute as one script with its own asserts.

The tutorial seeds every generator and trains for 300 steps on one CPU thread (about 15 s); its
statistical tolerances are justified in the tutorial itself. Lines outside ``python`` fences are
kept as blank lines, so a traceback's line numbers are those of ``docs/tutorial.md``.
"""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

TUTORIAL = Path(__file__).resolve().parents[1] / "docs" / "tutorial.md"
OPEN = re.compile(r"^```python\s*$")
CLOSE = re.compile(r"^```\s*$")


def tutorial_source(path: Path = TUTORIAL) -> str:
    """The ``python`` fenced blocks of ``path`` in order, every other line blanked (other fences, e.g. ``text``, are skipped)."""
    out, inside, blocks = [], False, 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not inside and OPEN.match(line):
            inside, blocks = True, blocks + 1
            out.append("")
        elif inside and CLOSE.match(line):
            inside = False
            out.append("")
        else:
            out.append(line if inside else "")
    assert blocks, f"no ```python blocks in {path}"
    assert not inside, f"unterminated ```python block in {path}"
    return "\n".join(out) + "\n"


def test_tutorial_source_is_only_code():
    src = tutorial_source()
    assert "check_graph(graph, pf, pb)" in src
    assert "theory checks for" not in src  # the reports shown in ```text fences are not code
    assert len(src.splitlines()) == len(TUTORIAL.read_text(encoding="utf-8").splitlines())


@pytest.mark.slow  # trains the tutorial's space: about 5 s
def test_tutorial_runs():
    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    namespace = {"__name__": "tutorial"}
    try:
        exec(compile(tutorial_source(), str(TUTORIAL), "exec"), namespace)
    finally:
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)
    assert namespace["report"].passed
    assert not namespace["report_forgetful"].passed
    assert not namespace["report_mismatched"].passed
    assert namespace["report_sphere"].passed  # section 12: a chart of one's own, the sphere's area
    assert not namespace["report_flat"].passed  # the same with sin(theta) forgotten


def test_the_readme_example_runs_and_passes_its_checks(capsys):
    """The README's "Your own space" block: the space a user copies first must be right (every check passes)."""
    readme = TUTORIAL.parents[1] / "README.md"
    rng = torch.get_rng_state()
    torch.manual_seed(0)
    try:
        exec(compile(tutorial_source(readme), str(readme), "exec"), {"__name__": "readme"})
    finally:
        torch.set_rng_state(rng)
    assert capsys.readouterr().out.rstrip().endswith("all conditions hold")


OBJECTIVES_DOC = TUTORIAL.parent / "objectives.md"


def test_the_objectives_guide_registers_and_trains_its_own_objective():
    """docs/objectives.md's "Adding your own" block: register, compare with TB, train 100 updates (one thread, about 2 s)."""
    from gflownet_measure.objectives import OBJECTIVES

    threads, rng = torch.get_num_threads(), torch.get_rng_state()
    torch.set_num_threads(1)
    try:
        exec(compile(tutorial_source(OBJECTIVES_DOC), str(OBJECTIVES_DOC), "exec"), {"__name__": "objectives_guide"})
        assert "tb_huber" in OBJECTIVES
    finally:
        OBJECTIVES.pop("tb_huber", None)  # the registry is global: leave it as the other tests find it
        torch.set_num_threads(threads)
        torch.set_rng_state(rng)


def test_the_objectives_guide_lists_every_registered_objective():
    import gflownet_measure.environments  # noqa: F401  (registers JSP-GFN's objective)
    from gflownet_measure.objectives import OBJECTIVES

    listed = set(re.findall(r"^\| `(\w+)` \|", OBJECTIVES_DOC.read_text(encoding="utf-8"), re.M))
    assert set(OBJECTIVES) <= listed, sorted(set(OBJECTIVES) - listed)
