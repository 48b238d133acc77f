"""The docs a user reads stay short and whole: README.md within 150 lines, and every relative
link in README.md, BENCHMARKS.md and docs/*.md names a file that exists (and, with a
``#fragment``, a heading of that file, by GitHub's anchor rule)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "BENCHMARKS.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def anchors(page: Path) -> set[str]:
    """GitHub's heading ids: lower case, punctuation but ``-`` dropped, spaces to ``-``."""
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    heads = re.findall(r"^#{1,6}\s+(.*?)\s*$", text, re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in heads}


def links(page: Path) -> list[str]:
    text = FENCE.sub("", page.read_text(encoding="utf-8"))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z]+:", t)]


def test_readme_is_at_most_150_lines() -> None:
    n = len((ROOT / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= 150, f"README.md has {n} lines; move details to docs/ (issue 45)"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            broken.append(f"{target}: no such heading")
    assert not broken, f"{page.name}: {broken}"


def test_the_checker_catches_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# A b\n[x](b.md) [y](a.md#a-b) [z](a.md#nope) [w](http://x)\n")
    assert links(tmp_path / "a.md") == ["b.md", "a.md#a-b", "a.md#nope"]
    assert anchors(tmp_path / "a.md") == {"a-b"}


def test_benchmarks_is_one_table_of_current_figures() -> None:
    """BENCHMARKS.md: what, command, machine, date, result, ratio per row; history left to git."""
    text = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert "`git log -p BENCHMARKS.md`" in text
    rows = [r for r in text.splitlines() if r.startswith("| ")]
    head = [c.strip() for c in rows[0].strip("|").split("|")]
    assert head == ["what", "command", "machine, load", "date", "result", "ratio to the baseline"]
    for row in rows[1:]:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip("|"))]
        assert len(cells) == 6 and re.match(r"20\d\d-\d\d-\d\d \d\d:\d\d", cells[3]), row
    assert len(text.splitlines()) <= 60
