"""``depnmt export``: a trained model in another toolkit's format (see depnmt/export.py)."""

from __future__ import annotations

from pathlib import Path

import click

from ..export import QUANTIZATIONS
from .options import deprecated_aliases


@deprecated_aliases("export")
@click.command("export", context_settings={"show_default": True})
@click.option("--format", "fmt", type=click.Choice(["ctranslate2"]), default="ctranslate2",
              help="target format")
@click.option("-m", "--model", "model_dir", metavar="MODEL_DIR",
              type=click.Path(path_type=Path, file_okay=False),
              required=True, help="model directory written by `depnmt train`")
@click.option("-o", "--output", type=click.Path(path_type=Path, file_okay=False), required=True,
              help="folder to write (must not exist, unless --force)")
@click.option("-c", "--checkpoint", type=click.Path(path_type=Path, dir_okay=False),
              help="checkpoint file (default: MODEL_DIR/checkpoints/best.pt, else last.pt)")
@click.option("--quantization", type=click.Choice(QUANTIZATIONS), default=None,
              help="store the weights quantized (default: float32, as trained)")
@click.option("--force", is_flag=True,
              help="replace OUTPUT if it is an earlier export (or an empty folder)")
def command(fmt: str, model_dir: Path, output: Path, checkpoint: Path | None,
            quantization: str | None, force: bool) -> None:
    """Export a trained model to CTranslate2, ready to serve.

    Needs the ct2 extra (pip install 'depnmt[ct2]'); `depnmt translate --ct2 OUTPUT` then
    translates with the export.

    Schemes CTranslate2 can represent: abs, noabs+rel (Shaw's relative positions without the
    absolute ones) and noabs. Tree schemes and abs+rel are refused: CTranslate2
    adds no absolute position encoding to a decoder with relative positions. OUTPUT holds the
    CTranslate2 model, the vocabularies, the BPE codes, the tokenizer settings and search
    defaults (depnmt-export.json) and a README with a Python example: it is usable alone.
    Greedy output equals depnmt's token for token; beam search normalises length by |Y|^alpha
    and cuts at the length limit: depnmt translate --length-penalty power --at-limit cut does
    the same (depnmt's defaults: the GNMT penalty, EOS forced at the limit).
    """
    from ..export import export_ctranslate2
    from ..log import info

    record = export_ctranslate2(model_dir, output, checkpoint, quantization, force)
    info(f"exported {model_dir} ({record['checkpoint']}, step {record['step']}, positions "
         f"{record['positions']}) to {output}")
