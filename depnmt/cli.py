"""The ``depnmt`` command: a click group whose subcommands live in ``depnmt/commands/``.

Subcommands are imported lazily, so ``depnmt score --help`` does not import torch or a parser.
Help pages are rich-click's, in option sections with a worked example at the end
(``depnmt/commands/helpgroups.py``, ``depnmt/commands/examples.py``).
Every :class:`~depnmt.core.errors.DepnmtError` becomes one ``error: ...`` line on stderr and exit
status 2 — never a traceback.
"""

from __future__ import annotations

import importlib
import io
import os
import sys

import click

from depnmt.commands.examples import epilog
from depnmt.commands.helpgroups import HelpGroup, LazyCommandPanel, help_config, rich_command
from depnmt.core.errors import DepnmtError, reason
from depnmt.core.heap import own_process
from depnmt.core.textio import guard_messages, stand_in_for_closed_streams
from depnmt.version import __version__

# command name -> (module under depnmt.commands, one-line help shown by `depnmt --help`)
COMMANDS = {
    "prepare": ("prepare", "Read, normalise, tokenize and filter a parallel corpus into train/dev/test."),
    "parse": ("parse", "Dependency-parse tokenized text into CoNLL-U (stanza, spaCy/GiNZA or given trees)."),
    "controls": ("controls", "Control trees of a parse folder: random, shuffled, chains or noisy (is it the tree?)."),
    "models": ("models", "Download stanza's parser models (only when asked; parse never downloads)."),
    "multitask": ("multitask", "Mix translation with source parsing (linearized trees, task tags)."),
    "bpe": ("bpe", "Learn and apply subword-nmt BPE (or word-level vocabularies)."),
    "train": ("train", "Train a Transformer with a chosen positional scheme."),
    "average": ("average", "Average the last or best checkpoints of a run (train --keep-last N)."),
    "translate": ("translate", "Translate raw text (stdin -> stdout) with a trained model directory."),
    "rescore": ("forced", "Score given translations (forced decoding): log p, raw and length-normalised."),
    "minimal-pairs": ("minimalpairs", "A contrastive set from English references: agreement, negation, order."),
    "contrastive": ("contrastive", "Accuracy on a contrastive test set (LingEval97, ContraPro, TSV), per category."),
    "export": ("export", "Export a trained model to CTranslate2 (abs, noabs+rel, noabs schemes) for serving."),
    "score": ("score", "BLEU/chrF/TER with sacrebleu, paired bootstrap and length buckets."),
    "report": ("report", "Results table of trained systems: BLEU, chrF, p-values, speed, size."),
    "runs": ("runs", "Where every training run under some folders stands (a campaign's progress)."),
    "archive": ("archive", "Copy finished runs' results (configs, logs, hypotheses; no checkpoints)."),
    "plot": ("plot", "Training curves of several runs: dev loss and BLEU vs updates and time."),
    "inspect": ("inspect", "Print (or draw: --png) the per-pair tree matrices a scheme sees."),
    "analyze": ("analyze", "Analyse models and trees: AWSL of GPS models, UAS against gold trees."),
}


class LazyGroup(HelpGroup):
    """A rich-click group that imports a subcommand's module only when that subcommand is used
    (its help lists the commands from :data:`COMMANDS`, unimported). Each command comes as a
    rich-click copy with its option sections and worked example
    (:func:`~depnmt.commands.helpgroups.rich_command`)."""

    main = click.Command.main       # click's error handling (depnmt.cli.main reports errors)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.panels.append(LazyCommandPanel(COMMANDS_TITLE, commands=list(COMMANDS)))
        self._loaded: dict[str, click.Command] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def command_summaries(self) -> dict[str, str]:
        """Command name -> its one-line help, without importing the command."""
        return {name: help_ for name, (_, help_) in COMMANDS.items()}

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        if name not in self._loaded:
            module = importlib.import_module(f"depnmt.commands.{COMMANDS[name][0]}")
            self._loaded[name] = rich_command(module.command, name, epilog)
        return self._loaded[name]


COMMANDS_TITLE = "Commands (each stage writes files the next one reads)"


@click.group(cls=LazyGroup, epilog=epilog(""),
             context_settings={"help_option_names": ["-h", "--help"],
                               "rich_help_config": help_config(COMMANDS_TITLE)})
@click.version_option(__version__, prog_name="depnmt")
def cli() -> None:
    """Syntax-aware neural machine translation."""


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the CLI, turning user errors into one-line messages.

    A :class:`~depnmt.core.errors.DepnmtError` or an ``OSError`` (no space, permission, ...) that no
    stage named more precisely is printed as one ``error: ...`` line, exit status 2. Other
    exceptions are bugs and keep their traceback.
    """
    if argv is None:        # the console script; a caller passing argv keeps its own gc
        own_process()       # and its own standard error
        guard_messages()
    stand_in_for_closed_streams()
    try:
        cli.main(args=argv, prog_name="depnmt", standalone_mode=False)
        flushed(0)
    except DepnmtError as exc:
        fail(str(exc))
    except click.exceptions.Abort as exc:
        if isinstance(exc.__cause__, EOFError):     # click turns every EOFError into Abort
            raise exc.__cause__ from None           # (meant for prompts; we have none): a bug
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        _drop_stdout()
        sys.exit(141)
    except OSError as exc:
        fail(describe_os_error(exc))
    except SystemExit as exc:
        # click turns a write to a closed pipe into exit status 1, standard output wrapped in
        # its (Py|_Py)PacifyFlushWrapper
        pipe_closed = type(sys.stdout).__name__.endswith("PacifyFlushWrapper")
        flushed(141 if pipe_closed else exc.code)
    except click.exceptions.Exit as exc:
        flushed(exc.exit_code)


def flushed(code: int | str | None) -> None:
    """Exit with ``code`` once standard output is flushed; a reader that went away meanwhile
    (``| head``) is exit status 141, as for a shell command killed by SIGPIPE (flushing here,
    not at the interpreter's exit, where it would print a message and exit 120)."""
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _drop_stdout()
        sys.exit(141)
    sys.exit(code)


def fail(message: str) -> None:
    """Print ``error: MESSAGE`` and exit with status 2 (output not yet flushed is dropped)."""
    print(f"error: {message}", file=sys.stderr)
    _drop_stdout()
    sys.exit(2)


def describe_os_error(exc: OSError) -> str:
    """``FILE: reason`` for an OSError that names its file, else its reason alone."""
    what = reason(exc)
    files = [str(f) for f in (exc.filename, exc.filename2) if f is not None]
    if files:
        return f"{' -> '.join(files)}: {what}"
    return what if exc.errno is None else f"{what} (errno {exc.errno}, no file named)"


def _drop_stdout() -> None:
    """Point standard output at /dev/null if what it buffers cannot be written (a full disk or
    a closed pipe), so that the interpreter's final flush adds no second message."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            pass


if __name__ == "__main__":
    main()
