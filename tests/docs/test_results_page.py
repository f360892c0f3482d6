"""docs/results.md is generated: its tables are what ``depnmt report`` gives on the archived runs
(``bench/results_page.py``), so a number edited by hand, or an archive changed without the page,
fails here."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.scripts import load_script

gen = load_script("results_page")
PAGE = REPO / "docs" / "results.md"


def fake_report(comparison) -> tuple[str, list]:
    return f"| table of {comparison.name} |", []


@pytest.mark.slow
def test_results_page_is_what_the_archive_gives(shared_data):
    """Runs every ``depnmt report`` of the page (about 30 CPU-seconds: 10,000 shuffles of
    approximate randomization per comparison)."""
    page = PAGE.read_text(encoding="utf-8")
    assert gen.generate(page) == page, "docs/results.md differs: run python bench/results_page.py"


def test_every_comparison_has_one_block_on_the_page():
    page = PAGE.read_text(encoding="utf-8")
    for comparison in (*gen.COMPARISONS, *gen.EVIDENCE):
        begin, end = gen.markers(comparison.name)
        assert page.count(begin) == 1 and page.count(end) == 1


def test_a_hand_edited_number_is_replaced_and_the_prose_kept(monkeypatch):
    monkeypatch.setattr(gen, "EVIDENCE", ())     # its verdict table: tests/cli/test_results_evidence
    page = ("intro\n<!-- report:multi30k-en-de -->\n| abs | 99.99 |\n"
            "<!-- /report:multi30k-en-de -->\nprose after\n"
            "<!-- report:small-enja-ja-en-50000 -->\n<!-- /report:small-enja-ja-en-50000 -->\n"
            "<!-- report:small-enja-ja-en-50000-control -->\n"
            "<!-- /report:small-enja-ja-en-50000-control -->\n"
            "<!-- report:small-enja-ja-en-50000-control-left-branching -->\n"
            "<!-- /report:small-enja-ja-en-50000-control-left-branching -->\n"
            "<!-- report:small-enja-ja-en-50000-evidence -->\n"
            "<!-- /report:small-enja-ja-en-50000-evidence -->\n")
    out = gen.generate(page, fake_report)
    assert "99.99" not in out
    assert out.startswith("intro\n<!-- report:multi30k-en-de -->\n```bash\ndepnmt report ")
    assert "| table of multi30k-en-de |\n" in out
    assert "rel 0).\n<!-- /report:multi30k-en-de -->\nprose after\n" in out   # claims: no records
    assert gen.generate(out, fake_report) == out


def test_the_command_shown_is_the_command_run():
    """Shown with ``$DEPNMT_DATA_DIR`` for the data folder, which the run uses."""
    comparison = gen.COMPARISONS[0]
    shown = comparison.command().replace(" \\\n ", "").split()
    assert shown[3].startswith("$DEPNMT_DATA_DIR/")
    shown[3] = shown[3].replace("$DEPNMT_DATA_DIR", str(gen.data_folder()))
    assert shown == comparison.argv("results")


def test_a_comparison_without_archived_runs_says_it_is_running(tmp_path):
    missing = gen.Comparison("later", "ref.txt", "en", ("abs",), (str(tmp_path / "seed1"),))
    text = gen.block(missing, fake_report)
    assert "is running" in text and "table of" not in text
    assert "-f " + str(tmp_path / "seed1") in text


def test_a_missing_marker_is_an_error():
    with pytest.raises(ValueError, match="report:multi30k-en-de"):
        gen.generate("no markers here\n", fake_report)


def vs(difference, low, high, p):
    return {"difference": difference, "low": low, "high": high, "p_ar_holm": p}


def claim(delta, upto=None):
    return gen.Claim("a", "b", delta, "paper", upto)


def test_the_verdict_rule():
    assert gen.verdict(vs(1.0, 0.01, 2.0, 0.002), claim(1.31), 0.84, 3) == "**supported**"
    assert gen.verdict(vs(0.8, -0.1, 1.8, 0.004), claim(0.81), 0.84, 3).startswith("**likely**")
    assert gen.verdict(vs(-0.8, -1.8, 0.1, 0.004), claim(0.81), 0.84, 3) == (
        "**not reproduced**: the difference goes the other way")
    assert gen.verdict(vs(1.5, 0.5, 2.5, 0.2), claim(1.0), 0.84, 3) == "**not reproduced**"
    assert gen.verdict(vs(0.2, -0.5, 0.8, 0.5), claim(0.50), 0.84, 3) == (
        "**not reproduced** (the paper's +0.50 is within the ±0.84 that 3 runs a side resolve)")


def test_a_claimed_range_is_judged_by_its_larger_end():
    """A paper's +0.6 to +0.9 is below ±0.84 only at its lower end: not called unresolvable."""
    assert gen.verdict(vs(0.1, -1.2, 1.4, 0.7), claim(0.1, 0.2), 0.84, 3) == (
        "**not reproduced** (the paper's +0.10 to +0.20 is within the ±0.84 that 3 runs a side "
        "resolve)")
    assert gen.verdict(vs(0.1, -1.2, 1.4, 0.7), claim(0.6, 0.9), 0.84, 3) == "**not reproduced**"
    assert gen.verdict(vs(0.6, -0.5, 1.7, 0.02), claim(0.6, 0.9), 0.84, 3).startswith("**likely")
    assert claim(-0.3, -0.8).largest() == -0.8 and claim(0.6, 0.9).text() == "+0.60 to +0.90"


def test_claims_wait_for_every_run_then_are_judged():
    claims = (gen.Claim("rel", "abs", 0.81, "Omote"), gen.Claim("dbsa", "abs", 1.0, "Deguchi"))

    def record(name, n, vs_abs=None):
        runs = [{"bleu": 30.0 + i * 0.5 + (name != "abs"), "chrf": 50.0 + i} for i in range(n)]
        return {"system": name, "n_runs": n, "runs": runs,
                "vs": {"abs": {"bleu": vs_abs}} if vs_abs else {}}

    partial = [record("abs", 3), record("rel", 3, vs(1.0, 0.2, 1.8, 0.01)), record("dbsa", 2)]
    assert gen.claims_table(claims, partial, 3) == (
        "Verdicts on the papers' claims: once every system has its 3 runs (so far: abs 3, "
        "dbsa 2, rel 3).")
    full = partial[:2] + [record("dbsa", 3, vs(-0.5, -1.5, 0.5, 0.3))]
    lines = gen.claims_table(claims, full, 3, "Other data there.").splitlines()
    assert lines[2] == ("| rel > abs (Omote) | +0.81 | +1.00 [+0.20, +1.80] | 0.0100 | "
                        "**supported** |")
    assert lines[3].startswith("| dbsa > abs (Deguchi) | +1.00 | -0.50 [-1.50, +0.50] | 0.3000 |"
                               " **not reproduced**")
    assert lines[-1].startswith("Verdict rule: **supported**")
    assert lines[-1].endswith("otherwise **not reproduced**. Other data there.")


def test_named_runs_wait_for_every_system_then_are_passed_one_by_one(tmp_path, monkeypatch):
    """A control's comparison names its runs (``-s``): it waits until each system has a run
    archived, then reads only the archived ones, under the names given (not today's scheme
    names, which two systems of one scheme would share)."""
    monkeypatch.setattr(gen, "REPO", tmp_path)
    real = gen.Runs("abs+dep+rel", "dep+rel", ("real/s1", "real/s2"))
    control = gen.Runs("abs+dep+rel on random trees", "abs+dep+rel", ("ctl/s1", "ctl/s2"))
    comparison = gen.Comparison("ctl", "ref.en", "en", ("abs+dep+rel on random trees",), (),
                                systems=(real, control),
                                questions=(gen.Question("abs+dep+rel", control.name, "tree?"),))
    for d in ("real/s1", "real/s2"):
        (tmp_path / d / "models" / "dep+rel").mkdir(parents=True)
    assert not comparison.archived()
    assert "is running" in gen.block(comparison, fake_report)
    assert "`ctl/` by" in gen.block(comparison, fake_report)
    (tmp_path / "ctl/s1/models/abs+dep+rel").mkdir(parents=True)
    assert comparison.archived() and comparison.runs() == 2
    args = comparison.argv("out")
    assert args.count("-s") == 3 and "ctl/s2/models/abs+dep+rel" not in args
    assert args[args.index("ctl/s1/models/abs+dep+rel") - 1] == "abs+dep+rel on random trees"
    assert args[args.index("ctl/s1/models/abs+dep+rel") + 1] == "ctl/s1/hyps/abs+dep+rel.en"
    assert "-s 'abs+dep+rel on random trees' ctl/s1/models/abs+dep+rel" in comparison.command()

    def report(_):
        return "| system | runs |\n|---|---|\n| abs+dep+rel on random trees | 1 |", [
            {"system": "abs+dep+rel on random trees", "scheme": "abs+dep+rel", "n_runs": 1},
            {"system": "abs+dep+rel", "scheme": "abs+dep+rel", "n_runs": 2}]
    text = gen.block(comparison, report)
    assert "| abs+dep+rel on random trees | 1 |" in text
    assert text.endswith("Answers: once every system has its 2 runs (so far: abs+dep+rel 2, "
                         "abs+dep+rel on random trees 1).")


def test_the_answer_rule():
    assert gen.answer(vs(1.0, 0.01, 2.0, 0.002), 0.84, 3) == "**yes**"
    assert gen.answer(vs(0.8, -0.1, 1.8, 0.004), 0.84, 3).startswith("**likely**")
    assert gen.answer(vs(-0.8, -1.8, -0.1, 0.004), 0.84, 3) == (
        "**no**: significantly the other way")
    assert gen.answer(vs(1.5, 0.5, 2.5, 0.2), 0.84, 3) == (
        "**not shown** (only differences beyond ±0.84 are resolved by 3 runs a side)")
    assert gen.answer(vs(0.2, -0.5, 0.8, None), None, 3) == "**not shown**"


def test_questions_are_answered_once_every_run_is_in():
    questions = (gen.Question("tree", "random", "Do trees beat random trees?"),)
    records = [{"system": "random", "n_runs": 3, "runs": [{"bleu": 30.0 + i, "chrf": 50.0}
                                                           for i in range(3)], "vs": {}},
               {"system": "tree", "n_runs": 3, "runs": [{"bleu": 31.0 + i, "chrf": 50.0}
                                                         for i in range(3)],
                "vs": {"random": {"bleu": vs(1.0, -0.6, 2.6, 0.03)}}}]
    lines = gen.questions_table(questions, records, 3).splitlines()
    assert lines[2].startswith("| Do trees beat random trees? | tree − random | +1.00 "
                               "[-0.60, +2.60] | 0.0300 | **likely**")
    assert lines[-1].startswith("Answer rule: **yes**")
    assert gen.questions_table(questions, records[:1], 3) == (
        "Answers: once every system has its 3 runs (so far: random 3, tree 0).")


def test_the_readme_gives_the_pages_generated_verdict():
    """The README's summary of "is it the tree?" is the verdict line the page generated from the
    archive (which ``test_results_page_is_what_the_archive_gives`` checks), word for word."""
    page = PAGE.read_text(encoding="utf-8")
    readme = [line.strip()
              for line in (REPO / "README.md").read_text(encoding="utf-8").splitlines()]
    for evidence in gen.EVIDENCE:
        begin, end = gen.markers(evidence.name)
        block = page.split(begin)[1].split(end)[0]
        summary = next(line for line in block.splitlines()
                       if line.startswith(f"**{evidence.question}**"))
        assert summary in readme, f"README.md: expected the line\n{summary}"
