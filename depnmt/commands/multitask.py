"""``depnmt multitask``: a thin click layer over :mod:`depnmt.multitask`."""

from __future__ import annotations

from pathlib import Path

import click

from .fields import FiniteFloatRange
from .options import SEED, deprecated_aliases

DIR = click.Path(exists=True, file_okay=False, path_type=Path)


@deprecated_aliases("multitask")
@click.command(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("-i", "--input", "prepare_dir", type=DIR, required=True,
              help="Folder written by `depnmt prepare`.")
@click.option("-t", "--trees", "parse_dir", type=DIR, required=True,
              help="Folder written by `depnmt parse` with the source side (--side src or both).")
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              required=True, metavar="OUT",
              help="Output folder: a `prepare` folder for `depnmt bpe`, written all or nothing "
                   "(it appears, or replaces a previous output, when the run completes).")
@click.option("--parse-fraction", type=FiniteFloatRange(0.0, 1.0), default=1.0,
              show_default=True, help="Share of the training sentences whose parse pair is added.")
@click.option("--seed", type=SEED, default=1, show_default=True,
              help="Which sentences --parse-fraction < 1 picks.")
def command(prepare_dir: Path, parse_dir: Path, out_dir: Path, parse_fraction: float,
            seed: int) -> None:
    """Mix translation with parsing of the source (Currey & Heafield 2019's multi-task data).

    \b
    OUT's training data: every pair, its source prefixed with the tag xxtranslatexx, then every
    source sentence again, prefixed with xxparsexx, paired with its dependency tree from
    --trees linearized as brackets:
      xxparsexx The dog barks .  ->  (root (nsubj (det The ) dog ) barks (punct . ) )
    dev and test: the translation pairs only (tagged). The model needs no change: train it on
    `depnmt bpe -i OUT` with --scheme abs (or abs+rel); translate OUT/test.raw.SRC (tagged),
    or prefix your input lines with "xxtranslatexx ". The paper parses with a constituency
    parser; this uses the parse stage's dependency trees.
    """
    from ..log import info
    from ..multitask import write_multitask
    manifest = write_multitask(prepare_dir, parse_dir, out_dir, parse_fraction, seed)
    train = manifest["counts"]["train"]
    info(f"wrote {out_dir}: {train['translate']} translation + {train['parse']} parse training "
         f"pairs")
