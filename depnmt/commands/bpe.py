"""``depnmt bpe``: a thin click layer over :mod:`depnmt.stages.bpe`; its flags are the fields of
:class:`depnmt.stages.bpe.BpeSettings`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import config_option, deprecated_aliases, usage_errors
from depnmt.core.log import info
from depnmt.core.optionspec import field_params, from_options
from depnmt.stages.bpe import BpeSettings, run_bpe
from depnmt.stages.bpefrom import run_bpe_from


@deprecated_aliases("bpe")
@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@config_option("read options from this YAML file (`merges: 8000`, one per line; flags given on "
               "the command line win)")
@click_options(field_params(BpeSettings))
@click.pass_context
def command(ctx: click.Context, **values) -> None:
    """Learn and apply subword-nmt BPE, or build word-level vocabularies.

    \b
    Writes into OUT_DIR:
      {train,dev,test}.LANG   the tokenized text as subwords ("@@" ends non-final pieces)
      vocab.src.txt vocab.tgt.txt   vocabularies for `depnmt train`
      codes.joint | codes.src codes.tgt, bpevocab.*, bpe.json   what segments new text
      manifest.json           inputs, options, versions and line counts

    Words are recovered from subwords by the "@@" markers, so parse trees of the tokenized
    text line up with the subwords without any extra file.
    """
    settings = from_options(BpeSettings, values)
    with usage_errors():
        settings.check(name for name in values if ctx.get_parameter_source(name)
                       in (click.core.ParameterSource.COMMANDLINE,
                           click.core.ParameterSource.DEFAULT_MAP))
    if settings.source is not None:
        run_bpe_from(settings.prepare_dir, settings.out_dir, settings.source, jobs=settings.jobs)
    else:
        run_bpe(settings.prepare_dir, settings.out_dir, settings.options(), jobs=settings.jobs)
    info(f"wrote {settings.out_dir}")
