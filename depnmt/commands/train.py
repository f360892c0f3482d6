"""``depnmt train``: its flags, made from the fields of a training run's configuration
(:func:`depnmt.training.config.train_params`), parsed into the run
(:func:`~depnmt.training.config.from_params`) and handed to :func:`depnmt.training.job.train`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_option
from depnmt.commands.options import config_option, deprecated_aliases
from depnmt.core.optionspec import flag_name
from depnmt.model.schemes.names import ABS, NO_POSITIONS, NOABS, VARIANTS
from depnmt.model.schemes.registry import FUSIONS, SCHEMES, load_builtin_schemes
from depnmt.training.config import core_params, scheme_option_params


def given_params(ctx: click.Context) -> set[str]:
    """Names of the parameters given on the command line, by environment variables or by the
    ``--config`` file (click's ``default_map``): all but those left at their defaults."""
    from click.core import ParameterSource
    return {name for name in ctx.params
            if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT}


@click.command("train", context_settings={"show_default": True})
@config_option("read options from this YAML file: `max-tokens: 4000`, one per line, keys as the "
               "flags without dashes (MODEL_DIR/train.yaml, which every run writes, is one); "
               "flags given on the command line win, and with --resume the file's values count "
               "as given")
@click.pass_context
def command(ctx: click.Context, **params) -> None:
    """Train a Transformer NMT model on a `depnmt bpe` folder.

    \b
    The positional scheme is chosen with --scheme: abs (keep the sinusoidal absolute PE)
    or noabs (drop it) and parts joined by '+' (tree schemes need --trees; dbsa-* learn
    from trees, so translate needs no parser):
    {schemes}
    The papers' systems keep the absolute PE: abs+rel, abs+dep, abs+dep+rel, abs+deplabel
    (method 1), abs+deplabel+rel (method 2), abs+dbsa-enc, abs+dbsa-dec,
    abs+dbsa-enc+dbsa-dec, and the GPS paper's Table 2: abs+pascal, abs+structural,
    abs+gps. Ablations: noabs+dep, noabs+dep-bK, --*-terms. Layers are counted from 1.
    Runs on CUDA when available (with AMP), else on the CPU. Out of GPU memory, halve
    --max-tokens and double --update-freq (the same update size). In fp16 an update whose
    gradients overflow is skipped and not counted (the loss scale drops). SIGTERM or Ctrl-C
    finishes the current update, saves MODEL_DIR/checkpoints/last.pt and exits 143/130 (a
    second one stops at once); a kill leaves last.pt intact. `--resume` continues exactly
    where it stopped (flags you leave out take the model's saved values, -t included; give
    e.g. --max-steps to extend) on the data the model was trained on: other text or trees
    are refused, unless --resume-on-changed-data. A new run's MODEL_DIR is a new or empty
    folder (or a killed run's model folder).
    One training at a time per MODEL_DIR (a lock; a second one is an error).
    Runs unchanged under torchrun (`torchrun --nproc_per_node N -m depnmt.cli train ...`: one
    process per GPU, or gloo processes with --device cpu): --max-tokens and --update-freq are
    per process, rank 0 validates and writes.
    Every run records its settings in MODEL_DIR/train.yaml: `--config MODEL_DIR/train.yaml`
    runs the same again (the flags you give win; give another -o). --check-settings trains
    nothing: it says whether MODEL_DIR was trained with the settings given.
    """
    from depnmt.core.errors import UsageError
    from depnmt.training.config import check_settings, from_params
    from depnmt.training.job import train
    if params["check_settings"]:
        check_settings(params, given_params(ctx))         # trains nothing
        return
    try:
        run = from_params(params, given_params(ctx))
    except UsageError as exc:
        raise click.UsageError(str(exc)) from None
    train(run)


def scheme_list() -> str:
    """``train --help``'s list of parts, one line each: name and what it is."""
    load_builtin_schemes()
    lines = [(ABS, SCHEMES[ABS].help),
             (NOABS, "without abs; alone: no positional information at all (ablations)")]
    lines += [(n.replace("_", "-"), cls.help) for n, cls in SCHEMES.items()
              if n not in (ABS, NO_POSITIONS) and n not in FUSIONS.values()]
    lines += [("+".join(parts), SCHEMES[joint].help) for parts, joint in FUSIONS.items()]
    lines += [(n, f"{c.replace('_', '-')} with " + ", ".join(f"{flag_name(k)} {v}"
                                                            for k, v in o.items()))
              for n, (c, o) in VARIANTS.items()]
    lines += [("gps-layerN", "gps with --gps-layer N (N from 1)")]
    return "\n".join(f"  {name:<14} {text}" for name, text in lines)


# The run's options are flags (depnmt.training.config), then the 0.1.0 spellings of -i and -o, then
# each registered scheme's options (model/schemes/options.py).
command.params.extend(click_option(p) for p in core_params())
command = deprecated_aliases("train")(command)
command.params.extend(click_option(p) for p in scheme_option_params())
command.help = command.help.replace("{schemes}", scheme_list().replace("\n", "\n    "))
