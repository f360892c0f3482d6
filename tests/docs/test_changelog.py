"""CHANGELOG.md keeps the Keep a Changelog form (https://keepachangelog.com/en/1.1.0/): an
``[Unreleased]`` section on top, then one section per release with its date, newest first,
changes grouped under the allowed headings; it cites no internal issue numbers, its bullets are
short, and its newest release is the version the package reports."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import date
from pathlib import Path

import pytest

import depnmt

REPO = Path(__file__).resolve().parents[2]
CHANGELOG = REPO / "CHANGELOG.md"

GROUPS = ("Added", "Changed", "Deprecated", "Removed", "Fixed", "Security")   # this order
RELEASE = re.compile(r"## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d{2}-\d{2})")
ISSUE_NUMBER = (re.compile(r"\bissues?[ -]?#?\d+", re.IGNORECASE),   # "issue 12", "issues 10"
                re.compile(r"(?<![\w&/])#\d+\b"))                     # "#12"
MAX_BULLET_LINES = 3


@dataclass
class Section:
    """One ``## `` section: its heading line and its ``### `` groups in file order."""
    heading: str
    groups: list[str] = field(default_factory=list)


def without_comments(text: str) -> str:
    """``text`` without HTML comments (``<!-- ... -->``, possibly over several lines)."""
    return re.sub(r"<!--.*?-->", "", text, flags=re.DOTALL)


def sections(text: str) -> list[Section]:
    """The ``## `` sections of a changelog and the ``### `` group headings under each."""
    found: list[Section] = []
    for line in text.splitlines():
        if line.startswith("## "):
            found.append(Section(line))
        elif line.startswith("### "):
            assert found, f"group before any section: {line!r}"
            found[-1].groups.append(line[4:].strip())
    return found


def bullets(text: str) -> list[list[str]]:
    """Each ``- `` bullet of ``text`` as its lines (the bullet line and its indented
    continuation lines)."""
    items: list[list[str]] = []
    open_item = False
    for line in text.splitlines():
        if line.startswith("- "):
            items.append([line])
            open_item = True
        elif open_item and line.startswith("  ") and line.strip():
            items[-1].append(line)
        else:
            open_item = False
    return items


def releases(text: str) -> list[tuple[tuple[int, int, int], date]]:
    """(version, date) of every release section, in file order."""
    out = []
    for section in sections(text)[1:]:
        m = RELEASE.fullmatch(section.heading)
        assert m, f"not '## [X.Y.Z] - YYYY-MM-DD': {section.heading!r}"
        out.append((tuple(int(g) for g in m.groups()[:3]), date.fromisoformat(m.group(4))))
    return out


def structure_errors(text: str) -> list[str]:
    """What in ``text`` breaks the Keep a Changelog structure (empty list: nothing)."""
    errors = []
    text = without_comments(text)
    if not text.startswith("# Changelog\n"):
        errors.append("the first line is not '# Changelog'")
    found = sections(text)
    if not found or found[0].heading != "## [Unreleased]":
        errors.append("the first section is not '## [Unreleased]'")
    for section in found:
        unknown = [g for g in section.groups if g not in GROUPS]
        if unknown:
            errors.append(f"{section.heading}: groups {unknown} (allowed: {GROUPS})")
        known = [g for g in section.groups if g in GROUPS]
        if known != sorted(set(known), key=GROUPS.index):
            errors.append(f"{section.heading}: groups {known} repeated or not in {GROUPS}'s order")
    try:
        found_releases = releases(text)
    except AssertionError as error:
        return errors + [str(error)]
    versions = [v for v, _ in found_releases]
    if versions != sorted(set(versions), reverse=True):
        errors.append(f"releases not newest first or repeated: {versions}")
    dates = [d for _, d in found_releases]
    if dates != sorted(dates, reverse=True):
        errors.append(f"release dates not newest first: {dates}")
    return errors


def issue_numbers(text: str) -> list[str]:
    """The internal issue references in ``text`` ("issue 12", "(issue 10, item 7)", "#12")."""
    return [m.group(0) for pattern in ISSUE_NUMBER for m in pattern.finditer(text)]


def test_changelog_has_the_keep_a_changelog_structure():
    text = CHANGELOG.read_text(encoding="utf-8")
    assert structure_errors(text) == []
    assert releases(without_comments(text)), "no release section"


@pytest.mark.parametrize("broken, error", [
    ("# Changelog\n\n## [0.2.0] - 2026-11-26\n", "'## [Unreleased]'"),
    ("# Changelog\n\n## [Unreleased]\n\n## [0.2.0]\n", "YYYY-MM-DD"),
    ("# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-11-26\n\n### Improved\n", "Improved"),
    ("# Changelog\n\n## [Unreleased]\n\n## [0.2.0] - 2026-11-26\n\n### Fixed\n\n### Added\n",
     "order"),
    ("# Changelog\n\n## [Unreleased]\n\n## [0.1.0] - 2026-11-22\n\n## [0.2.0] - 2026-11-26\n",
     "newest first"),
])
def test_structure_check_finds_what_breaks_the_form(broken, error):
    assert any(error in e for e in structure_errors(broken)), structure_errors(broken)


def test_changelog_names_no_internal_issue_numbers():
    assert issue_numbers(CHANGELOG.read_text(encoding="utf-8")) == []


def test_docs_site_and_readme_name_no_internal_issue_numbers():
    """Every page of the site (``docs/``, archived runs aside) and the README: users read
    current behaviour there, and the project's issue numbers mean nothing to them."""
    pages = [REPO / "README.md"] + [p for p in sorted((REPO / "docs").rglob("*.md"))
                                    if "results" not in p.relative_to(REPO / "docs").parts[:-1]]
    found = {str(p.relative_to(REPO)): issue_numbers(p.read_text(encoding="utf-8"))
             for p in pages}
    assert len(pages) > 20 and {p: n for p, n in found.items() if n} == {}


def test_issue_check_finds_the_usual_spellings():
    text = "- x (issue 12). - y (issue 10, item 7); issues 13 and 14; the issue-11 model; #15"
    assert issue_numbers(text) == ["issue 12", "issue 10", "issues 13", "issue-11", "#15"]
    assert issue_numbers("- an issue with 2 threads; `--max-tokens 4,000`; C# 7") == []


def test_changelog_bullets_are_short():
    found = bullets(without_comments(CHANGELOG.read_text(encoding="utf-8")))
    assert len(found) > 10
    long = [b[0] for b in found if len(b) > MAX_BULLET_LINES]
    assert long == [], f"bullets over {MAX_BULLET_LINES} lines"


def test_a_bullet_is_its_line_and_indented_continuations():
    text = "### Added\n- a\n  b\n- c\n<!-- x -->\n\n  d\n- e\n"
    assert bullets(without_comments(text)) == [["- a", "  b"], ["- c"], ["- e"]]


def test_newest_release_is_the_package_version():
    found = releases(without_comments(CHANGELOG.read_text(encoding="utf-8")))
    assert found, "no release section"
    newest = found[0][0]
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")   # no tomllib on 3.10
    project_version = re.search(r'^version = "([^"]+)"$', pyproject, re.MULTILINE).group(1)
    versions = (".".join(map(str, newest)), depnmt.__version__, project_version)
    assert len(set(versions)) == 1, f"CHANGELOG, depnmt.__version__, pyproject.toml: {versions}"
