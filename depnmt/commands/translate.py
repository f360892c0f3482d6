"""``depnmt translate``: raw text on stdin (or --input) to raw text on stdout (or --output)."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import COUNT, POSITIVE, deprecated_aliases
from depnmt.core.searchlimits import search_names, search_params

DEFAULT_MODEL_DIR = "model"


def models_option(several: str):
    """``-m/--model MODEL_DIR``, repeatable, default ``$DEPNMT_MODEL`` or ``./model``;
    ``several``: what the command does with more than one (the end of the help)."""
    return click.option(
        "-m", "--model", "model_dirs", type=click.Path(path_type=Path, file_okay=False),
        multiple=True, default=lambda: [os.environ.get("DEPNMT_MODEL", DEFAULT_MODEL_DIR)],
        show_default="$DEPNMT_MODEL or ./model",
        help=f"model directory written by `depnmt train`; {several}")
DEVICE = click.option("--device", default="auto", help="auto, cpu, cuda or cuda:N")
PRECISIONS = ["auto", "fp32", "bf16", "fp16"]


def hardware_options(items: str, precision_help: str):
    """The options ``--batch-size`` (at most this many ``items``, sentences or pairs, in a
    batch), ``--device`` and ``--precision`` (``precision_help``), in that order."""
    options = [click.option("--batch-size", type=COUNT, default=0,
                            help=f"at most this many {items} per batch (0: no limit)"),
               DEVICE,
               click.option("--precision", type=click.Choice(PRECISIONS), default="auto",
                            help=precision_help)]

    def add(command):
        for option in reversed(options):
            command = option(command)
        return command
    return add


@deprecated_aliases("translate")
@click.command("translate", context_settings={"show_default": True})
@models_option("given more than once, the models translate as an ensemble (their "
               "log-probabilities averaged at each step; they must share vocabularies, BPE and "
               "tokenizers)")
@click.option("-c", "--checkpoint", metavar="NAME|FILE",
              help="checkpoint: a name in MODEL/checkpoints (best, last, stepN of "
                   "train --keep-last, or the -o NAME of `depnmt average`) or a .pt file "
                   "[default: best, else last]")
@click.option("-i", "--input", "input_path", type=click.Path(path_type=Path, dir_okay=False),
              help="read this file instead of standard input")
@click.option("--input-format", type=click.Choice(["text", "conllu"]), default="text",
              help="text: raw sentences; conllu: pre-parsed sentences (their words and trees "
                   "are used as they are)")
@click.option("-o", "--output", "output_path", type=click.Path(path_type=Path, dir_okay=False),
              help="write the translations to this file instead of standard output, all or "
                   "nothing: they go to a temporary file next to it that replaces FILE once "
                   "every line is translated, so a failed or killed run leaves no partial FILE")
@click.option("--nbest", type=POSITIVE, default=None, metavar="N",
              help="write the N best hypotheses of each input line's beam (N at most the beam "
                   "size), best first, one per line: `SENT_ID ||| hypothesis ||| score ||| "
                   "logprob`, SENT_ID the input line's index counted from 0 (as Moses), score "
                   "the length-normalised log-probability that ranks them (log p / lp(|Y|), "
                   "lp of --length-penalty), logprob the log-probability, |Y| the target "
                   "subwords scored (EOS included). An empty line gives one empty hypothesis "
                   "scored 0; fewer than N only where the length limit leaves fewer",
              show_default="one translation per line")
@click_options(search_params("translate"))
@click.option("--max-tokens", type=POSITIVE, default=None,
              help="sentences of similar length are decoded together in batches of at most this "
                   "many source subwords × beam (padding included; a longer sentence is decoded "
                   "alone): larger batches are faster and take more memory",
              show_default="8000 on the CPU and with --ct2, 32000 on a GPU")
@hardware_options("sentences",
                  "arithmetic of the decoder's matrix multiplies, as train --precision: auto = "
                  "bf16 on CPUs with native bf16 (AVX512-BF16, AMX), bf16 or fp16 on CUDA, fp32 "
                  "elsewhere (--ct2: the export's own compute type). fp32 on the CPU repeats "
                  "its output exactly on one machine with the same torch version, threads and "
                  "batching; another CPU (other vector instructions), a GPU or 16-bit "
                  "arithmetic rounds differently, which can change the choice between two "
                  "nearly equal hypotheses; on CUDA two runs can also differ (atomic additions "
                  "of relative-attention values and parse heads)")
@click.option("--quantize", type=click.Choice(["none", "int8"]), default="none",
              help="int8: decode on the CPU with int8 weights and activations in most linear "
                   "layers (the output projection, feed-forward layers, attention outputs and "
                   "cross-attention), the rest at --precision (auto: fp32); faster, BLEU within "
                   "a few tenths. Activations share one scale per batch, so a sentence's output "
                   "can depend on the sentences decoded with it")
@click.option("--ct2", "ct2_dir", type=click.Path(path_type=Path, file_okay=False),
              help="translate with this CTranslate2 export (`depnmt export`) instead of a model "
                   "directory: the export's own tokenizer, BPE and search defaults; text input "
                   "only")
@click.option("--threads", type=click.IntRange(min=0), default=0,
              help="with --ct2: CTranslate2's intra-op threads (0: its default)")
@click.option("--induced-trees", type=click.Path(path_type=Path, dir_okay=False),
              help="also write the source trees the model's encoder parse head induces (DBSA(Enc) "
                   "models; no parser needed) to this CoNLL-U file: one tree per input line over "
                   "the words translated, maximum spanning tree of the word-level head scores")
@click.option("--induced-target-trees", type=click.Path(path_type=Path, dir_okay=False),
              help="also write the trees the decoder's parse head induces over each translation "
                   "(DBSA(Dec) models) to this CoNLL-U file: one teacher-forced pass over the "
                   "hypothesis (--nbest: the best one), maximum spanning tree of its word-level "
                   "head scores")
@click.option("--dbsa-gold-arcs", is_flag=True,
              help="DBSA(Enc) models: the parse head attends to each source token's gold head "
                   "from the input trees (needs --input-format conllu) instead of its own "
                   "prediction, to measure what a perfect parse would give")
def command(**flags: Any) -> None:
    """Translate raw text with a trained model (-m), an ensemble (-m A -m B), or a model's
    CTranslate2 export (--ct2).

    \b
    The model directory's own tokenizer, parser (for tree-based schemes) and BPE are applied.
    Exactly one output line per input line (--nbest: N): empty lines stay empty, lines longer
    than the model's source limit (train --max-len, 250 source subwords unless given) are
    truncated with a warning on stderr, invalid UTF-8 bytes are replaced.
    --checkpoint avg5 translates with the average `depnmt average -o avg5` wrote.
    """
    search = {name: flags[name] for name in search_names()}
    check_outputs(flags)
    if flags["ct2_dir"] is not None:
        if len(flags["model_dirs"]) > 1:
            from depnmt.core.errors import DepnmtError
            raise DepnmtError("--ct2 translates with one export; an ensemble (-m given more "
                              "than once) needs the model folders without --ct2")
        translate_with_ct2(flags, search)
    else:
        translate_with_model(flags, search)


def check_outputs(flags: dict[str, Any]) -> None:
    """The files translate writes must not replace what it reads: the input, a model's
    files, a checkpoint given as a file, the export (a one-line error before any work)."""
    from depnmt.core.stagedir import check_output_files
    from depnmt.storage.modeldir import model_reads
    check_output_files({"output": flags["output_path"], "--induced-trees file":
                        flags["induced_trees"], "--induced-target-trees file":
                        flags["induced_target_trees"]},
                       [("input", flags["input_path"]), ("CTranslate2 export", flags["ct2_dir"]),
                        *model_reads(flags["model_dirs"], flags["checkpoint"])])


def translate_with_ct2(flags: dict[str, Any], search: dict[str, Any]) -> None:
    """``--ct2 DIR``: raw text through the CTranslate2 export."""
    from depnmt.core.errors import DepnmtError
    from depnmt.core.heap import startup_objects
    from depnmt.core.textio import iter_lines, stdin_lines
    if flags["checkpoint"] or flags["induced_trees"] or flags["induced_target_trees"] \
            or flags["input_format"] != "text":
        raise DepnmtError("--ct2 translates raw text only (no --checkpoint, --induced-trees, "
                          "--induced-target-trees or --input-format conllu)")
    if flags["quantize"] != "none":
        raise DepnmtError("--ct2 computes in the export's own type: for int8, export with "
                          "depnmt export --quantization int8, or drop --ct2")
    with startup_objects():
        from depnmt.decoding.ct2translate import CT2Translator
        ct2 = CT2Translator.from_dir(flags["ct2_dir"], flags["device"], flags["threads"],
                                     max_tokens=flags["max_tokens"],
                                     batch_size=flags["batch_size"], **search)
    nbest = flags["nbest"]
    check_nbest_flag(nbest, ct2.search_cfg.beam, flags["beam"])
    lines = iter_lines(flags["input_path"]) if flags["input_path"] else stdin_lines()
    with output_writer(flags["output_path"]) as write, input_progress(
            "translating", lambda: input_size(flags["input_path"]),
            flags["output_path"] is None) as advance:
        write_results(write, counted(ct2.translate_lines(lines, nbest=nbest or 0), advance),
                      nbest)


def translate_with_model(flags: dict[str, Any], search: dict[str, Any]) -> None:
    """``-m MODEL_DIR``: raw text or CoNLL-U through the model, and the trees it induces."""
    from depnmt.core.errors import DepnmtError
    from depnmt.core.heap import startup_objects
    nbest, model_dirs = flags["nbest"], flags["model_dirs"]
    ckpts = model_checkpoints(model_dirs, flags["checkpoint"])
    hardware = dict(max_tokens=flags["max_tokens"], batch_size=flags["batch_size"],
                    quantize=flags["quantize"], **search)
    with startup_objects():
        from depnmt.api import load_translator
        translator = load_translator(model_dirs, ckpts, flags["device"], flags["precision"],
                                     **hardware)
    check_nbest_flag(nbest, translator.search_cfg.beam, flags["beam"])
    if flags["dbsa_gold_arcs"]:
        if flags["input_format"] != "conllu":
            raise DepnmtError("--dbsa-gold-arcs takes the gold trees from the input: give "
                              "--input-format conllu")
        translator.use_gold_arcs()
    induced: list | None = [] if flags["induced_trees"] is not None else None
    targets: list | None = [] if flags["induced_target_trees"] is not None else None
    trees = read_trees(flags)
    with output_writer(flags["output_path"]) as write, input_progress(
            "translating", lambda: input_size(flags["input_path"], trees),
            flags["output_path"] is None) as advance:
        translator.progress = advance
        write_results(write, model_results(translator, flags, trees, induced, targets), nbest)
    from depnmt.stages.parse import write_conllu
    for path, collected in ((flags["induced_trees"], induced),
                            (flags["induced_target_trees"], targets)):
        if collected is not None:
            write_conllu(path, collected)


def model_checkpoints(model_dirs: Sequence[Path], checkpoint: str | None) -> list[Path | None]:
    """Each model folder's checkpoint ``--checkpoint`` names (None: its default); an ensemble
    (several folders) takes a name each folder has, not a file (a one-line error)."""
    from depnmt.core.errors import DepnmtError
    from depnmt.storage.modeldir import named_checkpoint
    if checkpoint and len(model_dirs) > 1 and "/" in checkpoint:
        raise DepnmtError(f"--checkpoint {checkpoint}: an ensemble takes a checkpoint name "
                          f"(best, last, stepN, an average's name) that each model folder has")
    return [named_checkpoint(d, checkpoint) if checkpoint else None for d in model_dirs]


def read_trees(flags: dict[str, Any]) -> list | None:
    """The input's trees with ``--input-format conllu`` (None for raw text, read as it is
    translated)."""
    if flags["input_format"] != "conllu":
        return None
    from depnmt.core.conllu import read_conllu_input
    return read_conllu_input(flags["input_path"])


def model_results(translator: Any, flags: dict[str, Any], trees: list | None,
                  induced: list | None, targets: list | None) -> Iterator:
    """The translations of the input: ``trees`` (:func:`read_trees`) or raw lines."""
    from depnmt.core.textio import iter_lines, stdin_lines
    input_path, nbest = flags["input_path"], flags["nbest"] or 0
    if trees is not None:
        return translator.translate_words([list(t.words) for t in trees], trees,
                                          trees_out=induced, target_trees_out=targets,
                                          nbest=nbest)
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
