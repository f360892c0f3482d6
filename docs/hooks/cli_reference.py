"""MkDocs hook: the command-line reference (``docs/reference/cli.md``) from the commands.

The page's marker line becomes, for every command of ``depnmt --help`` in its order, a
mkdocs-click block (help, usage and options rendered from the click command; hidden options,
the deprecated 0.1.0 spellings, left out) followed by the worked example its ``--help`` ends
with (:mod:`depnmt.commands.examples`). One block per command, because the ``depnmt`` group
imports its commands lazily and names them only in its own table. A command added to
:data:`depnmt.cli.COMMANDS` appears here without an edit of the page.
"""

from __future__ import annotations

MARKER = "<!-- depnmt commands -->"
PAGE = "reference/cli.md"


def on_page_markdown(markdown: str, page, **kwargs) -> str:
    """The reference page with its marker replaced by every command's section."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE}: no {MARKER} line to put the commands in")
    return markdown.replace(MARKER, commands_markdown())


def commands_markdown() -> str:
    """A section per command of ``depnmt``, in the order of ``depnmt --help``."""
    from depnmt.cli import COMMANDS
    return "\n".join(command_markdown(name, module) for name, (module, _) in COMMANDS.items())


def command_markdown(name: str, module: str) -> str:
    """The mkdocs-click block of ``depnmt NAME`` (from ``depnmt.commands.MODULE``) and its
    worked examples."""
    block = "\n".join(["::: mkdocs-click", f"    :module: depnmt.commands.{module}",
                       "    :command: command", f"    :prog_name: depnmt {name}",
                       "    :depth: 1", "    :style: plain", ""])
    return block + "\n" + examples_markdown(name)


def examples_markdown(name: str) -> str:
    """The worked examples of ``depnmt NAME`` as fenced ``bash`` blocks: a group's come from
    its subcommands when they have their own."""
    from depnmt.commands.examples import EXAMPLES, wrap
    paths = [path for path in EXAMPLES if path.startswith(name + " ")] or \
        [path for path in EXAMPLES if path == name]
    parts = []
    for path in paths:
        lines = [shown for line in EXAMPLES[path] for shown in wrap(line)]
        parts += [f"**Example** (`depnmt {path}`):", "", "```bash", *lines, "```", ""]
    return "\n".join(parts)
