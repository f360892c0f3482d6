"""The documentation: the MkDocs site builds in strict mode (every link and anchor resolves),
its command-line reference is generated from every command, and the README stays short, links
into the site, and shows only command lines that the current commands accept.

What the README check does and does not do: each ``depnmt`` line of a fenced ``bash`` block is
parsed by the real command with ``--help`` appended (the subcommand exists, every flag exists
and is not a hidden deprecated spelling, every flag that takes a value has one); values and
files are not checked, and nothing is trained. ``bash FILE`` lines are checked with
``bash -n FILE`` (syntax) and the test command must be exactly ``python -m pytest -q`` (CI runs
it). Any other command in a README block fails the test until a check for it is added here."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from depnmt.cli import COMMANDS, cli
from depnmt.core.errors import DepnmtError
from depnmt.model.schemes.names import parse_name

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
README = REPO / "README.md"
MAX_README_LINES = 200
SETUP_COMMANDS = ["bash bin/quickstart", "python -m pytest -q"]

# What user-facing text must not contain: internal issue numbers and dated status paragraphs.
ISSUE_NUMBER = re.compile(r"\bissues?[ -]?#?\d+|\(issue\b", re.IGNORECASE)
DATED_STATUS = re.compile(r"\bState at \d{1,2}:\d{2}|\bas of (?:\d{4}-\d{2}|\d{1,2}:\d{2})",
                          re.IGNORECASE)
# Pages allowed to keep them: the contributors' design notes (which cite the issues that made
# each seam) and the archived runs (data, not prose).
EXEMPT = (DOCS / "design.md", DOCS / "results")
SHELL_STOP = {"<", ">", "|", ";", "2>", ">>"}        # a command's own words end here
MKDOCS = ("mkdocs", "material", "mkdocs_click")


# ---------------------------------------------------------------- the site

@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """``mkdocs build --strict`` of the repository's site into a temporary folder."""
    missing = [name for name in MKDOCS if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed (pip install -e '.[dev]')")
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    # no --quiet: it hides the warnings from the count that makes --strict fail
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict",
                           "-f", str(REPO / "mkdocs.yml"), "-d", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}{proc.stderr}"
    return out


def page_html(site: Path, page: str) -> str:
    """The built HTML of ``page`` (a path under docs/, e.g. ``guide/train.md``)."""
    stem = page[:-len(".md")]
    built = site / "index.html" if stem == "index" else site / stem.removesuffix("/index") / "index.html"
    return built.read_text(encoding="utf-8")


def anchors(page: str) -> set[str]:
    """The ``id`` attributes of a built page."""
    return set(re.findall(r'\bid="([^"]+)"', page))


def test_site_builds_strictly(site):
    """Broken links, missing anchors, pages left out of the nav: each fails the build."""
    assert (site / "index.html").exists()
    assert (site / "reference" / "cli" / "index.html").exists()


def test_cli_reference_shows_every_worked_example(site):
    """Each command's section ends with the example its ``--help`` ends with (a group's: its
    subcommands' examples)."""
    from depnmt.commands.examples import EXAMPLES
    text = words(html.unescape(re.sub(r"<[^>]+>", "", page_html(site, "reference/cli.md"))))
    leaves = [p for p in EXAMPLES if p and not any(q.startswith(p + " ") for q in EXAMPLES)]
    for path in leaves:
        assert f"Example (depnmt {path}):" in text, path
        assert words("\n".join(EXAMPLES[path])) in text, path


def words(text: str) -> str:
    """``text`` with continued lines joined and every run of whitespace one space."""
    return " ".join(text.replace("\\\n", " ").split())


def visible_options(command: click.Command) -> set[str]:
    """Every flag spelling of ``command``'s options that ``--help`` shows."""
    return {opt for param in command.params
            if isinstance(param, click.Option) and not param.hidden
            for opt in (*param.opts, *param.secondary_opts)}


def subcommands(command: click.Command, path: tuple[str, ...] = ()):
    """(command path, command) of ``command`` and, for a group, of everything below it."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command)
        for name in command.list_commands(ctx):
            yield from subcommands(command.get_command(ctx, name), (*path, name))


def test_cli_reference_shows_every_option_of_every_command(site):
    """The generated page holds a section per (sub)command with each of its visible long
    options: it is the help of the code, not a copy."""
    page = page_html(site, "reference/cli.md")
    ids, text = anchors(page), html.unescape(re.sub(r"<[^>]+>", "", page))
    for path, command in subcommands(cli):
        if not path:
            continue
        assert "depnmt-" + "-".join(path) in ids, path
        missing = {o for o in visible_options(command) if o.startswith("--")} - set(
            re.findall(r"--[\w-]+", text))
        assert not missing, f"depnmt {' '.join(path)}: {sorted(missing)} not in the reference"


def test_faq_lists_every_deprecated_spelling():
    """The FAQ's table of 0.1.0 spellings is the code's one table of them, row for row."""
    from depnmt.commands.options import DEPRECATED
    text = (DOCS / "reference" / "faq.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([\w ]+)` \| `(-[\w-]+)` \| `([\w/-]+)` \|$", text, re.MULTILINE)
    assert rows == [(cmd, old, new) for cmd, table in DEPRECATED.items()
                    for old, new in table.items()]


# ---------------------------------------------------------------- text rules

def prose_files() -> list[Path]:
    """README, CHANGELOG and every page of docs/ except the exempt ones."""
    pages = [p for p in sorted(DOCS.rglob("*.md"))
             if not any(p == e or e in p.parents for e in EXEMPT)]
    return [README, REPO / "CHANGELOG.md", *pages]


@pytest.mark.parametrize("pattern", [ISSUE_NUMBER, DATED_STATUS], ids=["issue", "dated"])
def test_no_issue_numbers_or_dated_status_in_user_docs(pattern):
    found = [f"{p.relative_to(REPO)}:{n}: {m.group(0)!r}"
             for p in prose_files()
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             for m in pattern.finditer(line)]
    assert found == []


@pytest.mark.parametrize("text, pattern", [
    ("as Omote et al. (issue 12) found", ISSUE_NUMBER), ("issues 3–5", ISSUE_NUMBER),
    ("Issue 26's bullets", ISSUE_NUMBER), ("State at 03:10: running", DATED_STATUS),
    ("as of 2026-11-25 the campaign", DATED_STATUS)])
def test_text_rules_find_what_they_forbid(text, pattern):
    assert pattern.search(text)


@pytest.mark.parametrize("text", ["an issue with 2 threads", "measured 2026-11-23 18:36 UTC",
                                  "the state of a run"])
def test_text_rules_leave_ordinary_text(text):
    assert not ISSUE_NUMBER.search(text) and not DATED_STATUS.search(text)


# ---------------------------------------------------------------- the README

def test_readme_is_short():
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines"


def test_readme_links_resolve(site):
    """Every relative link of the README names an existing file; a link into a docs page with
    an anchor names an id of the built page."""
    text = README.read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert any(link.startswith("docs/") for link in links)
    for link in links:
        if re.match(r"[a-z]+://", link):
            continue
        target, _, anchor = link.partition("#")
        assert (REPO / target).exists(), link
        if anchor and target.startswith("docs/") and target.endswith(".md"):
            assert anchor in anchors(page_html(site, target[len("docs/"):])), link


def bash_blocks(markdown: str) -> list[list[str]]:
    """The command lines of each fenced ``bash`` block (continuations joined)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)
    return [[line for line in block.replace("\\\n", " ").splitlines() if line.strip()]
            for block in blocks]


def commands_of(line: str) -> list[list[str]]:
    """The words of each command of a shell line (``a && b``), without redirections, pipes
    and comments."""
    found, words, stopped = [], [], False
    for word in shlex.split(line, comments=True) + ["&&"]:
        if word == "&&":
            found += [words] if words else []
            words, stopped = [], False
        elif word in SHELL_STOP:
            stopped = True                # a redirection or pipe: the command's words end
        elif not stopped:
            words.append(word)
    return found


def resolve(args: list[str]) -> tuple[click.Command, list[str]]:
    """The (sub)command that ``depnmt ARGS`` runs, and the words after its name."""
    command, ctx = cli, click.Context(cli)
    while isinstance(command, click.Group):
        assert args and not args[0].startswith("-"), f"no subcommand in depnmt {args}"
        sub = command.get_command(ctx, args[0])
        assert sub is not None, f"no command depnmt ... {args[0]}"
        command, args = sub, args[1:]
    return command, args


def check_depnmt_line(args: list[str]) -> None:
    """``depnmt ARGS``: every flag is a visible option, and the command parses ARGS --help."""
    command, rest = resolve(args)
    shown = visible_options(command)
    flags = [w.split("=")[0] for w in rest if re.match(r"--?[A-Za-z]", w)]
    hidden = [f for f in flags if f not in shown]
    assert not hidden, f"depnmt {' '.join(args)}: {hidden} unknown or deprecated"
    result = CliRunner().invoke(cli, [*without_config(args), "--help"])
    assert result.exit_code == 0, f"depnmt {' '.join(args)} --help:\n{result.output}"
    for name in scheme_values(rest):
        try:
            canonical = parse_name(name).canonical
        except DepnmtError as error:
            pytest.fail(f"depnmt {' '.join(args)}: {error}")
        assert canonical == name, f"depnmt {' '.join(args)}: {name} is now {canonical}"


def scheme_values(words: list[str]) -> list[str]:
    """The values of ``--scheme`` in a command's words."""
    return [value for flag, value in zip(words, [*words[1:], ""]) if flag == "--scheme"] + \
        [w.split("=", 1)[1] for w in words if w.startswith("--scheme=")]


def without_config(args: list[str]) -> list[str]:
    """``args`` without ``--config FILE``: click reads FILE (eagerly, before ``--help``), and an
    example's file does not exist here."""
    at = args.index("--config") if "--config" in args else None
    return args if at is None else [*args[:at], *args[at + 2:]]


def check_command(words: list[str]) -> None:
    """One README command: see the module docstring for what each kind is checked for."""
    line = " ".join(words)
    if words[0] == "depnmt":
        check_depnmt_line(words[1:])
    elif words[:1] == ["bash"] and len(words) == 2:
        assert subprocess.run(["bash", "-n", str(REPO / words[1])]).returncode == 0, line
    elif line != "python -m pytest -q":
        pytest.fail(f"README command without a check in tests/docs/test_site.py: {line}")


def test_readme_setup_is_the_two_commands():
    """CI runs the test command exactly as the README writes it."""
    blocks = bash_blocks(README.read_text(encoding="utf-8"))
    assert [" ".join(c) for line in blocks[0] for c in commands_of(line)] == SETUP_COMMANDS


def test_every_readme_command_line_is_accepted():
    commands = [c for block in bash_blocks(README.read_text(encoding="utf-8"))
                for line in block for c in commands_of(line)]
    assert sum(c[0] == "depnmt" for c in commands) >= 5
    for words in commands:
        check_command(words)


def test_every_docs_command_line_is_accepted():
    """The ``depnmt`` lines of the site's ``bash`` examples (``torchrun … -m depnmt.cli`` too),
    checked as the README's; other programs in them (pip, torchrun's own flags) are not."""
    checked = 0
    for page in prose_files()[2:]:
        for block in bash_blocks(page.read_text(encoding="utf-8")):
            for words in (c for line in block for c in commands_of(line)):
                args = depnmt_args(words)
                if args is not None:
                    check_depnmt_line(args)
                    checked += 1
    assert checked >= 20


def depnmt_args(words: list[str]) -> list[str] | None:
    """The arguments of ``depnmt`` in a command's words (``depnmt ARGS``, ``… -m depnmt.cli
    ARGS``), None when the command does not run depnmt."""
    if words[0] == "depnmt":
        return words[1:]
    if "depnmt.cli" in words and words[words.index("depnmt.cli") - 1] == "-m":
        return words[words.index("depnmt.cli") + 1:]
    return None


@pytest.mark.parametrize("line", [
    "depnmt train --no-such-flag 1",             # an unknown flag
    "depnmt frobnicate -i x",                    # an unknown command
    "depnmt score --ref r --bootstrap",          # a flag without its value
    "depnmt train -i b -o m --scheme Transformer_dep+rel",   # a 0.1.0 scheme name
    "depnmt train -i b -o m --scheme=abs+nothing",           # no such scheme
])
def test_readme_check_rejects_a_wrong_line(line):
    with pytest.raises((AssertionError, pytest.fail.Exception)):
        check_depnmt_line(commands_of(line)[0][1:])


def test_hidden_spellings_are_not_visible_options():
    """A deprecated spelling is a hidden option: a README line using it fails the check."""
    command = click.Command("c", params=[click.Option(["-o", "--output"]),
                                         click.Option(["--out-dir"], hidden=True)])
    assert visible_options(command) == {"-o", "--output"}


def test_command_words_leave_out_redirections_and_comments():
    assert commands_of("depnmt translate -m m < in.txt > out.txt  # note") == \
        [["depnmt", "translate", "-m", "m"]]
    assert commands_of("depnmt models download en && depnmt parse -i p -o q") == \
        [["depnmt", "models", "download", "en"], ["depnmt", "parse", "-i", "p", "-o", "q"]]
