"""``depnmt controls``: a parse folder of control trees (random, shuffled, chains, noisy); its
flags are the fields of :class:`depnmt.stages.parse.controls.ControlSettings`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import usage_errors
from depnmt.core.optionspec import field_params, from_options
from depnmt.stages.parse.controls import ControlSettings

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
@click_options(field_params(ControlSettings))
def command(**values) -> None:
    from depnmt.stages.parse.controlstage import run_controls
    settings = from_options(ControlSettings, values)
    with usage_errors():
        control = settings.control()
    run_controls(settings.parse_dir, settings.out_dir, control, sides=settings.sides())
