"""``depnmt controls``: a parse folder of control trees (random, shuffled, chains, noisy)."""

from __future__ import annotations

from pathlib import Path

import click

from .fields import FiniteFloatRange
from .options import SEED

HELP = """Make control trees: a parse folder whose trees are random, shuffled, chains or noisy
versions of a `depnmt parse` folder's, over exactly the same tokens.

Train the same scheme on the parser's trees and on control trees of the same sentences: if the
control does as well, the gain comes from the scheme's extra parameters, not from the tree.

\b
Reads  PARSE_DIR/{split}.{lang}.conllu and PARSE_DIR/manifest.json
Writes OUT_DIR/{split}.{lang}.conllu and OUT_DIR/manifest.json, a parse folder that
       `depnmt multitask` and `train -t` read as they read the parser's

\b
Kinds:
  random-projective     uniform over the projective trees of the sentence
  random-nonprojective  uniform over all its trees (one root word)
  shuffled              the parser's tree with its words randomly permuted (same shape)
  left-branching        every word headed by the next word (the last is the root)
  right-branching       every word headed by the previous word (the first is the root)
  noise                 the parser's tree with a fraction --noise of its heads re-drawn

Each sentence's control tree is a function of --seed and its words: the same seed gives the
same trees. The manifest records the control and the input folder's checksums; a model trained
on the folder records the control, and `depnmt translate` applies it to the trees it parses.
"""


@click.command("controls", help=HELP, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("-i", "--input", "parse_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Folder of the parser's trees, written by `depnmt parse`.")
@click.option("-o", "--output", "out_dir", required=True,
              type=click.Path(file_okay=False, path_type=Path),
              help="Folder for the control trees and manifest.json, written all or nothing; "
                   "not the input folder, inside it or around it.")
@click.option("--kind", required=True, metavar="KIND",
              type=click.Choice(["random-projective", "random-nonprojective", "shuffled",
                                 "left-branching", "right-branching", "noise"]),
              help="Which control trees (see above).")
@click.option("--seed", type=SEED, default=1, show_default=True,
              help="Seed of the random kinds (every kind records it).")
@click.option("--labels", type=click.Choice(["keep", "shuffle", "constant"]), default="keep",
              show_default=True,
              help="DEPRELs besides `root`, which is always on the root word and only there: "
                   "each word keeps its own (the old root's word gets `dep`), the parser's "
                   "other labels are shuffled among the other words, or `dep` on every one.")
@click.option("--noise", type=FiniteFloatRange(0, 1, min_open=True), default=None, metavar="P",
              help="For --kind noise: the fraction of non-root words whose head is re-drawn.")
@click.option("--side", type=click.Choice(["src", "tgt", "both"]), default=None,
              help="Which side's trees to replace (the other is copied).  [default: every "
                   "side the folder has]")
def command(parse_dir, out_dir, kind, seed, labels, noise, side) -> None:
    from ..parse.controls import Control
    from ..parse.controlstage import run_controls
    if kind == "noise" and noise is None:
        raise click.UsageError("--kind noise needs --noise P, the fraction of heads to corrupt")
    if kind != "noise" and noise is not None:
        raise click.UsageError(f"--noise is for --kind noise, not {kind}")
    run_controls(parse_dir, out_dir, Control(kind, seed, labels, noise),
                 sides=None if side is None else ["src", "tgt"] if side == "both" else [side])
