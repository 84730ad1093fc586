"""The docs are a manual: no dates, machine load or internal issue numbers.

Grep-based and fast (no mkdocs build). Dated evidence belongs in the result files
(``docs/results/``, e.g. ``docs/results/CHANGELOG.md``), which this test skips.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: what a manual page must not say, with why
FORBIDDEN = {
    "a date": re.compile(
        r"\b20\d\d-[01]\d-[0-3]\d\b|\b(?:January|February|March|April|May|June|July"
        r"|August|September|October|November|December) 20\d\d\b"
    ),
    # a space in these phrases matches any run of whitespace: a phrase wrapped
    # across two lines of a page is still caught
    "machine load": re.compile(
        (
            r"load average|\bload \d|\bother (?:jobs|sweeps?)\b|\b(?:on|shar\w+) the "
            r"(?:same |2 |two )?(?:CPU )?cores\b|alone on the machine|\bquiet machine"
            r"|\bthe machine here\b|\bmachine (?:was )?otherwise idle"
        ).replace(" ", r"\s+"),
        re.I,
    ),
    "an internal issue number": re.compile(r"\bissues? #?\d+|(?<![\w&/#])#\d+\b", re.I),
}


def _manual_pages() -> list[Path]:
    docs = ROOT / "docs"
    pages = [p for p in docs.rglob("*.md") if p.relative_to(docs).parts[0] != "results"]
    return [*sorted(pages), ROOT / "README.md"]


def _hits(text: str) -> list[str]:
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)  # generated-results markers
    found = []
    for what, pattern in FORBIDDEN.items():
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"line {line}: {what}: {match.group(0)!r}")
    return found


def test_manual_pages_have_no_dates_load_or_issue_numbers():
    bad = {
        str(p.relative_to(ROOT)): h
        for p in _manual_pages()
        if (h := _hits(p.read_text()))
    }
    assert not bad, bad


def test_the_check_catches_each_kind():
    assert _hits("Measured 2026-11-27 on two cores.")[0].endswith("'2026-11-27'")
    assert _hits("at load average 10")
    assert _hits("while two other sweeps shared the cores")
    assert _hits("ran beside other\n    sweeps, so upper bounds")  # wrapped
    assert _hits("the fast path (issue 16)")
    assert _hits("see #12")
    assert not _hits("a 2-core CPU, 16 CPU cores, the prototype core, [x](#top-k-12)")


def _table_after(text: str, heading: str) -> list[str]:
    section = text.split(heading, 1)[1]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows[2:]  # without header and separator


def test_readme_results_table_is_short_and_readable():
    """At most 12 rows, cells of at most 160 characters, each linking to the docs."""
    readme = (ROOT / "README.md").read_text()
    rows = _table_after(readme, "## Headline results")
    assert 1 <= len(rows) <= 12, len(rows)
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert max(len(c) for c in cells) <= 160, row
        assert "](docs/" in row, row
