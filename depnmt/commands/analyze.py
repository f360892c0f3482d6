"""``depnmt analyze``: analyses of trained models (see ``depnmt/analyze.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click


@click.group("analyze")
def command() -> None:
    """Analyses of trained models.

    \b
      depnmt analyze awsl -m work/model-gps --src work/prepare/test.raw.en -o awsl
    """


@command.command("awsl", context_settings={"show_default": True})
@click.option("-m", "--model-dir", "model_dirs", multiple=True, required=True,
              type=click.Path(path_type=Path, file_okay=False),
              help="a GPS model directory (repeat to compare models, e.g. GPS at layer 0, 1, … "
                   "as in the paper's Fig. 3)")
@click.option("--src", "src_path", required=True, type=click.Path(exists=True, dir_okay=False,
              path_type=Path), help="source sentences (raw text, or CoNLL-U with "
              "--input-format conllu)")
@click.option("--input-format", type=click.Choice(["text", "conllu"]), default="text",
              help="text: raw sentences, parsed with each model's own parser; conllu: trees")
@click.option("-o", "--out", "prefix", type=click.Path(path_type=Path), default=Path("awsl"),
              help="writes OUT.tsv (the table) and OUT.png (the plot)")
@click.option("--max-sentences", type=click.IntRange(min=0), default=0,
              help="use the first N sentences (0 = all)")
@click.option("-c", "--checkpoint", type=click.Path(path_type=Path, dir_okay=False),
              help="checkpoint file (default: MODEL_DIR/checkpoints/best.pt, else last.pt; "
                   "only with one model)")
@click.option("--device", default="auto", help="auto, cpu, cuda or cuda:N")
def awsl_command(model_dirs: tuple[Path, ...], src_path: Path, input_format: str, prefix: Path,
                 max_sentences: int, checkpoint: Path | None, device: str) -> None:
    """Average Weight of Syntax Logits per encoder layer (GPS paper, Eq. 7, Fig. 3).

    \b
    For every layer with the GPS syntax term: the mean over sentences and heads of
      w = 1/N² Σ_ij |e^s_ij| / (|e_ij| + |e^s_ij|)   (syntax; Fig. 3's red line)
    and of the ordinary term's share |e_ij| / (...) (Eq. 7 as printed; the blue line).
    Prints the table, writes OUT.tsv and OUT.png:
      depnmt analyze awsl -m work/model-gps --src work/prepare/test.raw.en -o awsl
    """
    from ..analyze import awsl, format_table, plot
    from ..errors import DepnmtError
    from ..log import info
    from ..textio import atomic_open
    from ..translate import Translator

    if checkpoint is not None and len(model_dirs) > 1:
        raise DepnmtError("--checkpoint applies to one model; give one -m with it")
    results = []
    for model_dir in model_dirs:
        translator = Translator.from_model_dir(model_dir, checkpoint, device)
        examples = _examples(translator, src_path, input_format, max_sentences)
        if not examples:
            raise DepnmtError(f"{src_path}: no non-empty sentence to analyse")
        results.append((model_dir.name, awsl(translator.model, examples)))
        info(f"{model_dir}: {len(examples)} sentences")
    table = format_table(results)
    sys.stdout.write(table)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(prefix.with_name(prefix.name + ".tsv")) as fh:
        fh.write(table)
    plot(results, prefix.with_name(prefix.name + ".png"))
    info(f"wrote {prefix}.tsv and {prefix}.png")


def _examples(translator, src_path: Path, input_format: str, max_sentences: int) -> list:
    """The model's examples (tokenized, parsed, segmented, features added) of the input."""
    from ..textio import iter_lines
    if input_format == "conllu":
        from ..parse import read_conllu
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
