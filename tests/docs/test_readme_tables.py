"""The README's result tables are the results page's numbers (which
``tests/docs/test_results_page.py`` checks against the archive): every system's BLEU (mean ±
sd), chrF, per-run BLEU, Δ BLEU against abs with its interval, and the Holm-corrected
approximate-randomisation p-value (to two significant figures), row by row."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

HEADER = ("| system | BLEU, mean ± sd | runs (seeds 1, 2, 3) | chrF | Δ BLEU vs abs [95 % CI] "
          "| p AR (Holm) |")
# the README's tables in order, and the results page's section each repeats
SECTIONS = ("multi30k-en-de", "small-enja-ja-en-50000")


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def readme_tables() -> list[list[list[str]]]:
    lines = (REPO / "README.md").read_text(encoding="utf-8").replace("−", "-").splitlines()
    tables = []
    for i, line in enumerate(lines):
        if line == HEADER:
            rows = []
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rows.append(cells(row))
            tables.append(rows)
    return tables


def section(name: str) -> list[list[str]]:
    text = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    body = text.split(f"<!-- report:{name} -->")[1].split(f"<!-- /report:{name} -->")[0]
    return [cells(line) for line in body.splitlines() if line.startswith("|")]


def test_the_readme_has_both_tables():
    assert [len(t) for t in readme_tables()] == [5, 4]


@pytest.mark.parametrize("index", range(len(SECTIONS)))
def test_readme_rows_are_the_results_pages(index):
    page = section(SECTIONS[index])
    for system, bleu, runs, chrf, delta, p in readme_tables()[index]:
        assert [system, "3", bleu, chrf, runs] in page, system
        if system != "abs":
            row = next(r for r in page if r[:2] == [system, "abs"])   # the BLEU comparisons
            # the README gives p to two significant figures (0.0344 -> 0.034)
            assert row[2] == delta and float(f"{float(row[4]):.2g}") == float(p), (system, row)
