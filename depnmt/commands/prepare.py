"""``depnmt prepare``: a thin click layer over :mod:`depnmt.prepare`."""

from __future__ import annotations

from pathlib import Path

import click

from ..corpora import CORPORA, corpus_files, get_corpus
from ..prepare import LANGID_SIDES, Settings, make_side_tokenizer, prepare
from ..tokenize import KINDS
from .options import deprecated_aliases, jobs_option

FILE = click.Path(exists=True, dir_okay=False, path_type=Path)
SIDES = ("src", "tgt")


def collect_files(train: tuple, dev: tuple, test: tuple) -> dict[str, tuple[Path, Path]]:
    """``{split: (src, tgt)}`` for the splits given on the command line; both sides or neither."""
    files = {}
    for split, pair in (("train", train), ("dev", dev), ("test", test)):
        given = [f"--{split}-{side}" for side, path in zip(SIDES, pair) if path]
        if len(given) == 1:
            missing = f"--{split}-{'tgt' if given[0].endswith('src') else 'src'}"
            raise click.UsageError(f"{given[0]} needs {missing} too (a split has two sides)")
        if given:
            files[split] = pair
    if files and "train" not in files:
        raise click.UsageError("--dev-*/--test-* files need --train-src and --train-tgt too")
    return files


def resolve_langs(corpus_langs: tuple[str, str], src: str | None,
                  tgt: str | None) -> tuple[str, str]:
    """Fill in missing languages of a named corpus: its default direction, or the other side."""
    if not src and not tgt:
        return corpus_langs
    other = {corpus_langs[0]: corpus_langs[1], corpus_langs[1]: corpus_langs[0]}
    return src or other.get(tgt, tgt), tgt or other.get(src, src)


@deprecated_aliases("prepare")
@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--corpus", type=click.Choice(sorted(CORPORA)),
              help="A named corpus, found in $DEPNMT_DATA_DIR, a shared/data folder nearby or "
                   "downloaded: "
                   + "; ".join(f"{c.name}: {c.description}" for c in CORPORA.values()) + ".")
@click.option("--train-src", type=FILE, help="Training source file (plain text or .gz, one "
              "sentence per line).")
@click.option("--train-tgt", type=FILE, help="Training target file, line-aligned with --train-src.")
@click.option("--dev-src", type=FILE, help="Development source file (default: held out from the "
              "end of the training files, see --dev-size).")
@click.option("--dev-tgt", type=FILE, help="Development target file.")
@click.option("--test-src", type=FILE, help="Test source file (default: held out from the end of "
              "the training files, see --test-size).")
@click.option("--test-tgt", type=FILE, help="Test target file.")
@click.option("--src-lang", metavar="LANG", help="Source language code, e.g. en, de, ja (with "
              "--corpus: chooses the direction; default: the corpus's usual direction).")
@click.option("--tgt-lang", metavar="LANG", help="Target language code.")
@click.option("--tokenizer-src", type=click.Choice(("auto",) + KINDS), default="auto",
              show_default=True, help="moses: sacremoses (English, German, ...); sudachi: "
              "Japanese segmentation as used by the GiNZA parser; keep: input is already "
              "tokenized, split on spaces; auto: the corpus's choice, else sudachi for ja and "
              "moses otherwise.")
@click.option("--tokenizer-tgt", type=click.Choice(("auto",) + KINDS), default="auto",
              show_default=True, help="Same for the target side.")
@click.option("--lowercase", is_flag=True, help="Lowercase both sides (tokens and references).")
@click.option("--first", type=click.IntRange(min=1), metavar="N",
              help="Use only the first N training pairs (e.g. ASPEC's first 1,500,000), before "
                   "filtering and before holding out dev/test.")
@click.option("--max-len", type=click.IntRange(min=0), default=0, show_default=True, metavar="N",
              help="Drop training pairs where either side has more than N tokens (0: no limit).")
@click.option("--min-len", type=click.IntRange(min=0), default=1, show_default=True, metavar="N",
              help="Drop training pairs where either side has fewer than N tokens (1: drop pairs "
                   "with an empty side; 0: keep them).")
@click.option("--filter-eval/--no-filter-eval", default=False, show_default=True,
              help="Also apply --min-len/--max-len to dev and test. By default they keep every "
                   "line, so scores stay comparable with other work.")
@click.option("--langid-filter", type=click.Choice(LANGID_SIDES), default="none",
              show_default=True, help="Drop training pairs whose source (src) or either side "
              "(both) an offline language identifier (py3langid; pip install 'depnmt[langid]') "
              "does not place in --src-lang/--tgt-lang: the GPS paper's WMT16 filter. Counted "
              "as wrong_language in the manifest; dev/test only with --filter-eval.")
@click.option("--max-pairs", type=click.IntRange(min=1), metavar="N",
              help="Keep only the first N training pairs that pass the filters (Omote et al.'s "
                   "ablation: the first 100,000 pairs of ≤ 50 words); --first limits the pairs "
                   "read, before filtering.")
@click.option("--dev-size", type=click.IntRange(min=0), default=1000, show_default=True,
              metavar="N", help="Without dev files: hold out N pairs for dev.")
@click.option("--test-size", type=click.IntRange(min=0), default=1000, show_default=True,
              metavar="N", help="Without test files: hold out the last N pairs for test.")
@jobs_option("Tokenize and filter")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, metavar="OUT_DIR",
              help="Output folder, written all or nothing: it appears (or replaces a previous "
                   "`depnmt prepare` output) when the run completes; one run at a time.")
def command(corpus, train_src, train_tgt, dev_src, dev_tgt, test_src, test_tgt, src_lang,
            tgt_lang, tokenizer_src, tokenizer_tgt, lowercase, first, max_len, min_len,
            filter_eval, langid_filter, max_pairs, dev_size, test_size, jobs, out_dir):
    """Read, normalise, tokenize and filter a parallel corpus into train/dev/test.

    Give either a named corpus (--corpus) or your own files: --train-src and --train-tgt,
    optionally --dev-* and --test-* files, and --src-lang and --tgt-lang. Both files of a split
    must have the same number of lines; a pair dropped by a filter is dropped from both sides,
    and counted in the manifest.

    \b
    Writes into OUT_DIR, for split in train, dev, test:
      {split}.{lang}       tokenized text, tokens separated by single spaces
      {split}.raw.{lang}   the same sentences normalised but untokenized (BLEU references)
      manifest.json        inputs, options, tokenizers, library versions, line counts
    """
    if max_len and min_len > max_len:
        raise click.UsageError(f"--min-len {min_len} is above --max-len {max_len}: every pair "
                               f"would be dropped")
    files = collect_files((train_src, train_tgt), (dev_src, dev_tgt), (test_src, test_tgt))
    inputs_extra, corpus_tokenizer = {}, None
    if corpus:
        if files:
            raise click.UsageError("give either --corpus or --train-src/--train-tgt, not both")
        spec = get_corpus(corpus)
        src_lang, tgt_lang = resolve_langs(spec.langs, src_lang, tgt_lang)
        files = corpus_files(spec, src_lang, tgt_lang)
        inputs_extra, corpus_tokenizer = {"corpus": corpus}, spec.tokenizer
    elif not files:
        raise click.UsageError("give a corpus: --corpus NAME, or --train-src F --train-tgt F")
    elif not (src_lang and tgt_lang):
        raise click.UsageError("--src-lang and --tgt-lang are required with your own files")
    settings = Settings(src_lang=src_lang, tgt_lang=tgt_lang, lowercase=lowercase, first=first,
                        min_len=min_len, max_len=max_len, filter_eval=filter_eval,
                        dev_size=dev_size, test_size=test_size, corpus=corpus,
                        langid_filter=langid_filter, max_pairs=max_pairs)
    tokenizers = (make_side_tokenizer(tokenizer_src, src_lang, lowercase, corpus_tokenizer),
                  make_side_tokenizer(tokenizer_tgt, tgt_lang, lowercase, corpus_tokenizer))
    prepare(out_dir, files, settings, tokenizers, inputs_extra=inputs_extra, jobs=jobs)
