"""``depnmt rescore``: the model's log-probability of given translations."""

from __future__ import annotations

from itertools import islice, zip_longest
from pathlib import Path
from typing import Iterator

import click

from depnmt.commands.fields import click_options
from depnmt.core.optionspec import field_params, from_options
from depnmt.core.searchlimits import search_params
from depnmt.decoding.settings import DecodingSettings, RescoreSettings, decoding_params

CHUNK_PAIRS = 2000          # pairs read, scored and written at a time

HELP = """Score given translations with a trained model (forced decoding).

\b
Reads  --src FILE (raw sentences; --src-format conllu: parsed sentences)
       --tgt FILE (raw translations, one per source line)
Writes one line per pair: score TAB logprob TAB tokens [TAB per-subword log-probs]

Each translation is tokenized and split into subwords as the model's targets were in training,
and scored in one teacher-forced pass: logprob = log p(translation | source), summed over its
subwords and the end-of-sentence token (tokens = how many), score = logprob / lp(tokens), the
length penalty of --alpha and --length-penalty (the model's unless given), as beam search
ranks its hypotheses. The score of a translation the model's own beam found is the score its
search gave it. -m given more than once scores with the models' ensemble, as
`depnmt translate -m A -m B` decodes with it (at each subword, the log-softmax of the mean of
the models' log-probabilities): the score of the ensemble's own translation is the score its
search gave it. Sources are prepared as `depnmt translate` prepares them (the model's parser
and tree control for tree schemes). Use it to rank translations, or to test whether a model
prefers a correct translation to a minimally wrong one.
"""


@click.command("rescore", help=HELP,
               context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click_options(decoding_params(
    several="given more than once, the models score as an ensemble (as translate's: they must "
            "share vocabularies, BPE and tokenizers)",
    items="pairs",
    precision="matrix multiplies, as translate --precision (fp32 gives the scores of an fp32 "
              "search)"))
@click_options(field_params(RescoreSettings))
@click_options(search_params("rescore"))
def command(**values) -> None:
    from depnmt.core.stagedir import check_output_files
    from depnmt.decoding.forced import ForcedScorer, format_score
    from depnmt.storage.modeldir import model_reads
    decoding = from_options(DecodingSettings, values)
    settings = from_options(RescoreSettings, values)
    search = {param.name: values[param.name] for param in search_params("rescore")}
    model_dirs, output_path = decoding.model_dirs, settings.output_path
    src_path, tgt_path = settings.src_path, settings.tgt_path
    check_output_files({"output": output_path}, [("--src file", src_path),
                                                 ("--tgt file", tgt_path),
                                                 *model_reads(model_dirs, settings.checkpoint)])
    from depnmt.commands.translate import (input_progress, input_size, model_checkpoints,
                                           output_writer)
    scorer = ForcedScorer.from_model_dirs(model_dirs,
                                          model_checkpoints(model_dirs, settings.checkpoint),
                                          **decoding.keywords(), max_tokens=settings.max_tokens,
                                          **search)
    with output_writer(output_path) as write, \
            input_progress("scoring", lambda: input_size(tgt_path),
                           output_path is None) as advance:
        scorer.progress = advance
        scorer.translator.source_name = str(src_path)
        for lines, words, trees, translations in chunks(scorer, src_path, settings.src_format,
                                                        tgt_path):
            ids = [scorer.target_ids(line) for line in translations]
            for result in scorer.score_words(words, ids, trees, per_token=settings.per_token,
                                             line_numbers=lines):
                write(format_score(result) + "\n")


def chunks(scorer, src_path: Path, src_format: str, tgt_path: Path) -> Iterator[tuple]:
    """The pairs in chunks of :data:`CHUNK_PAIRS`: (the sources' line numbers, source words,
    source trees or None, translations); an error naming the file and line for an empty source
    or a missing line."""
    from depnmt.core.errors import InputError
    from depnmt.core.textio import iter_lines
    if src_format == "conllu":
        from depnmt.core.conllu import read_conllu_numbered
        from depnmt.commands.translate import model_control
        from depnmt.stages.parse.controlstage import check_parser_trees
        check_parser_trees(src_path, model_control(scorer.translator))
        prepare = scorer.translator.src_tokenizer.prepare_words   # as prepare made tokens
        sources: Iterator = ((line, prepare(tree.words), tree)
                             for line, tree in read_conllu_numbered(src_path))
    else:
        sources = ((n, scorer.translator.src_tokenizer.tokenize(text), None)
                   for n, text in enumerate(iter_lines(src_path), start=1))
    pairs = zip_longest(sources, enumerate(iter_lines(tgt_path), start=1))
    count = 0
    while chunk := list(islice(pairs, CHUNK_PAIRS)):
        for source, target in chunk:
            count += 1
            if source is None:
                raise InputError(tgt_path, target[0], f"translation {count} has no source: "
                                                      f"{src_path} has only {count - 1}")
            if target is None:
                raise InputError(src_path, source[0], f"source {count} has no translation: "
                                                      f"{tgt_path} has only {count - 1} lines")
            if not source[1]:
                raise InputError(src_path, source[0], "empty source: there is nothing to score "
                                                      "a translation against")
        trees = [s[2] for s, _ in chunk] if src_format == "conllu" else None
        yield ([s[0] for s, _ in chunk], [list(s[1]) for s, _ in chunk], trees,
               [t[1] for _, t in chunk])
