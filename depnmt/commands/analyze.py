"""``depnmt analyze``: analyses of trained models (see ``depnmt/evaluation/analyze.py``); the flags
of
``awsl`` are the fields of :class:`depnmt.evaluation.analyze.AwslSettings`, those of ``uas`` the
fields of
:class:`depnmt.evaluation.attachment.UasSettings`."""

from __future__ import annotations

from pathlib import Path

import click

from depnmt.commands.fields import GivenPath, click_options
from depnmt.commands.options import deprecated_aliases
from depnmt.core.optionspec import field_params, from_options
from depnmt.evaluation.analyze import AwslSettings
from depnmt.evaluation.attachment import UasSettings


@click.group("analyze")
def command() -> None:
    """Analyses of trained models and of trees: how much a GPS model uses its syntax term
    (awsl), how good predicted or induced trees are against gold ones (uas)."""


@deprecated_aliases("analyze awsl")
@command.command("awsl", context_settings={"show_default": True})
@click_options(field_params(AwslSettings))
def awsl_command(**values) -> None:
    """Average Weight of Syntax Logits per encoder layer (GPS paper, Eq. 7, Fig. 3).

    \b
    For every layer with the GPS syntax term: the mean over sentences and heads of
      w = 1/N² Σ_ij |e^s_ij| / (|e_ij| + |e^s_ij|)   (syntax; Fig. 3's red line)
    and of the ordinary term's share |e_ij| / (...) (Eq. 7 as printed; the blue line).
    Prints the table, writes OUT.tsv and OUT.png.
    """
    from depnmt.core.errors import DepnmtError
    from depnmt.core.log import info
    from depnmt.core.stagedir import check_output_files
    from depnmt.core.textio import atomic_open, write_stdout
    from depnmt.decoding.translate import Translator
    from depnmt.evaluation.analyze import awsl, format_table, plot
    from depnmt.storage.modeldir import model_reads

    settings = from_options(AwslSettings, values)
    model_dirs, src_path, prefix = settings.model_dirs, settings.src_path, settings.prefix
    checkpoint, input_format = settings.checkpoint, settings.input_format
    check_output_files({f"output {prefix.name}{ext}": prefix.with_name(prefix.name + ext)
                        for ext in (".tsv", ".png")},
                       [("input", src_path), ("checkpoint", checkpoint),
                        *model_reads(model_dirs)])
    results = []
    for model_dir in model_dirs:
        translator = Translator.from_model_dir(model_dir, checkpoint, settings.device)
        examples = _examples(translator, src_path, input_format, settings.max_sentences)
        if not examples:
            raise DepnmtError(f"{src_path}: no non-empty sentence to analyse")
        results.append((model_dir.name, awsl(translator.model, examples)))
        info(f"{model_dir}: {len(examples)} sentences")
    table = format_table(results)
    write_stdout(table)
    with atomic_open(prefix.with_name(prefix.name + ".tsv")) as fh:
        fh.write(table)
    plot(results, prefix.with_name(prefix.name + ".png"))
    info(f"wrote {prefix}.tsv and {prefix}.png")


def _examples(translator, src_path: Path, input_format: str, max_sentences: int) -> list:
    """The model's examples (tokenized, parsed, segmented, features added) of the input."""
    from depnmt.core.textio import iter_lines
    if input_format == "conllu":
        from depnmt.stages.parse import read_conllu
        trees = [t for t in read_conllu(src_path) if len(t)]
        trees = trees[:max_sentences] if max_sentences else trees
        return translator.examples([list(t.words) for t in trees], trees)
    words = []
    for line in iter_lines(src_path):
        tokens = translator.src_tokenizer.tokenize(line)
        if tokens:
            words.append(tokens)
        if max_sentences and len(words) >= max_sentences:
            break
    return translator.examples(words)


@command.command("uas", context_settings={"show_default": True})
@click.argument("predicted", nargs=-1, type=GivenPath(exists=True, dir_okay=False, path_type=Path))
@click_options(field_params(UasSettings))
def uas_command(predicted: tuple[Path, ...], **values) -> None:
    """UAS and LAS of PREDICTED trees (CoNLL-U, same words as --gold) against --gold.

    PREDICTED may be the source trees a DBSA model induces for a treebank's own words
    (`depnmt translate --input-format conllu --induced-trees FILE` with the treebank as input).
    --backend also parses the gold words with a parser (--model, e.g. ja_ginza), to score it
    (its ceiling as a teacher).
    Labels are compared without UD subtypes (obl:tmod = obl); unlabelled trees (only
    'dep' and 'root' labels, as DBSA induces) get LAS '-'.
    """
    from depnmt.core.textio import write_stdout
    from depnmt.evaluation.attachment import attachment_score
    from depnmt.stages.parse import make_parser, read_conllu

    settings = from_options(UasSettings, values)
    settings.check_request(predicted)
    gold_path, punct = settings.gold_path, settings.punct
    gold = list(read_conllu(gold_path))
    rows = [(str(path), attachment_score(read_conllu(path), gold, str(path), str(gold_path),
                                         punct)) for path in predicted]
    if settings.backend is not None:
        parser = make_parser(settings.parser_settings())
        parsed = [t for i in range(0, len(gold), 256)
                  for t in parser.parse([list(s.words) for s in gold[i:i + 256]])]
        rows.append((parser.describe(), attachment_score(parsed, gold, parser.describe(),
                                                         str(gold_path), punct)))
    out = ["trees\tsentences\twords\tUAS\tLAS"]
    out += [f"{name}\t{s.sentences}\t{s.words}\t{s.uas:.2f}\t"
            f"{'-' if s.las is None else f'{s.las:.2f}'}" for name, s in rows]
    write_stdout("\n".join(out) + "\n")
