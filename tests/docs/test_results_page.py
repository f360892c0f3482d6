"""docs/results.md is generated: its tables are what ``depnmt report`` gives on the archived runs
(``bench/results_page.py``), so a number edited by hand, or an archive changed without the page,
fails here."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.scripts import load_script

gen = load_script("results_page")
PAGE = REPO / "docs" / "results.md"


def fake_report(comparison) -> str:
    return f"| table of {comparison.name} |"


@pytest.mark.slow
def test_results_page_is_what_the_archive_gives(shared_data):
    """Runs every ``depnmt report`` of the page (about 40 CPU-seconds: 10,000 shuffles of
    approximate randomization per comparison)."""
    page = PAGE.read_text(encoding="utf-8")
    assert gen.generate(page) == page, "docs/results.md differs: run python bench/results_page.py"


def test_every_comparison_has_one_block_on_the_page():
    page = PAGE.read_text(encoding="utf-8")
    for comparison in gen.COMPARISONS:
        begin, end = gen.markers(comparison.name)
        assert page.count(begin) == 1 and page.count(end) == 1


def test_a_hand_edited_number_is_replaced_and_the_prose_kept():
    page = ("intro\n<!-- report:multi30k-en-de -->\n| abs | 99.99 |\n"
            "<!-- /report:multi30k-en-de -->\nprose after\n"
            "<!-- report:small-enja-ja-en-50000 -->\n<!-- /report:small-enja-ja-en-50000 -->\n")
    out = gen.generate(page, fake_report)
    assert "99.99" not in out
    assert out.startswith("intro\n<!-- report:multi30k-en-de -->\n```bash\ndepnmt report ")
    assert "| table of multi30k-en-de |\n<!-- /report:multi30k-en-de -->\nprose after\n" in out
    assert gen.generate(out, fake_report) == out


def test_the_command_shown_is_the_command_run():
    comparison = gen.COMPARISONS[0]
    shown = comparison.command().replace(" \\\n ", "").split()
    assert shown == comparison.argv("results")


def test_a_comparison_without_archived_runs_says_it_is_running(tmp_path):
    missing = gen.Comparison("later", "ref.txt", "en", ("abs",), (str(tmp_path / "seed1"),))
    text = gen.block(missing, fake_report)
    assert "is running" in text and "table of" not in text
    assert "-f " + str(tmp_path / "seed1") in text


def test_a_missing_marker_is_an_error():
    with pytest.raises(ValueError, match="report:multi30k-en-de"):
        gen.generate("no markers here\n", fake_report)
