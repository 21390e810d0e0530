"""The published results are data: README.md's results table, docs/results/*.md and docs/results.md are rendered from
docs/results/records/*.toml by docs/render_results.py, and must not differ from that rendering.

After editing a record (or the renderer), run ``python docs/render_results.py`` and commit what it rewrites.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from conftest import docs_script

ROOT = Path(__file__).resolve().parents[1]


rr = docs_script("render_results")
RECORDS = rr.load_records()
RENDERED = rr.render_all(RECORDS)


def _table_rows(readme: str) -> list[list[str]]:
    block = readme[readme.index(rr.BEGIN) : readme.index(rr.END)]
    lines = [line for line in block.splitlines() if line.startswith("| ")][1:]  # the header, then rows (the rule has no space)
    return [re.split(r"(?<!\\)\|", line.strip())[1:-1] for line in lines]


def test_the_readme_table_is_the_records_rendering():
    readme = rr.README.read_text(encoding="utf-8")
    assert readme == RENDERED[rr.README], "README.md's results table differs from docs/results/records: run python docs/render_results.py"


@pytest.mark.parametrize("path", sorted(p for p in RENDERED if p != rr.README), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_page_is_its_records_rendering(path):
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: run python docs/render_results.py"
    assert path.read_text(encoding="utf-8") == RENDERED[path], f"{path.relative_to(ROOT)} differs from its record: run python docs/render_results.py"


def test_no_page_is_left_without_a_record():
    assert rr.stale_pages(RECORDS) == []


def test_check_mode_agrees():
    assert rr.check() == []


def test_every_readme_row_links_to_an_existing_page_and_anchor():
    rows = _table_rows(rr.README.read_text(encoding="utf-8"))
    assert len(rows) == len(rr.readme_rows(RECORDS)) > 0
    for cells in rows:
        assert len(cells) == 5, cells
        link = re.fullmatch(r"\s*\[[^\]]+\]\((docs/results/[\w.-]+\.md)#([^)]+)\)\s*", cells[4])
        assert link, f"the row {cells[0].strip()!r} has no link to its page: {cells[4]!r}"
        page = ROOT / link.group(1)
        assert page.exists(), link.group(1)
        anchors = {rr.slug(h) for h in re.findall(r"^#{1,6} (.+)$", page.read_text(encoding="utf-8"), re.M)}
        assert link.group(2) in anchors, f"{link.group(1)} has no heading for #{link.group(2)}"


def test_readme_cells_are_short():
    for cells in _table_rows(rr.README.read_text(encoding="utf-8")):
        for cell in cells[:4]:
            assert len(cell.strip()) <= rr.README_CELL_MAX, f"{len(cell.strip())} characters: {cell.strip()!r}"


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r.name)
def test_every_row_carries_estimator_target_budget_seeds_and_the_papers_terms(record):
    rr.validate(record)  # raises naming the field
    for row in record.rows:
        for key in ("estimator", "target", "budget", "seeds", "command", "code_version"):
            assert str(row[key]).strip(), (record.name, row["id"], key)
        for key in rr.PAPER_FIELDS:
            assert str(row["paper"][key]).strip(), (record.name, row["id"], f"paper.{key}")


def test_validation_names_a_missing_field():
    record = RECORDS[0]
    broken = rr.Record(record.name, {**record.data, "rows": [{k: v for k, v in record.rows[0].items() if k != "estimator"}]})
    with pytest.raises(rr.RecordError, match="estimator"):
        rr.validate(broken)


def test_sizes():
    assert len(rr.README.read_text(encoding="utf-8").splitlines()) < 150
    for path, text in RENDERED.items():
        if path != rr.README:
            assert len(text.splitlines()) < rr.PAGE_MAX_LINES, path


def test_rows_built_on_an_untrained_start_say_so():
    """A row whose structure is an untrained start holds that start beside the trained figure (fields ``start`` and ``ours``)."""
    starts = {(r.name, row["id"]) for r in RECORDS for row in r.rows if "start" in row}
    assert {("jsp-gfn-d20", "d20-linear"), ("jsp-gfn-sachs", "sachs-preset")} <= starts
