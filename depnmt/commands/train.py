"""``depnmt train``: thin click wrapper over :mod:`depnmt.train`."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import click

from ..device import PRECISIONS
from ..model.schemes.registry import (SCHEME_HELP, all_cli_options, declared_options,
                                      resolve, saved_scheme_values, scheme_entries,
                                      scheme_list, scheme_params)
from ..model.transformer import ModelConfig
from ..search import LENGTH_PENALTIES, SearchConfig
from ..train import TrainOptions
from .options import (AMOUNT, COUNT, DROPOUT, POSITIVE, RATE, SEED, config_option,
                      config_settings, deprecated_aliases)

# flag, field, type, help; the defaults are the fields' (ModelConfig, TrainOptions, SearchConfig)
ARCH = [
    ("--d-model", "d_model", POSITIVE, "model (embedding) dimension d_model"),
    ("--heads", "n_heads", POSITIVE, "attention heads"),
    ("--d-ff", "d_ff", POSITIVE, "feed-forward inner dimension"),
    ("--encoder-layers", "encoder_layers", POSITIVE, "encoder layers"),
    ("--decoder-layers", "decoder_layers", POSITIVE, "decoder layers"),
    ("--dropout", "dropout", DROPOUT, "dropout on embeddings, sublayer outputs and FFN"),
    ("--attention-dropout", "attention_dropout", DROPOUT, "dropout on attention weights"),
    ("--tie-embeddings/--no-tie-embeddings", "tie_decoder_embeddings", bool,
     "share the decoder's input embedding and output projection"),
    ("--share-all-embeddings", "share_all_embeddings", bool,
     "also share the source embedding (needs `depnmt bpe --joint`)"),
]
TRAIN = [
    ("--max-tokens", "max_tokens", POSITIVE, (
        "padded tokens per batch: sentences × the batch's longest sequence of either side "
        "(source incl. EOS, target incl. BOS/EOS); sentences are sorted by that length so "
        "batches fill up (per process under torchrun)")),
    ("--batch-sentences", "batch_sentences", COUNT, (
        "also close a batch at this many sentences (0 = no limit); combined with --max-tokens, "
        "whichever is reached first: for batches of exactly N sentences (Omote et al.'s "
        "batch sizes) raise --max-tokens to N × the longest pair")),
    ("--update-freq", "update_freq", POSITIVE, ("batches accumulated per update (gradient "
                                                "accumulation; per process under torchrun)")),
    ("--lr", "lr", RATE, "peak learning rate (Adam 0.9/0.98/1e-9)"),
    ("--warmup", "warmup", COUNT, "linear warm-up steps, then inverse square root decay"),
    ("--label-smoothing", "label_smoothing", DROPOUT, "label smoothing epsilon"),
    ("--clip-norm", "clip_norm", AMOUNT, "gradient norm clipping (0 = off)"),
    ("--max-epochs", "max_epochs", COUNT, "stop after this many epochs (0 = no limit)"),
    ("--max-steps", "max_steps", COUNT, "stop after this many updates (0 = no limit)"),
    ("--max-minutes", "max_minutes", AMOUNT, "stop after this wall-clock budget (0 = no limit)"),
    ("--valid-every", "valid_every", COUNT, "validate every N updates (0 = every epoch)"),
    ("--save-every", "save_every", COUNT, "also save last.pt every N updates (0 = at validation)"),
    ("--patience", "patience", COUNT, "early stopping: validations without improvement of "
     "--early-stop-metric (0 = off)"),
    ("--early-stop-metric", "early_stop_metric", click.Choice(["bleu", "acc", "loss"]),
     "dev metric that selects best.pt and drives --patience: bleu (dev BLEU; the loss when "
     "there are no dev references), acc (dev token accuracy, as Omote et al.) or loss"),
    ("--keep-last", "keep_last", COUNT, "also keep the model at the last N validations/saves "
     "as checkpoints/step{UPDATE}.pt, older ones deleted (for `depnmt average`; 0 = none)"),
    ("--valid-beam", "valid_beam", POSITIVE, "beam size for dev BLEU (1 = greedy, fastest)"),
    ("--valid-max-sentences", "valid_max_sentences", COUNT, "dev sentences decoded for BLEU (0 = all)"),
    ("--max-len", "max_len", POSITIVE, "skip training pairs longer than this (subwords); also "
     "the source length limit of translate"),
    ("--seed", "seed", SEED, "random seed (initialisation, data order)"),
    ("--device", "device", str, ("auto (CUDA when available), cpu, cuda or cuda:N "
                                 "(under torchrun: cuda = cuda:LOCAL_RANK)")),
    ("--precision", "precision", click.Choice(PRECISIONS), (
        "autocast dtype of the forward pass: auto = bf16 on CPUs with native bf16 matrix "
        "multiplies (avx512_bf16/amx_bf16 in /proc/cpuinfo), fp32 on other CPUs, bf16 on CUDA "
        "GPUs of compute capability 8.0 on (Ampere, Hopper), fp16 with loss scaling on older "
        "ones (bf16 there is emulated: slow, with a warning); loss, softmaxes and optimizer "
        "state stay fp32")),
    ("--amp/--no-amp", "amp", bool, "--no-amp is --precision fp32 (older flag)"),
    ("--log-every", "log_every", POSITIVE, "updates between metrics.jsonl lines"),
]
SEARCH = [
    ("--beam", "beam", POSITIVE, "default beam size of translate (1 = greedy)"),
    ("--alpha", "alpha", AMOUNT, "default length penalty exponent alpha of translate"),
    ("--length-penalty", "length_penalty", click.Choice(LENGTH_PENALTIES),
     "default length penalty form of translate: gnmt = ((5 + |Y|) / 6)^alpha, power = "
     "|Y|^alpha (CTranslate2's)"),
]


# where --resume finds the saved value of a flag left at its default (config.json sections)
SAVED_SECTIONS = {"arch_": "model", "train_": "training", "search_": "search"}


def inherit_saved(params: dict, given: set[str], model_dir: Path) -> dict:
    """``--resume``: every flag not given on the command line takes the value the model was
    trained with (its ``config.json``: architecture, scheme and its options, training and
    search settings), so `depnmt train -i D -o M --resume` continues the run as it was
    configured; flags that are given (e.g. a larger ``--max-steps``) override it."""
    from ..modeldir import CONFIG, read_config
    if not (model_dir / CONFIG).exists():
        return params                       # the trainer reports the missing checkpoint
    saved = read_config(model_dir)          # (an old config.json upgraded to today's form)
    values = saved_scheme_values(saved["model"])   # today's scheme name and option names
    for prefix, section in SAVED_SECTIONS.items():
        values.update({prefix + k: v for k, v in saved.get(section, {}).items()})
    out = {name: values.get(name, value) if name not in given else value
           for name, value in params.items()}
    if "layers" in given:
        out["arch_encoder_layers"] = out["arch_decoder_layers"] = params["layers"]
    return out


def given_params(ctx: click.Context) -> set[str]:
    """Names of the parameters given on the command line, by environment variables or by the
    ``--config`` file (click's ``default_map``): all but those left at their defaults."""
    from click.core import ParameterSource
    return {name for name in ctx.params
            if ctx.get_parameter_source(name) is not ParameterSource.DEFAULT}


def effective_params(ctx: click.Context, given: set[str], resume: bool,
                     model_dir: Path) -> dict:
    """The run's parameters: the flags' values (``--resume``: the saved ones for those not
    given, :func:`inherit_saved`), with ``--layers`` spread over both layer counts."""
    params = inherit_saved(ctx.params, given, model_dir) if resume else dict(ctx.params)
    layers = params.pop("layers")
    if layers is not None:
        params["arch_encoder_layers"] = params["arch_decoder_layers"] = layers
    return params


def saved_settings(command: click.Command, params: dict) -> dict:
    """What ``train.yaml`` records: the run's effective settings as a ``--config`` file (the
    options of the schemes the run uses only; no ``--resume``)."""
    used = set(resolve(params["scheme"]))
    unused = {option for option, users in declared_options().items() if not used & set(users)}
    return config_settings(command, {name: value for name, value in params.items()
                                     if name not in unused and name != "resume"})


ENVVARS = {"--precision": "DEPNMT_PRECISION"}   # flags whose default an environment variable sets


def _options(table, prefix, config_cls):
    """click options of ``table`` (flag, field, type, help), defaults from ``config_cls``."""
    defaults = {f.name: f.default for f in fields(config_cls)}

    def deco(f):
        for flag, name, typ, help_ in reversed(table):
            flags = dict(is_flag=True) if typ is bool else dict(type=typ)
            f = click.option(flag, f"{prefix}{name}", default=defaults[name], show_default=True,
                             help=help_, envvar=ENVVARS.get(flag),
                             show_envvar=flag in ENVVARS, **flags)(f)
        return f
    return deco


def scheme_entries_of(scheme: str, values: dict, given: set[str]) -> list[dict]:
    """The model config's ``schemes`` for ``--scheme SCHEME`` from the scheme flags' values;
    a warning for each flag given that none of the components uses."""
    from ..log import warn
    from ..model.schemes.options import flag_name
    names = resolve(scheme)
    for option, users in declared_options().items():
        if option in given and not set(users) & set(names):
            warn(f"{flag_name(option)} is ignored: it is an option of {', '.join(users)}, "
                 f"which --scheme {scheme} does not use")
    return scheme_entries(names, values)


@deprecated_aliases("train")
@click.command("train", context_settings={"show_default": True})
@config_option("read options from this YAML file: `max-tokens: 4000`, one per line, keys as the "
               "flags without dashes (MODEL_DIR/train.yaml, which every run writes, is one); "
               "flags given on the command line win, and with --resume the file's values count "
               "as given")
@click.option("-i", "--input", "data_dir", required=True, metavar="BPE_DIR",
              type=click.Path(path_type=Path, file_okay=False),
              help="folder written by `depnmt bpe`")
@click.option("-o", "--output", "model_dir", required=True, metavar="MODEL_DIR",
              type=click.Path(path_type=Path, file_okay=False),
              help="where the model directory (config, vocabularies, checkpoints, metrics) goes")
@click.option("-t", "--trees", "trees_dir", type=click.Path(path_type=Path, file_okay=False),
              help="folder written by `depnmt parse` (needed by tree-based schemes)")
@click.option("--scheme", default="abs", help=SCHEME_HELP)
@_options(ARCH, "arch_", ModelConfig)
@click.option("--layers", type=POSITIVE, default=None, help="shortcut: encoder and decoder layers")
@_options(TRAIN, "train_", TrainOptions)
@_options(SEARCH, "search_", SearchConfig)
@click.option("--resume", is_flag=True, help="continue from MODEL_DIR/checkpoints/last.pt "
              "(optimizer, schedule, RNG and data order included); flags not given take the "
              "values the model was trained with")
@click.option("--tensorboard", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="also write training loss, learning rate, tokens/s and the dev metrics as "
                   "TensorBoard scalars to this folder (needs `pip install 'depnmt[tensorboard]'`)")
@click.pass_context
def command(ctx: click.Context, data_dir: Path, model_dir: Path, trees_dir: Path | None,
            scheme: str, layers: int | None, resume: bool, tensorboard: Path | None,
            **kwargs) -> None:
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
    where it stopped (flags you leave out take the model's saved values; give e.g.
    --max-steps to extend).
    One training at a time per MODEL_DIR (a lock; a second one is an error).
    Runs unchanged under torchrun (`torchrun --nproc_per_node N -m depnmt.cli train ...`: one
    process per GPU, or gloo processes with --device cpu): --max-tokens and --update-freq are
    per process, rank 0 validates and writes.
    Every run records its settings in MODEL_DIR/train.yaml: `--config MODEL_DIR/train.yaml`
    runs the same again (the flags you give win; give another -o).
    """
    from ..board import TensorBoardLog
    from ..device import bound_onednn_cache
    from ..trainrun import run_training

    bound_onednn_cache()          # before the first bf16 matrix multiply of this process
    given = given_params(ctx)
    params = effective_params(ctx, given, resume, model_dir)
    params, given = scheme_params(params, given)   # 0.1.0 spellings: warned, today's terms
    sections = {prefix: {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}
                for prefix in SAVED_SECTIONS}
    arch = sections["arch_"]
    if arch["d_model"] % arch["n_heads"]:
        raise click.UsageError(f"--d-model {arch['d_model']} is not a multiple of --heads "
                               f"{arch['n_heads']} (each head gets d_model / heads dimensions)")
    model_cfg = ModelConfig(0, 0, **arch,
                            schemes=scheme_entries_of(params["scheme"], params, given))
    opts = TrainOptions(**sections["train_"])
    search = SearchConfig(**sections["search_"])
    board = TensorBoardLog(tensorboard) if tensorboard else None   # fails before any work
    run_training(dict(data_dir=data_dir, model_dir=model_dir, model_cfg=model_cfg, opts=opts,
                      trees_dir=trees_dir, resume=resume, search=search,
                      settings=saved_settings(ctx.command, params)), board)


# Each registered scheme's options are flags (model/schemes/options.py); scheme_entries_of
# gives every component the values of the options it declares.
command.params.extend(all_cli_options())
command.help = command.help.replace("{schemes}", scheme_list().replace("\n", "\n    "))
