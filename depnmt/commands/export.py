"""``depnmt export``: a trained model in another toolkit's format (see depnmt/decoding/export.py);
its
flags are the fields of :class:`depnmt.decoding.export.ExportSettings`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import deprecated_aliases
from depnmt.core.optionspec import field_params, from_options
from depnmt.decoding.export import ExportSettings


@deprecated_aliases("export")
@click.command("export", context_settings={"show_default": True})
@click_options(field_params(ExportSettings))
def command(**values) -> None:
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
    from depnmt.core.log import info
    from depnmt.decoding.export import checkpoint_text, export_ctranslate2

    settings = from_options(ExportSettings, values)
    model_dir, output = settings.model_dir, settings.output
    record = export_ctranslate2(model_dir, output, settings.checkpoint, settings.quantization,
                                settings.force)
    info(f"exported {model_dir} ({checkpoint_text(record)}, positions {record['positions']}) "
         f"to {output}")
