"""``depnmt contrastive``: accuracy of models on a contrastive test set."""

from __future__ import annotations

import os
from pathlib import Path

import click

from .options import POSITIVE
from .translate import DEFAULT_MODEL_DIR, hardware_options

HELP = """Contrastive evaluation: how often a model prefers a correct translation to a minimally
wrong one.

\b
Reads  SET: source, reference and contrastive variants (--format)
Prints a table of accuracy (%) with its 95 % Wilson interval, per category and for all items,
       one column per model (-m given more than once: e.g. seeds), their mean ± sd, and an
       exact McNemar test of each model's decisions against the first's

Every translation is scored by forced decoding (as `depnmt rescore`: log p(translation |
source)); an item is decided correctly when its reference scores strictly higher than every
one of its variants. Formats: tsv (`source TAB reference TAB contrastive [TAB category]`, an
item a line), lingeval97 (LingEval97's lingeval97.json: an item per error, category its
type), contrapro (ContraPro's contrapro.json with --src/--tgt, the text its
json2text_and_context.pl extracts: an item per entry, category `src pronoun:ref pronoun`).
"""


@click.command("contrastive", help=HELP,
               context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.argument("set_path", metavar="SET", type=click.Path(path_type=Path, dir_okay=False))
@click.option("-m", "--model", "model_dirs", type=click.Path(path_type=Path, file_okay=False),
              multiple=True, default=lambda: [os.environ.get("DEPNMT_MODEL", DEFAULT_MODEL_DIR)],
              show_default="$DEPNMT_MODEL or ./model",
              help="model directory written by `depnmt train`; give it more than once to "
                   "compare models (each evaluated alone)")
@click.option("-c", "--checkpoint", metavar="NAME",
              help="checkpoint name in each MODEL/checkpoints  [default: best, else last]")
@click.option("--format", "fmt", type=click.Choice(["auto", "tsv", "lingeval97", "contrapro"]),
              default="auto", help="auto: contrapro for a .json SET with --src/--tgt, "
                                   "lingeval97 for another .json SET, else tsv")
@click.option("--src", "src_path", type=click.Path(path_type=Path, dir_okay=False),
              help="contrapro: the source text (contrapro.text.en)")
@click.option("--tgt", "tgt_path", type=click.Path(path_type=Path, dir_okay=False),
              help="contrapro: the target text (contrapro.text.de)")
@click.option("--normalized", is_flag=True,
              help="compare length-normalised scores (logprob / lp(tokens), the model's length "
                   "penalty) instead of log-probabilities")
@click.option("-o", "--output", "output_path", type=click.Path(path_type=Path, dir_okay=False),
              help="also write the accuracies, intervals, p-values and every decision as JSON "
                   "(all or nothing)")
@click.option("--max-tokens", type=POSITIVE, default=None,
              help="pairs of similar length are scored together in batches of at most this "
                   "many source and target subwords (padding included)",
              show_default="8000 on the CPU, 32000 on a GPU")
@hardware_options("pairs", "arithmetic of the matrix multiplies, as translate --precision")
def command(set_path: Path, model_dirs: tuple[Path, ...], checkpoint: str | None, fmt: str,
            src_path: Path | None, tgt_path: Path | None, normalized: bool,
            output_path: Path | None, max_tokens: int | None, batch_size: int, device: str,
            precision: str) -> None:
    import json

    from ..contrastive import evaluate, read_set
    from ..errors import DepnmtError
    from ..forced import ForcedScorer
    from ..modeldir import model_reads, named_checkpoint
    from ..stagedir import check_output_files
    from ..textio import atomic_open, write_stdout
    check_output_files({"output": output_path}, [("set", set_path), ("--src file", src_path),
                                                 ("--tgt file", tgt_path),
                                                 *model_reads(model_dirs)])
    if fmt == "auto":
        fmt = "tsv" if set_path.suffix != ".json" else (
            "contrapro" if src_path or tgt_path else "lingeval97")
    if (src_path or tgt_path) and fmt != "contrapro":
        raise DepnmtError("--src and --tgt are for --format contrapro")
    items = read_set(set_path, fmt, src_path, tgt_path)
    if checkpoint and "/" in checkpoint:
        raise DepnmtError(f"--checkpoint {checkpoint}: give a checkpoint name that each model "
                          f"folder has (best, last, stepN, an average's name)")
    names = [str(d) for d in model_dirs]
    if len(set(names)) < len(names):
        raise DepnmtError("a model is given twice (-m)")

    def scorers():
        for model_dir in model_dirs:
            ckpt = named_checkpoint(model_dir, checkpoint) if checkpoint else None
            yield str(model_dir), ForcedScorer.from_model_dir(
                model_dir, checkpoint=ckpt, device=device, precision=precision,
                max_tokens=max_tokens, batch_size=batch_size)
    result = evaluate(items, scorers(), normalized)
    if output_path is not None:
        with atomic_open(output_path) as fh:
            fh.write(json.dumps({"set": str(set_path), "format": fmt, "normalized": normalized,
                                 **result.to_dict()}, indent=1) + "\n")
    write_stdout(result.markdown(), flush=True)
