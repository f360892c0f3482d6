"""``depnmt bpe``: a thin click layer over :mod:`depnmt.bpe`."""

from __future__ import annotations

from pathlib import Path

import click

from ..bpe import BpeOptions, run_bpe
from ..bpefrom import run_bpe_from
from ..log import info, warn
from .options import deprecated_aliases, jobs_option

DIR = click.Path(file_okay=False, path_type=Path)
BPE_ONLY = ("merges", "vocab_threshold", "merge_min_freq")
LEARNING = ("mode", "merges", "joint", "vocab_threshold", "min_freq", "src_min_freq",
            "tgt_min_freq", "max_vocab", "merge_min_freq")


@deprecated_aliases("bpe")
@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-i", "--input", "prepare_dir", type=DIR, required=True, metavar="PREPARE_DIR",
              help="Folder written by `depnmt prepare` (tokenized {train,dev,test}.LANG).")
@click.option("-o", "--output", "out_dir", type=DIR, required=True, metavar="OUT_DIR",
              help="Folder to write subword text, vocabularies, codes and manifest.json into, "
                   "all or nothing: it appears (or replaces a previous `depnmt bpe` output) when "
                   "the run completes; one run at a time.")
@click.option("--mode", type=click.Choice(("bpe", "word")), default="bpe", show_default=True,
              help="bpe: split words into subwords with subword-nmt; word: keep whole words "
                   "(rare ones become <unk> in training, see --min-freq).")
@click.option("--merges", type=click.IntRange(min=1), default=10000, show_default=True,
              metavar="N", help="Number of BPE merge operations to learn (bpe mode).")
@click.option("--joint/--separate", default=None,
              help="Learn one set of codes and one vocabulary on both languages (lets train "
                   "share embeddings), or one per language. Default: --joint in bpe mode, "
                   "--separate in word mode.")
@click.option("--vocab-threshold", type=click.IntRange(min=0), default=0, show_default=True,
              metavar="N", help="subword-nmt's vocabulary filter (bpe mode): undo merges that "
              "produce a subword seen fewer than N times in that language's training text "
              "(0: off). subword-nmt suggests 50 for corpora of millions of sentences; on "
              "Multi30k (29k) that splits most words into single letters.")
@click.option("--min-freq", type=click.IntRange(min=1), metavar="N",
              help="Leave tokens seen fewer than N times in training out of the vocabulary "
                   "(they become <unk>). Default: 1 in bpe mode, 2 in word mode.")
@click.option("--src-min-freq", type=click.IntRange(min=1), metavar="N",
              help="--min-freq for the source language only (with --separate).")
@click.option("--tgt-min-freq", type=click.IntRange(min=1), metavar="N",
              help="--min-freq for the target language only (with --separate).")
@click.option("--max-vocab", type=click.IntRange(min=1), metavar="N",
              help="Keep at most the N most frequent tokens per vocabulary (besides specials).")
@click.option("--merge-min-freq", type=click.IntRange(min=1), default=2, show_default=True,
              metavar="N", help="Stop learning merges when no pair occurs N times (bpe mode).")
@click.option("--subwords-from", "source", type=click.Path(file_okay=False, exists=True,
                                                          path_type=Path),
              metavar="DIR", help="Learn nothing: segment with the codes, filter vocabularies "
              "and vocabularies of an earlier bpe folder or a trained model's folder, copied "
              "byte for byte (to fine-tune that model with `train --init-from` on this data). "
              "Says how many training subwords the copied vocabulary lacks (<unk>).")
@jobs_option("Count the training words, learn --separate codes (each side in a process of its "
             "own; joint codes take one process) and apply the codes")
@click.pass_context
def command(ctx: click.Context, prepare_dir: Path, out_dir: Path, mode: str, merges: int,
            joint: bool | None, vocab_threshold: int, min_freq: int | None,
            src_min_freq: int | None, tgt_min_freq: int | None, max_vocab: int | None,
            merge_min_freq: int, source: Path | None, jobs: int) -> None:
    """Learn and apply subword-nmt BPE, or build word-level vocabularies.

    \b
    Writes into OUT_DIR:
      {train,dev,test}.LANG   the tokenized text as subwords ("@@" ends non-final pieces)
      vocab.src.txt vocab.tgt.txt   vocabularies for `depnmt train`
      codes.joint | codes.src codes.tgt, bpevocab.*, bpe.json   what segments new text
      manifest.json           inputs, options, versions and line counts

    Words are recovered from subwords by the "@@" markers, so parse trees of the tokenized
    text line up with the subwords without any extra file.
    """
    given = {p.name: p for p in ctx.command.params
             if ctx.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE}
    if source is not None:
        learning = [given[name] for name in LEARNING if name in given]
        if learning:
            flag = "/".join(o for o in learning[0].opts + learning[0].secondary_opts
                            if o.startswith("--"))
            raise click.UsageError(f"{flag} does not go with --subwords-from (the subwords and "
                                   f"vocabularies are {source}'s)")
        run_bpe_from(prepare_dir, out_dir, source, jobs=jobs)
        info(f"wrote {out_dir}")
        return
    if mode == "word":
        for name in BPE_ONLY:
            if name in given:
                warn(f"--{name.replace('_', '-')} has no effect with --mode word")
    per_side = {"src": src_min_freq or min_freq, "tgt": tgt_min_freq or min_freq}
    opts = BpeOptions(mode=mode, merges=merges, joint=(mode == "bpe") if joint is None else joint,
                      vocab_threshold=vocab_threshold, min_freq=per_side, max_vocab=max_vocab,
                      merge_min_freq=merge_min_freq)
    run_bpe(prepare_dir, out_dir, opts, jobs=jobs)
    info(f"wrote {out_dir}")
