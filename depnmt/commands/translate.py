"""``depnmt translate``: raw text on stdin (or --input) to raw text on stdout (or --output)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import deprecated_aliases
from depnmt.core.optionspec import field_params, from_options
from depnmt.core.searchlimits import search_names, search_params
from depnmt.decoding.settings import (DecodingSettings, TranslateSettings, decoding_params,
                                     warn_unused_by_greedy)


class Request(NamedTuple):
    """What translate is asked to do: the models and hardware (shared with rescore and
    contrastive) and its own options."""

    decoding: DecodingSettings
    own: TranslateSettings


@deprecated_aliases("translate")
@click.command("translate", context_settings={"show_default": True})
@click_options(decoding_params(
    several="given more than once, the models translate as an ensemble (their log-probabilities "
            "averaged at each step; they must share vocabularies, BPE and tokenizers)",
    items="sentences",
    precision="decoder's matrix multiplies, as train --precision: auto = bf16 on CPUs with "
              "native bf16 (AVX512-BF16, AMX), bf16 or fp16 on CUDA, fp32 elsewhere (not with "
              "--ct2, which computes in the export's own type). fp32 on the CPU repeats its "
              "output exactly on "
              "one machine with the same torch version, threads and batching; another CPU "
              "(other vector instructions), a GPU or 16-bit arithmetic rounds differently, "
              "which can change the choice between two nearly equal hypotheses; on CUDA two "
              "runs can also differ (atomic additions of relative-attention values and parse "
              "heads)"))
@click_options(field_params(TranslateSettings))
@click_options(search_params("translate"))
def command(**values: Any) -> None:
    """Translate raw text with a trained model (-m), an ensemble (-m A -m B), or a model's
    CTranslate2 export (--ct2).

    \b
    The model directory's own tokenizer, parser (for tree-based schemes) and BPE are applied.
    Exactly one output line per input line (--nbest: N): empty lines stay empty, lines longer
    than the model's source limit (train --max-len, 250 source subwords unless given) are
    truncated with a warning on stderr, invalid UTF-8 bytes are replaced.
    --checkpoint avg5 translates with the average `depnmt average -o avg5` wrote.
    """
    request = Request(from_options(DecodingSettings, values),
                      from_options(TranslateSettings, values))
    search = {name: values[name] for name in search_names()}
    check_outputs(request)
    request.own.check_ct2(len(request.decoding.model_dirs), request.decoding.precision)
    if request.own.ct2_dir is not None:
        translate_with_ct2(request, search)
    else:
        translate_with_model(request, search)


def check_outputs(request: Request) -> None:
    """The files translate writes must not replace what it reads: the input, a model's
    files, a checkpoint given as a file, the export (a one-line error before any work)."""
    from depnmt.core.stagedir import check_output_files
    from depnmt.storage.modeldir import model_reads
    decoding, settings = request
    check_output_files({"output": settings.output_path, "--induced-trees file":
                        settings.induced_trees, "--induced-target-trees file":
                        settings.induced_target_trees},
                       [("input", settings.input_path), ("CTranslate2 export", settings.ct2_dir),
                        *model_reads(decoding.model_dirs, settings.checkpoint)])


def translate_with_ct2(request: Request, search: dict[str, Any]) -> None:
    """``--ct2 DIR``: raw text through the CTranslate2 export."""
    decoding, settings = request
    from depnmt.core.heap import startup_objects
    from depnmt.core.textio import iter_lines, stdin_lines
    with startup_objects():
        from depnmt.decoding.ct2translate import CT2Translator
        ct2 = CT2Translator.from_dir(settings.ct2_dir, decoding.device, settings.threads,
                                     max_tokens=settings.max_tokens,
                                     batch_size=decoding.batch_size, **search)
    nbest, input_path, output_path = settings.nbest, settings.input_path, settings.output_path
    check_nbest_flag(nbest, ct2.search_cfg.beam, search["beam"])
    warn_unused_by_greedy(search, ct2.search_cfg.beam, nbest)
    ct2.source_name = str(input_path or "<stdin>")
    lines = iter_lines(input_path) if input_path else stdin_lines()
    with output_writer(output_path) as write, input_progress(
            "translating", lambda: input_size(input_path), output_path is None) as advance:
        write_results(write, counted(ct2.translate_lines(lines, nbest=nbest or 0), advance),
                      nbest)


def translate_with_model(request: Request, search: dict[str, Any]) -> None:
    """``-m MODEL_DIR``: raw text or CoNLL-U through the model, and the trees it induces."""
    decoding, settings = request
    from depnmt.core.heap import startup_objects
    nbest, model_dirs = settings.nbest, decoding.model_dirs
    ckpts = model_checkpoints(model_dirs, settings.checkpoint)
    with startup_objects():
        from depnmt.api import load_translator
        translator = load_translator(model_dirs, ckpts, **decoding.keywords(),
                                     **settings.loading(), **search)
    check_nbest_flag(nbest, translator.search_cfg.beam, search["beam"])
    warn_unused_by_greedy(search, translator.search_cfg.beam, nbest)
    settings.check_gold_arcs()
    if settings.dbsa_gold_arcs:
        translator.use_gold_arcs()
    induced: list | None = [] if settings.induced_trees is not None else None
    targets: list | None = [] if settings.induced_target_trees is not None else None
    trees = read_trees(settings, model_control(translator))
    with output_writer(settings.output_path) as write, input_progress(
            "translating", lambda: input_size(settings.input_path, trees),
            settings.output_path is None) as advance:
        translator.progress = advance
        translator.source_name = str(settings.input_path or "<stdin>")
        write_results(write, model_results(translator, settings, trees, induced, targets),
                      nbest)
    from depnmt.stages.parse import write_conllu
    for path, collected in ((settings.induced_trees, induced),
                            (settings.induced_target_trees, targets)):
        if collected is not None:
            write_conllu(path, collected)


def model_checkpoints(model_dirs: Sequence[Path], checkpoint: str | None) -> list[Path | None]:
    """Each model folder's checkpoint ``--checkpoint`` names (None: its default); an ensemble
    (several folders) takes a name each folder has, not a file (a one-line error):
    :func:`depnmt.api.model_checkpoints`."""
    from depnmt.api import model_checkpoints as checkpoints_of
    return checkpoints_of(model_dirs, checkpoint)


def model_control(translator: Any) -> Any:
    """The control (:class:`~depnmt.stages.parse.controls.Control`) that a model, or a member
    of an ensemble, applies to the trees it is given; None when none does."""
    members = getattr(translator, "members", None) or [translator]
    return next((m.control for m in members if getattr(m, "control", None) is not None), None)


def read_trees(settings: TranslateSettings, control: Any = None) -> list | None:
    """The input's trees with ``--input-format conllu`` (None for raw text, read as it is
    translated); a model's ``control`` refuses a control folder's trees
    (:func:`~depnmt.stages.parse.controlstage.check_parser_trees`)."""
    if settings.input_format != "conllu":
        return None
    from depnmt.core.conllu import read_conllu_input
    from depnmt.stages.parse.controlstage import check_parser_trees
    check_parser_trees(settings.input_path, control)
    return read_conllu_input(settings.input_path)


def model_results(translator: Any, settings: TranslateSettings, trees: list | None,
                  induced: list | None, targets: list | None) -> Iterator:
    """The translations of the input: ``trees`` (:func:`read_trees`) or raw lines."""
    from depnmt.core.textio import iter_lines, stdin_lines
    input_path, nbest = settings.input_path, settings.nbest or 0
    if trees is not None:      # words as prepare made the model's (normalised, lowercased)
        words = [translator.src_tokenizer.prepare_words(t.words) for t in trees]
        return translator.translate_words(words, trees, trees_out=induced,
                                          target_trees_out=targets, nbest=nbest,
                                          line_numbers=[t.origin[1] for t in trees])
    lines = iter_lines(input_path) if input_path else stdin_lines()
    return translator.translate_lines(lines, trees_out=induced, target_trees_out=targets,
                                      nbest=nbest)


@contextmanager
def input_progress(description: str, size: Callable[[], int | None], streams_stdout: bool
                   ) -> Iterator[Callable[[int], None]]:
    """``advance(n)`` of a progress bar of the input lines done, drawn only on a terminal
    (:func:`~depnmt.core.log.terminal_progress`), whose total ``size()`` gives (called only there);
    elsewhere ``advance`` does nothing and stderr is what it is without it. No bar either when
    the command writes its output to standard output as it goes (``streams_stdout``) and that
    is a terminal: the lines appearing there are the progress, and a bar would cut through
    them."""
    from depnmt.core.log import on_terminal, terminal_progress
    if not on_terminal() or (streams_stdout and sys.stdout.isatty()):
        yield lambda n: None
        return
    with terminal_progress(description, size()) as advance:
        yield advance


def input_size(path: Path | None, items: list | None = None) -> int | None:
    """How many input lines a command reads, for its progress bar: ``items`` (read already),
    else the lines of ``path`` when it is a regular file (one quick pass); None (unknown) for
    standard input, a pipe or a device."""
    from depnmt.core.textio import count_lines
    if items is not None:
        return len(items)
    return count_lines(path) if path is not None and path.is_file() else None


def counted(results: Iterable, advance: Callable[[int], None]) -> Iterator:
    """``results``, calling ``advance(1)`` after each."""
    for result in results:
        yield result
        advance(1)


def check_nbest_flag(nbest: int | None, beam: int, beam_flag: int | None) -> None:
    """``--nbest N`` needs a beam of at least N (``beam``: the search's, ``beam_flag``: the
    ``--beam`` given, if any); else a one-line error naming the flags."""
    from depnmt.core.errors import DepnmtError
    if nbest is not None and nbest > beam:
        whose = "--beam" if beam_flag is not None else "the model's default beam"
        raise DepnmtError(f"--nbest {nbest} is more than the beam size ({whose}: {beam}); "
                          f"the n-best list comes from the beam: give --beam {nbest} or more")


@contextmanager
def output_writer(path: Path | None) -> Iterator[Callable[[str], None]]:
    """A function that writes text to ``path``, all or nothing (:func:`~depnmt.core.textio.
    atomic_open`: the file appears when the block ends without an error), or without a path
    to standard output (flushed at each line when it is a terminal)."""
    from depnmt.core.textio import atomic_open, write_stdout
    if path is None:
        tty = sys.stdout.isatty()
        yield lambda text: write_stdout(text, flush=tty)
        write_stdout("", flush=True)
        return
    with atomic_open(path) as fh:
        yield fh.write


def write_results(write: Callable[[str], None], results: Iterable, nbest: int | None) -> None:
    """Write one line per result (a text), or with ``nbest`` the lines of each n-best list
    (:func:`nbest_lines`)."""
    for index, result in enumerate(results):
        write(nbest_lines(index, result) if nbest else result + "\n")


def nbest_lines(index: int, translations: list) -> str:
    """The n-best list (:class:`~depnmt.decoding.translate.Translation`, best first) of input line
    ``index`` (from 0), one ``SENT_ID ||| hypothesis ||| score ||| logprob`` line each."""
    return "".join(f"{index} ||| {t.text} ||| {t.score:.4f} ||| {t.logprob:.4f}\n"
                   for t in translations)
