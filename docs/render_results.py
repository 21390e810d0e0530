"""Render the measured results from their records: the README's results table, one page per experiment, the index.

The records are ``docs/results/records/*.toml``, one file per experiment. Each holds the experiment's page text (title,
introduction, the findings that still hold, condensed detail sections) and one ``[[rows]]`` table per published figure:
the command, seeds, budget, target, the metric and its estimator, the ``metrics.json`` keys it is read from, our value
(and, where the structure comes from an untrained start, the start's value beside it), the paper's value with its
source, estimator, sample size and seeds, the code version, and the settings that depart from the paper.

    python docs/render_results.py            # rewrite README.md's table, docs/results/*.md and docs/results.md
    python docs/render_results.py --check    # exit 1 (and print a diff) if any of them differs from the records

The records keep current results only; what was measured before is in git (``git log -p docs/results``) and in
CHANGELOG.md. ``tests/test_results_record.py`` fails when a rendered file differs from its records.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10: the test extra installs tomli
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "results" / "records"
PAGES = ROOT / "docs" / "results"
README = ROOT / "README.md"
INDEX = ROOT / "docs" / "results.md"
FOLDER_README = PAGES / "README.md"

BEGIN = "<!-- results table: rendered by docs/render_results.py from docs/results/records; do not edit by hand -->"
END = "<!-- end of results table -->"
GENERATED = "<!-- rendered by docs/render_results.py from docs/results/records/{name}.toml: edit the record, then run `python docs/render_results.py` -->"
NOTEBOOK = "40cddb5"  # the last commit whose docs/results.md is the full lab notebook

ROW_FIELDS = ("id", "experiment", "metric", "estimator", "metric_keys", "target", "budget", "seeds", "ours", "command", "code_version", "departures", "paper")
PAPER_FIELDS = ("value", "source", "estimator", "sample_size", "seeds")
PAGE_FIELDS = ("title", "order", "intro", "rows", "findings", "legacy")
README_CELL_MAX = 150
PAGE_MAX_LINES = 400


class RecordError(ValueError):
    """A record misses a field or holds one of the wrong type."""


@dataclass
class Record:
    name: str  # the file's stem: the page is docs/results/<name>.md
    data: dict

    @property
    def page(self) -> str:
        return f"{self.name}.md"

    @property
    def rows(self) -> list[dict]:
        return self.data["rows"]


def load_records(folder: Path = RECORDS) -> list[Record]:
    """Every record, in the README's order (``order``, then the file name); each is validated."""
    records = []
    for path in sorted(folder.glob("*.toml")):
        with path.open("rb") as f:
            record = Record(path.stem, tomllib.load(f))
        validate(record)
        records.append(record)
    return sorted(records, key=lambda r: (r.data["order"], r.name))


def _nonempty(value) -> bool:
    if isinstance(value, str):
        return bool(value.strip())
    if isinstance(value, (list, dict)):
        return len(value) > 0
    return value is not None


def validate(record: Record) -> None:
    """Raise :class:`RecordError` naming the record, the row and the field if a required field is missing or empty.

    Every row carries the experiment, metric, estimator, the ``metrics.json`` keys, target, budget, seeds, our value, the
    command, the code version, the departures from the paper (a list, empty only where there are none: say so in a
    note) and the paper's value, source, estimator, sample size and seeds ("—" where the paper has none, with the reason)."""
    where = f"docs/results/records/{record.name}.toml"
    for key in PAGE_FIELDS:
        if key not in record.data:
            raise RecordError(f"{where}: no '{key}'")
    if not isinstance(record.data["rows"], list) or not record.data["rows"]:
        raise RecordError(f"{where}: 'rows' must be a non-empty array of tables ([[rows]])")
    ids = set()
    for i, row in enumerate(record.data["rows"]):
        label = f"{where}, row {i} ({row.get('id', '?')})"
        for key in ROW_FIELDS:
            if key not in row or (key != "departures" and not _nonempty(row[key])):
                raise RecordError(f"{label}: '{key}' is missing or empty")
        if not isinstance(row["departures"], list) or not isinstance(row["metric_keys"], list):
            raise RecordError(f"{label}: 'departures' and 'metric_keys' are arrays")
        for key in PAPER_FIELDS:
            if not _nonempty(row["paper"].get(key)):
                raise RecordError(f"{label}: 'paper.{key}' is missing or empty")
        if "start" in row and not all(_nonempty(row["start"].get(k)) for k in ("value", "command", "note")):
            raise RecordError(f"{label}: 'start' needs value, command and note")
        if row["id"] in ids:
            raise RecordError(f"{label}: id '{row['id']}' repeats")
        ids.add(row["id"])
    headings = [row["experiment"] for row in record.data["rows"]] + [s["title"] for s in record.data.get("sections", [])]
    slugs = [slug(h) for h in headings]
    if len(set(slugs)) != len(slugs):
        raise RecordError(f"{where}: two headings share an anchor: {sorted(h for h in headings if slugs.count(slug(h)) > 1)}")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped (letters, digits, '-' and '_' kept), spaces to '-'."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _bullets(items: list[str]) -> list[str]:
    return [f"- {' '.join(item.split())}" for item in items]


# --- the README's table -------------------------------------------------------------------------------------------


def readme_rows(records: list[Record]) -> list[tuple[Record, dict]]:
    return [(r, row) for r in records for row in r.rows if "readme" in row]


def readme_cells(record: Record, row: dict) -> list[str]:
    """experiment | metric | ours | paper | link: the README's short forms (``[rows.readme]``) where a row gives them."""
    short = row["readme"]
    ours = short.get("ours", row["ours"])
    if "start" in row and "start" in short:
        ours = f"{ours}; {short['start']}"
    cells = [short.get("experiment", row["experiment"]), short.get("metric", row["metric"]), ours, short.get("paper", row["paper"]["value"])]
    link = f"[{record.name}](docs/results/{record.page}#{slug(row['experiment'])})"
    return [_cell(c) for c in cells] + [link]


def render_readme_table(records: list[Record]) -> str:
    lines = [BEGIN, "| experiment | metric | ours | paper | page |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(readme_cells(r, row)) + " |" for r, row in readme_rows(records)]
    return "\n".join(lines + [END])


def splice_readme(readme: str, table: str) -> str:
    """``readme`` with the text between the table's markers (markers included) replaced by ``table``."""
    start, end = readme.find(BEGIN), readme.find(END)
    if start < 0 or end < start:
        raise RecordError("README.md has no results-table markers (BEGIN / END of docs/render_results.py)")
    return readme[:start] + table + readme[end + len(END) :]


# --- one page per experiment --------------------------------------------------------------------------------------


def render_row(row: dict) -> list[str]:
    paper = row["paper"]
    out = [f"### {row['experiment']}", ""]
    out += ["| | ours | paper |", "|---|---|---|"]
    out.append(f"| value | **{_cell(row['ours'])}** | {_cell(paper['value'])} |")
    if "start" in row:
        out.append(f"| the untrained start | {_cell(row['start']['value'])} | |")
    out.append(f"| metric, estimator | {_cell(row['metric'])}: {_cell(row['estimator'])} | {_cell(paper['estimator'])} |")
    out.append(f"| target | {_cell(row['target'])} | {_cell(paper.get('target', 'the same'))} |")
    out.append(f"| budget | {_cell(row['budget'])} | {_cell(paper.get('budget', '—'))} |")
    out.append(f"| seeds | {_cell(row['seeds'])} | {_cell(paper['seeds'])} |")
    out.append(f"| sample size | {_cell(row.get('sample_size', '—'))} | {_cell(paper['sample_size'])} |")
    out.append(f"| source | this record | {_cell(paper['source'])} |")
    out.append("")
    out.append(f"- Command: `{row['command']}`")
    if "start" in row:
        out.append(f"- The start: `{row['start']['command']}`. {' '.join(row['start']['note'].split())}")
    if row.get("per_seed"):
        out.append(f"- Per seed: {' '.join(row['per_seed'].split())}")
    out.append("- `metrics.json` keys: " + ", ".join(f"`{k}`" for k in row["metric_keys"]))
    out.append(f"- Code version: {' '.join(row['code_version'].split())}")
    if row["departures"]:
        out.append("- Departures from the paper:")
        out += ["  " + b for b in _bullets(row["departures"])]
    else:
        out.append("- Departures from the paper: none recorded.")
    if row.get("notes"):
        out.append("- Notes:")
        out += ["  " + b for b in _bullets(row["notes"])]
    return out + [""]


def render_page(record: Record) -> str:
    d = record.data
    out = [f"# {d['title']}", "", GENERATED.format(name=record.name), "", d["intro"].strip(), ""]
    out += ["## Current figures", ""]
    out += [f"- [{row['experiment']}](#{slug(row['experiment'])})" for row in record.rows] + [""]
    for row in record.rows:
        out += render_row(row)
    out += ["## Findings that still hold", ""] + _bullets(d["findings"]) + [""]
    for section in d.get("sections", []):
        out += [f"## {section['title']}", "", section["body"].strip(), ""]
    out += [
        "## History",
        "",
        "Former sections of docs/results.md now on this page: " + "; ".join(f"'{h}'" for h in d["legacy"]) + ". Every run, schedule"
        f" and ablation as first recorded is in git: `git show {NOTEBOOK}:docs/results.md`; what changed since, in CHANGELOG.md"
        " and `git log -p docs/results`.",
        "",
    ]
    return "\n".join(out)


# --- the index ----------------------------------------------------------------------------------------------------


def render_index(records: list[Record]) -> str:
    out = [
        "# Measured results",
        "",
        GENERATED.format(name="*").replace("records/*.toml", "records/"),
        "",
        "One page per experiment, each rendered from its record (`docs/results/records/<experiment>.toml`): the current figures,",
        "the command, the seeds, the budget, the estimator and target of every figure beside the paper's, the settings that",
        "depart from the paper, and the findings that still hold. The README's results table is rendered from the same",
        "records, and `tests/test_results_record.py` fails if either differs from them.",
        "",
        "Conditions of every figure: measured on CPU, on 2-core machines shared with other jobs, with one torch thread",
        "(`--threads 1`) unless a page says otherwise; a run's `seconds` is its training time, a table's its wall clock.",
        "`--device cuda` ran once, on an NVIDIA H200 ([throughput](results/throughput.md)).",
        "",
        "| page | what | figures |",
        "|---|---|---|",
    ]
    for r in records:
        out.append(f"| [{r.name}](results/{r.page}) | {_cell(r.data['title'])} | {len(r.rows)} |")
    out += [
        "",
        "## Where the former sections went",
        "",
        "This file was a 2,983-line lab notebook until the records replaced it; the code and the CHANGELOG cite its sections",
        f"by number and heading. The notebook as it stood is `git show {NOTEBOOK}:docs/results.md`; its sections are now:",
        "",
    ]
    for r in records:
        out.append(f"- [{r.name}](results/{r.page}): " + "; ".join(r.data["legacy"]) + ".")
    out += ["", "## Updating a record", "", UPDATING, ""]
    return "\n".join(out)


UPDATING = """\
1. Edit `docs/results/records/<experiment>.toml`: the row's `ours` (and `per_seed`), `command`, `seeds`, `budget`,
   `code_version` (the commit the runs were made at) and `departures`; a new figure is a new `[[rows]]` table (add a
   `[rows.readme]` table to list it in the README). Keep current results only: a superseded figure leaves the record
   (git and CHANGELOG.md keep it).
2. Run `python docs/render_results.py`: it rewrites the README's table, the pages and this index.
3. `python -m pytest tests/test_results_record.py` checks that nothing rendered differs from the records."""


def render_folder_readme(records: list[Record]) -> str:
    out = [
        "# Results pages",
        "",
        GENERATED.format(name="*").replace("records/*.toml", "records/"),
        "",
        "The index is [docs/results.md](../results.md). Pages:",
        "",
    ]
    out += [f"- [{r.page}]({r.page}): {r.data['title']}" for r in records]
    out += ["", "## Updating a record", "", UPDATING, ""]
    return "\n".join(out)


# --- all files ----------------------------------------------------------------------------------------------------


def render_all(records: list[Record] | None = None) -> dict[Path, str]:
    """Every rendered file and its text (README.md: the whole file with the table spliced in)."""
    records = load_records() if records is None else records
    files = {README: splice_readme(README.read_text(encoding="utf-8"), render_readme_table(records))}
    files |= {PAGES / r.page: render_page(r) for r in records}
    files[INDEX] = render_index(records)
    files[FOLDER_README] = render_folder_readme(records)
    return files


def stale_pages(records: list[Record]) -> list[Path]:
    """Pages in docs/results/ that no record renders (a renamed or removed record leaves one behind)."""
    wanted = {PAGES / r.page for r in records} | {FOLDER_README}
    return sorted(p for p in PAGES.glob("*.md") if p not in wanted)


def check() -> list[str]:
    """A unified diff for every rendered file that differs from its file on disk, and one line per stale page."""
    records = load_records()
    problems = []
    for path, text in render_all(records).items():
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current != text:
            rel = path.relative_to(ROOT)
            diff = difflib.unified_diff(current.splitlines(), text.splitlines(), f"{rel} (on disk)", f"{rel} (rendered)", lineterm="", n=1)
            problems.append("\n".join(diff))
    problems += [f"{p.relative_to(ROOT)}: no record renders this page (remove it, or restore its record)" for p in stale_pages(records)]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a rendered file differs from the records")
    args = parser.parse_args(argv)
    if args.check:
        problems = check()
        for p in problems:
            print(p)
        if problems:
            print(f"{len(problems)} file(s) differ from docs/results/records: run python docs/render_results.py", file=sys.stderr)
        return 1 if problems else 0
    for path, text in render_all().items():
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
