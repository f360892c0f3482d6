"""``depnmt multitask``: a thin click layer over :mod:`depnmt.stages.multitask`; its flags are the
fields of :class:`depnmt.stages.multitask.MultitaskSettings`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import deprecated_aliases
from depnmt.core.optionspec import field_params, from_options
from depnmt.stages.multitask import MultitaskSettings


@deprecated_aliases("multitask")
@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click_options(field_params(MultitaskSettings))
def command(**values) -> None:
    """Mix translation with parsing of the source (Currey & Heafield 2019's multi-task data).

    \b
    OUT's training data: every pair, its source prefixed with the tag xxtranslatexx, then every
    source sentence again, prefixed with xxparsexx, paired with its dependency tree from
    --trees linearized as brackets:
      xxparsexx The dog barks .  ->  (root (nsubj (det The ) dog ) barks (punct . ) )
    dev and test: the translation pairs only (tagged; an empty source line stays empty, and
    has no parse pair in training). The model needs no change: train it on
    `depnmt bpe -i OUT` with --scheme abs (or abs+rel); translate OUT/test.raw.SRC (tagged),
    or prefix your input lines with "xxtranslatexx ". train records the tags in the model's
    config.json, and translate, rescore, contrastive and the Python API refuse a source line
    that begins with neither tag (error FILE:LINE, exit 2; empty lines stay empty). The paper
    parses with a constituency parser; this uses the parse stage's dependency trees.
    """
    from depnmt.core.log import info
    from depnmt.stages.multitask import write_multitask
    settings = from_options(MultitaskSettings, values)
    out_dir = settings.out_dir
    manifest = write_multitask(settings.prepare_dir, settings.parse_dir, out_dir,
                               settings.parse_fraction, settings.seed)
    train = manifest["counts"]["train"]
    info(f"wrote {out_dir}: {train['translate']} translation + {train['parse']} parse training "
         f"pairs")
