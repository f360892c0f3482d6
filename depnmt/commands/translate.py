"""``depnmt translate``: raw text on stdin (or --input) to raw text on stdout."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from .options import AMOUNT, COUNT, POSITIVE

DEFAULT_MODEL_DIR = "model"


@click.command("translate", context_settings={"show_default": True})
@click.option("-m", "--model-dir", type=click.Path(path_type=Path, file_okay=False),
              default=lambda: os.environ.get("DEPNMT_MODEL", DEFAULT_MODEL_DIR),
              help="model directory written by `depnmt train` (default: $DEPNMT_MODEL or ./model)")
@click.option("-c", "--checkpoint", metavar="NAME|FILE",
              help="checkpoint: a name in MODEL_DIR/checkpoints (best, last, stepN of "
                   "train --keep-last, or the -o NAME of `depnmt average`) or a .pt file "
                   "[default: best, else last]")
@click.option("-i", "--input", "input_path", type=click.Path(path_type=Path, dir_okay=False),
              help="read this file instead of standard input")
@click.option("--input-format", type=click.Choice(["text", "conllu"]), default="text",
              help="text: raw sentences; conllu: pre-parsed sentences (their words and trees "
                   "are used as they are)")
@click.option("--beam", type=POSITIVE, default=None,
              help="beam size (1 = greedy); default: the model's")
@click.option("--alpha", type=AMOUNT, default=None, help="GNMT length penalty alpha")
@click.option("--max-len-a", type=AMOUNT, default=None, help="max output length = a·|src| + b")
@click.option("--max-len-b", type=COUNT, default=None, help="max output length = a·|src| + b")
@click.option("--at-limit", type=click.Choice(["eos", "cut"]), default=None,
              help="beam search at the length limit: eos = only EOS may follow there and it is "
                   "scored (fairseq; depnmt's default), cut = the best hypotheses end as they "
                   "are (OpenNMT-py, CTranslate2; what --ct2 always does)")
@click.option("--max-tokens", type=POSITIVE, default=4000,
              help="sentences of similar length are decoded together in batches of at most this "
                   "many source subwords × beam (padding included; a longer sentence is decoded "
                   "alone): larger batches are faster and take more memory")
@click.option("--batch-size", type=COUNT, default=0,
              help="at most this many sentences per batch (0: no limit)")
@click.option("--device", default="auto", help="auto, cpu, cuda or cuda:N")
@click.option("--precision", type=click.Choice(["auto", "fp32", "bf16", "fp16"]), default="auto",
              help="arithmetic of the decoder's matrix multiplies, as train --precision: auto = "
                   "bf16 on CPUs with native bf16 (AVX512-BF16, AMX), bf16 or fp16 on CUDA, fp32 "
                   "elsewhere (--ct2: the export's own compute type). fp32 on the CPU repeats "
                   "its output exactly on one machine with the same torch version, threads and "
                   "batching; another CPU (other vector instructions), a GPU or 16-bit "
                   "arithmetic rounds differently, which can change the choice between two "
                   "nearly equal hypotheses; on CUDA two runs can also differ (atomic additions "
                   "of relative-attention values and parse heads)")
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
                   "hypothesis, maximum spanning tree of its word-level head scores")
@click.option("--dbsa-gold-arcs", is_flag=True,
              help="DBSA(Enc) models: the parse head attends to each source token's gold head "
                   "from the input trees (needs --input-format conllu) instead of its own "
                   "prediction, to measure what a perfect parse would give")
def command(model_dir: Path, checkpoint: str | None, input_path: Path | None, input_format: str,
            beam: int | None, alpha: float | None, max_len_a: float | None,
            max_len_b: int | None, at_limit: str | None, max_tokens: int, batch_size: int,
            device: str, precision: str, ct2_dir: Path | None,
            threads: int, induced_trees: Path | None, induced_target_trees: Path | None,
            dbsa_gold_arcs: bool) -> None:
    """Translate raw text with a trained model.

    \b
      depnmt translate -m work/model < input.txt > output.txt
      depnmt translate --ct2 work/model-ct2 < input.txt > output.txt   # CTranslate2 export
    The model directory's own tokenizer, parser (for tree-based schemes) and BPE are applied.
    Exactly one output line per input line: empty lines stay empty, over-long lines are
    truncated with a warning on stderr, invalid UTF-8 bytes are replaced.
    --checkpoint avg5 translates with the average `depnmt average -o avg5` wrote.
    """
    from ..errors import DepnmtError
    from ..modeldir import named_checkpoint
    from ..textio import iter_lines, stdin_lines, write_stdout

    search = dict(beam=beam, alpha=alpha, max_len_a=max_len_a, max_len_b=max_len_b,
                  at_limit=at_limit)
    if ct2_dir is not None:
        if checkpoint or induced_trees or induced_target_trees or input_format != "text":
            raise DepnmtError("--ct2 translates raw text only (no --checkpoint, --induced-trees, "
                              "--induced-target-trees or --input-format conllu)")
        from ..ct2translate import CT2Translator
        ct2 = CT2Translator.from_dir(ct2_dir, device, threads, max_tokens=max_tokens,
                                     batch_size=batch_size, **search)
        for line in ct2.translate_lines(iter_lines(input_path) if input_path else stdin_lines()):
            write_stdout(line + "\n")
        write_stdout("", flush=True)
        return
    from ..translate import Translator

    ckpt = named_checkpoint(model_dir, checkpoint) if checkpoint else None
    translator = Translator.from_model_dir(model_dir, ckpt, device, precision,
                                           max_tokens=max_tokens, batch_size=batch_size, **search)
    if dbsa_gold_arcs:
        if input_format != "conllu":
            raise DepnmtError("--dbsa-gold-arcs takes the gold trees from the input: give "
                              "--input-format conllu")
        translator.use_gold_arcs()
    induced: list | None = [] if induced_trees is not None else None
    targets: list | None = [] if induced_target_trees is not None else None
    if input_format == "conllu":
        from ..parse.conllu import read_conllu_input
        trees = read_conllu_input(input_path)
        for line in translator.translate_words([list(t.words) for t in trees], trees,
                                               trees_out=induced, target_trees_out=targets):
            write_stdout(line + "\n")
    else:
        lines = iter_lines(input_path) if input_path else stdin_lines()
        for line in translator.translate_lines(lines, trees_out=induced,
                                               target_trees_out=targets):
            write_stdout(line + "\n", flush=sys.stdout.isatty())
    write_stdout("", flush=True)
    from ..parse import write_conllu
    for path, collected in ((induced_trees, induced), (induced_target_trees, targets)):
        if collected is not None:
            write_conllu(path, collected)
