"""``depnmt prepare``: a thin click layer over :mod:`depnmt.stages.prepare`; its flags are the
fields of
:class:`depnmt.stages.prepare.Settings` (recorded in the manifest) and
:class:`depnmt.stages.prepare.Sources`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import config_option, deprecated_aliases, usage_errors
from depnmt.core.optionspec import field_params, from_options
from depnmt.stages.prepare import Settings, Sources, prepare, resolve_inputs


@deprecated_aliases("prepare")
@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@config_option("read options from this YAML file (`max-len: 100`, one per line; flags given on "
               "the command line win)")
@click_options([*field_params(Settings), *field_params(Sources)])
def command(**values) -> None:
    """Read, normalise, tokenize and filter a parallel corpus into train/dev/test.

    Give either a named corpus (--corpus) or your own files: --train-src and --train-tgt,
    optionally --dev-* and --test-* files, and --src-lang and --tgt-lang. Both files of a split
    must have the same number of lines; a pair dropped by a filter is dropped from both sides,
    and counted in the manifest.

    \b
    Writes into OUT_DIR, for split in train, dev, test:
      {split}.{lang}       tokenized text, tokens separated by single spaces
      {split}.raw.{lang}   the same sentences normalised but untokenized (BLEU references)
      manifest.json        inputs, options, tokenizers, library versions, line counts, and
                           how many dev/test sources are in train (or test's in dev) too
    """
    settings, sources = from_options(Settings, values), from_options(Sources, values)
    with usage_errors():
        settings, files, tokenizers, inputs_extra = resolve_inputs(settings, sources)
    prepare(sources.out_dir, files, settings, tokenizers, inputs_extra=inputs_extra,
            jobs=sources.jobs)
