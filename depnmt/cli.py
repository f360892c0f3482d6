"""The ``depnmt`` command: a click group whose subcommands live in ``depnmt/commands/``.

Subcommands are imported lazily, so ``depnmt score --help`` does not import torch or a parser.
Every :class:`~depnmt.errors.DepnmtError` becomes one ``error: ...`` line on stderr and exit
status 2 — never a traceback.
"""

from __future__ import annotations

import importlib
import sys

import click

from . import __version__
from .errors import DepnmtError

# command name -> (module under depnmt.commands, one-line help shown by `depnmt --help`)
COMMANDS = {
    "prepare": ("prepare", "Read, normalise, tokenize and filter a parallel corpus into train/dev/test."),
    "parse": ("parse", "Dependency-parse tokenized text into CoNLL-U (stanza, spaCy/GiNZA or given trees)."),
    "bpe": ("bpe", "Learn and apply subword-nmt BPE (or word-level vocabularies)."),
    "train": ("train", "Train a Transformer with a chosen positional scheme."),
    "translate": ("translate", "Translate raw text (stdin -> stdout) with a trained model directory."),
    "export": ("export", "Export a trained model to CTranslate2 (abs, rel, none schemes) for serving."),
    "score": ("score", "BLEU/chrF/TER with sacrebleu, paired bootstrap and length buckets."),
    "report": ("report", "Results table of trained systems: BLEU, chrF, p-values, speed, size."),
    "inspect": ("inspect", "Print the per-pair tree matrices a scheme sees."),
    "analyze": ("analyze", "Analyse models and trees: AWSL of GPS models, UAS against gold trees."),
}


class LazyGroup(click.Group):
    """A click group that imports a subcommand's module only when that subcommand is used."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(f"depnmt.commands.{COMMANDS[name][0]}")
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, help_) in COMMANDS.items()]
        with formatter.section("Commands (each stage writes files the next one reads)"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="depnmt")
def cli() -> None:
    """Syntax-aware neural machine translation.

    \b
    A typical run, each stage reading the previous stage's folder:
      depnmt prepare --corpus multi30k -o work/prepare
      depnmt parse   -i work/prepare -o work/parse --side src --backend spacy --model en_core_web_sm
      depnmt bpe     -i work/prepare -o work/bpe --merges 10000
      depnmt train   --data work/bpe -o work/model --scheme abs
      depnmt translate -m work/model < input.txt > output.txt
      depnmt score   --ref work/prepare/test.raw.de output.txt
    """


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the CLI, turning user errors into one-line messages."""
    try:
        cli.main(args=argv, prog_name="depnmt", standalone_mode=False)
    except DepnmtError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except click.exceptions.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    except BrokenPipeError:
        sys.exit(141)
    except SystemExit:
        raise
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)


if __name__ == "__main__":
    main()
