"""``depnmt train``: thin click wrapper over :mod:`depnmt.train`."""

from __future__ import annotations

import sys
from contextlib import nullcontext
from pathlib import Path

import click

from ..device import PRECISIONS
from ..model.schemes.registry import PRESETS, all_cli_options, resolve
from .options import AMOUNT, COUNT, DROPOUT, POSITIVE, RATE, SEED

ARCH = [  # flag, ModelConfig field, type, default, help
    ("--d-model", "d_model", POSITIVE, 512, "model (embedding) dimension d_model"),
    ("--heads", "n_heads", POSITIVE, 8, "attention heads"),
    ("--d-ff", "d_ff", POSITIVE, 2048, "feed-forward inner dimension"),
    ("--encoder-layers", "encoder_layers", POSITIVE, 6, "encoder layers"),
    ("--decoder-layers", "decoder_layers", POSITIVE, 6, "decoder layers"),
    ("--dropout", "dropout", DROPOUT, 0.1, "dropout on embeddings, sublayer outputs and FFN"),
    ("--attention-dropout", "attention_dropout", DROPOUT, 0.0, "dropout on attention weights"),
]
TRAIN = [  # flag, TrainOptions field, type, default, help
    ("--max-tokens", "max_tokens", POSITIVE, 4096, (
        "padded tokens per batch: sentences × the batch's longest sequence of either side "
        "(source incl. EOS, target incl. BOS/EOS); sentences are sorted by that length so "
        "batches fill up (per process under torchrun)")),
    ("--batch-sentences", "batch_sentences", COUNT, 0, (
        "also close a batch at this many sentences (0 = no limit); combined with --max-tokens, "
        "whichever is reached first: for batches of exactly N sentences (Omote et al.'s "
        "batch sizes) raise --max-tokens to N × the longest pair")),
    ("--update-freq", "update_freq", POSITIVE, 1, ("batches accumulated per update (gradient "
                                              "accumulation; per process under torchrun)")),
    ("--lr", "lr", RATE, 7e-4, "peak learning rate (Adam 0.9/0.98/1e-9)"),
    ("--warmup", "warmup", COUNT, 4000, "linear warm-up steps, then inverse square root decay"),
    ("--label-smoothing", "label_smoothing", DROPOUT, 0.1, "label smoothing epsilon"),
    ("--clip-norm", "clip_norm", AMOUNT, 0.0, "gradient norm clipping (0 = off)"),
    ("--max-epochs", "max_epochs", COUNT, 0, "stop after this many epochs (0 = no limit)"),
    ("--max-steps", "max_steps", COUNT, 0, "stop after this many updates (0 = no limit)"),
    ("--max-minutes", "max_minutes", AMOUNT, 0.0, "stop after this wall-clock budget (0 = no limit)"),
    ("--valid-every", "valid_every", COUNT, 0, "validate every N updates (0 = every epoch)"),
    ("--save-every", "save_every", COUNT, 0, "also save last.pt every N updates (0 = at validation)"),
    ("--patience", "patience", COUNT, 0, "early stopping: validations without improvement of "
     "--early-stop-metric (0 = off)"),
    ("--early-stop-metric", "early_stop_metric", click.Choice(["bleu", "acc", "loss"]), "bleu",
     "dev metric that selects best.pt and drives --patience: bleu (dev BLEU; the loss when "
     "there are no dev references), acc (dev token accuracy, as Omote et al.) or loss"),
    ("--keep-last", "keep_last", COUNT, 0, "also keep the model at the last N validations/saves "
     "as checkpoints/step{UPDATE}.pt, older ones deleted (for `depnmt average`; 0 = none)"),
    ("--valid-beam", "valid_beam", POSITIVE, 1, "beam size for dev BLEU (1 = greedy, fastest)"),
    ("--valid-max-sentences", "valid_max_sentences", COUNT, 0, "dev sentences decoded for BLEU (0 = all)"),
    ("--max-len", "max_len", POSITIVE, 250, "skip training pairs longer than this (subwords); also "
     "the source length limit of translate"),
    ("--seed", "seed", SEED, 1, "random seed (initialisation, data order)"),
    ("--device", "device", str, "auto", ("auto (CUDA when available), cpu, cuda or cuda:N "
                                          "(under torchrun: cuda = cuda:LOCAL_RANK)")),
    ("--precision", "precision", click.Choice(PRECISIONS), "auto", (
        "autocast dtype of the forward pass: auto = bf16 on CPUs with native bf16 matrix "
        "multiplies (avx512_bf16/amx_bf16 in /proc/cpuinfo), fp32 on other CPUs, bf16 (or fp16 "
        "with loss scaling) on CUDA; loss, softmaxes and optimizer state stay fp32")),
    ("--log-every", "log_every", POSITIVE, 100, "updates between metrics.jsonl lines"),
]
SEARCH = [
    ("--beam", "beam", POSITIVE, 4, "default beam size of translate (1 = greedy)"),
    ("--alpha", "alpha", AMOUNT, 0.6, "default GNMT length penalty alpha of translate"),
]


# where --resume finds the saved value of a flag left at its default (config.json sections)
SAVED_SECTIONS = {"arch_": "model", "train_": "training", "search_": "search"}


def inherit_saved(params: dict, given: set[str], model_dir: Path) -> dict:
    """``--resume``: every flag not given on the command line takes the value the model was
    trained with (its ``config.json``: architecture, scheme and its options, training and
    search settings), so `depnmt train --data D -o M --resume` continues the run as it was
    configured; flags that are given (e.g. a larger ``--max-steps``) override it."""
    from ..modeldir import CONFIG, read_config
    if not (model_dir / CONFIG).exists():
        return params                       # the trainer reports the missing checkpoint
    saved = read_config(model_dir)
    model = saved["model"]
    special = {"scheme": "+".join(model["scheme"]),
               "tie_embeddings": model["tie_decoder_embeddings"],
               "share_all_embeddings": model["share_all_embeddings"],
               "amp": saved.get("training", {}).get("amp", params.get("amp")),
               # models saved before --precision existed trained in fp32 on the CPU
               "train_precision": saved.get("training", {}).get("precision", "fp32"),
               "layers": None}              # encoder/decoder layers come from arch_*
    out = dict(params)
    for name in params:
        if name in given:
            continue
        if name in special:
            out[name] = special[name]
        elif name in model.get("scheme_options", {}):
            out[name] = model["scheme_options"][name]
        for prefix, section in SAVED_SECTIONS.items():
            field = name[len(prefix):]
            if name.startswith(prefix) and field in saved.get(section, {}):
                out[name] = saved[section][field]
    if "layers" in given:
        out["arch_encoder_layers"] = out["arch_decoder_layers"] = params["layers"]
    return out


def given_params(ctx: click.Context) -> set[str]:
    """Names of the parameters given on the command line (or by environment variables)."""
    from click.core import ParameterSource
    return {name for name in ctx.params
            if ctx.get_parameter_source(name) not in (ParameterSource.DEFAULT,
                                                      ParameterSource.DEFAULT_MAP)}


ENVVARS = {"--precision": "DEPNMT_PRECISION"}   # flags whose default an environment variable sets


def _options(table, prefix):
    def deco(f):
        for flag, field, typ, default, help_ in reversed(table):
            f = click.option(flag, f"{prefix}{field}", type=typ, default=default,
                             show_default=True, help=help_, envvar=ENVVARS.get(flag),
                             show_envvar=flag in ENVVARS)(f)
        return f
    return deco


@click.command("train", context_settings={"show_default": True})
@click.option("--data", "data_dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="folder written by `depnmt bpe`")
@click.option("-o", "--model-dir", required=True, type=click.Path(path_type=Path, file_okay=False),
              help="where the model directory (config, vocabularies, checkpoints, metrics) goes")
@click.option("--trees", "trees_dir", type=click.Path(path_type=Path, file_okay=False),
              help="folder written by `depnmt parse` (needed by tree-based schemes)")
@click.option("--scheme", default="abs",
              help="positional scheme: a preset (" + ", ".join(PRESETS) + ") or components "
                   "joined by '+', e.g. abs, none")
@_options(ARCH, "arch_")
@click.option("--layers", type=POSITIVE, default=None, help="shortcut: encoder and decoder layers")
@click.option("--tie-embeddings/--no-tie-embeddings", default=True,
              help="share the decoder's input embedding and output projection")
@click.option("--share-all-embeddings", is_flag=True,
              help="also share the source embedding (needs `depnmt bpe --joint`)")
@_options(TRAIN, "train_")
@click.option("--amp/--no-amp", default=True, help="--no-amp is --precision fp32 (older flag)")
@_options(SEARCH, "search_")
@click.option("--resume", is_flag=True, help="continue from MODEL_DIR/checkpoints/last.pt "
              "(optimizer, schedule, RNG and data order included); flags not given take the "
              "values the model was trained with")
@click.option("--tensorboard", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="also write training loss, learning rate, tokens/s and the dev metrics as "
                   "TensorBoard scalars to this folder (needs `pip install 'depnmt[tensorboard]'`)")
@click.pass_context
def command(ctx: click.Context, data_dir: Path, model_dir: Path, trees_dir: Path | None,
            scheme: str, layers: int | None, tie_embeddings: bool, share_all_embeddings: bool,
            amp: bool, resume: bool, tensorboard: Path | None, **kwargs) -> None:
    """Train a Transformer NMT model on a `depnmt bpe` folder.

    \b
    The positional scheme is chosen with --scheme (a preset or components joined by '+'):
      abs       sinusoidal absolute positions (Transformer_abs, Vaswani et al. 2017)
      none      no positions (ablation)
      rel       Shaw et al. relative positions clip(j-i, k), encoder and decoder
      dep       relative depth on the source tree (Omote et al. 2019); needs --trees
      deplabel  ancestor depth / sib / self / non_dep labels (Omote et al., NLP 2019)
      deplabel+rel  that paper's method 2, Concat(a, b) W_rel
      dbsa_enc  Deguchi et al. (2019) DBSA(Enc): a parse head in encoder layer
                --dbsa-enc-layer, learned from source trees (--trees; translate needs
                no parser); dbsa_dec: a causal one in the decoder, from target trees
      gps       GPS: root paths of dependency labels through an LSTM, a syntax term in
                the logits of encoder layers --gps-layers (0-based; all; 0,1,2)
      pascal    PASCAL parent-scaled heads (--pascal-layers, --pascal-heads, --pascal-sigma)
      structural  Wang et al. structural positions: tree depth PE + tree distance tables
    Presets keep the absolute PE: Transformer_rel = abs+rel, Transformer_dep = abs+dep,
    Transformer_dep+rel = abs+dep+rel, Transformer_deplabel = abs+deplabel (method 1),
    Transformer_deplabel+rel = abs+deplabel+rel (method 2), Transformer_abs+DBSA(Enc) =
    abs+dbsa_enc, Transformer_abs+DBSA(Dec), Transformer_abs+DBSA(Enc)+DBSA(Dec) (quote
    them in the shell), and the GPS paper's Table 2: Transformer_pascal = abs+pascal,
    Transformer_structural = abs+structural, Transformer_gps = abs+gps. Ablations:
    --*-terms, and leave out abs to drop the absolute PE.
    Runs on CUDA when available (with AMP), else on the CPU. SIGTERM or Ctrl-C finishes the
    current update, saves MODEL_DIR/checkpoints/last.pt and exits 143/130 (a second one stops
    at once); a kill leaves last.pt intact. `--resume` continues exactly where it stopped
    (flags you leave out take the model's saved values; give e.g. --max-steps to extend).
    One training at a time per MODEL_DIR (a lock; a second one is an error).
    Runs unchanged under torchrun (one process per GPU, or gloo processes with --device
    cpu): --max-tokens and --update-freq are per process, rank 0 validates and writes.

    \b
    Example (the Multi30k baseline of the README, ~20 minutes on 2 CPU cores):
      depnmt train --data work/bpe -o work/model --scheme abs --layers 3 \\
        --d-model 256 --heads 4 --d-ff 1024 --max-minutes 20
    On the 4 GPUs of one machine:
      torchrun --nproc_per_node 4 -m depnmt.cli train --data work/bpe -o work/model ...
    """
    from .. import distributed
    from ..board import TensorBoardLog
    from ..device import bound_onednn_cache
    from ..model.transformer import ModelConfig
    from ..modeldir import lock_for_writing
    from ..stopsignals import Stopped
    from ..search import SearchConfig
    from ..train import Trainer, TrainOptions, write_train_manifest

    bound_onednn_cache()          # before the first bf16 matrix multiply of this process
    if resume:
        params = inherit_saved(ctx.params, given_params(ctx), model_dir)
        scheme, layers, amp = params["scheme"], params["layers"], params["amp"]
        tie_embeddings, share_all_embeddings = (params["tie_embeddings"],
                                                params["share_all_embeddings"])
        kwargs = {k: v for k, v in params.items() if k in kwargs}
    arch = {k[5:]: v for k, v in kwargs.items() if k.startswith("arch_")}
    if layers is not None:
        arch["encoder_layers"] = arch["decoder_layers"] = layers
    if arch["d_model"] % arch["n_heads"]:
        raise click.UsageError(f"--d-model {arch['d_model']} is not a multiple of --heads "
                               f"{arch['n_heads']} (each head gets d_model / heads dimensions)")
    scheme_opts = {k: v for k, v in kwargs.items()
                   if not k.startswith(("arch_", "train_", "search_"))}
    model_cfg = ModelConfig(0, 0, **arch, tie_decoder_embeddings=tie_embeddings,
                            share_all_embeddings=share_all_embeddings,
                            scheme=resolve(scheme), scheme_options=scheme_opts)
    opts = TrainOptions(**{k[6:]: v for k, v in kwargs.items() if k.startswith("train_")}, amp=amp)
    search = SearchConfig(**{k[7:]: v for k, v in kwargs.items() if k.startswith("search_")})
    board = TensorBoardLog(tensorboard) if tensorboard else None   # fails before any work
    with distributed.process_group(opts.device):      # joins torchrun's processes, if any
        # rank 0 writes the model directory: it alone holds its lock
        with lock_for_writing(model_dir) if distributed.is_main() else nullcontext():
            trainer = Trainer(data_dir, model_dir, model_cfg, opts, trees_dir=trees_dir,
                              resume=resume, search=search)
            trainer.board = board
            try:
                trainer.run()
            except Stopped as exc:                  # SIGTERM/SIGINT: last.pt saved, no manifest
                sys.exit(exc.exit_status)
            finally:
                if board is not None:
                    board.close()
            if distributed.is_main():
                write_train_manifest(trainer)


# Each registered scheme contributes its own flags; their values reach ModelConfig.scheme_options.
command.params.extend(all_cli_options())
