"""One training run's configuration, in one place and without a command line: the typed
:class:`TrainingRun` (paths, the model with its scheme's entries, training, search) that
``depnmt train`` and :func:`depnmt.train_model` both build and hand to
:func:`depnmt.training.job.run`, which sets it up (:mod:`depnmt.training.setup`) and trains it
(:mod:`depnmt.training.loop`): the same object all the way, its fields under the same names.

Every option of a run is a field with its help: :class:`TrainOptions` here,
:class:`~depnmt.core.searchlimits.SearchConfig`'s search defaults, :data:`ARCH` for the
:class:`~depnmt.model.transformer.ModelConfig`, each scheme's options dataclass
(:mod:`depnmt.model.schemes.options`). :func:`train_params` lists them in ``depnmt train``'s
order as :class:`~depnmt.core.optionspec.Param` (the command layer makes its flags from them); a
run's parameters are named by section (``arch_d_model``, ``train_max_tokens``,
``search_beam``; scheme options by their own names). A run is built from

- a mapping (a ``--config`` YAML file, ``train_model``'s dict; :func:`parse_values`: keys as
  the flags without dashes, values checked as the flag's), or the flags of the command line;
- with ``--resume``, the saved settings of the run it continues (:func:`inherit_saved`), from
  its ``config.json`` read once (:func:`read_saved`; an old one upgraded as it is read);

and validated in one place (:func:`from_params`). ``MODEL_DIR/train.yaml`` records the run's
settings as such a file (:func:`saved_settings`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from depnmt.core.compat import (DEPRECATED, RENAMED_OPTIONS, check_old_layer_list, deprecation,
                                deprecation_message)
from depnmt.core.device import PRECISIONS, train_max_tokens
from depnmt.core.errors import DepnmtError, UsageError
from depnmt.core.log import info, warn
from depnmt.core.optionspec import (AMOUNT, COUNT, DROPOUT, POSITIVE, RATE, SEED, Choice, Folder,
                                    IntRange, Param, convert, field_param, field_params, flag_name,
                                    config_where, option, plain_value, read_yaml_config,
                                    suggestion)
from depnmt.core.schemename import scheme_name
from depnmt.core.searchlimits import SearchConfig, search_config, search_params
from depnmt.core.stagedir import check_distinct
from depnmt.model.schemes.names import SchemeName, parse_name, resolve
from depnmt.model.schemes.registry import OPTION_FIELDS, SCHEMES, declared_options, scheme_entries
from depnmt.model.transformer import ModelConfig
from depnmt.training.compiled import MODES as COMPILE_MODES

if TYPE_CHECKING:
    from depnmt.core.vocab import Vocab
    from depnmt.data.batches import Example
    from depnmt.data.cache import TrainCorpus
    from depnmt.model.schemes.base import Scheme


@dataclass
class TrainOptions:
    """Optimisation and schedule settings (``depnmt train`` flags)."""

    max_tokens: int = option(4096, (
        "padded tokens per batch: sentences × the batch's longest sequence of either side "
        "(source incl. EOS, target incl. BOS/EOS); sentences are sorted by that length so "
        "batches fill up (per process under torchrun). Not given: 4096 on the CPU, 25000 on "
        "a GPU (fewer on one with under 35 GiB)"), POSITIVE)
    batch_sentences: int = option(0, (
        "also close a batch at this many sentences (0 = no limit); combined with --max-tokens, "
        "whichever is reached first: for batches of exactly N sentences (Omote et al.'s "
        "batch sizes) raise --max-tokens to N × the longest pair"), COUNT)
    update_freq: int = option(1, "batches accumulated per update (gradient accumulation; per "
                              "process under torchrun)", POSITIVE)
    lr: float = option(7e-4, "peak learning rate (Adam 0.9/0.98/1e-9)", RATE)
    warmup: int = option(4000, "linear warm-up steps, then inverse square root decay", COUNT)
    label_smoothing: float = option(0.1, "label smoothing epsilon", DROPOUT)
    clip_norm: float = option(0.0, "gradient norm clipping (0 = off)", AMOUNT)
    max_epochs: int = option(0, "stop after this many epochs (0 = no limit)", COUNT)
    max_steps: int = option(0, "stop after this many updates (0 = no limit)", COUNT)
    max_minutes: float = option(0.0, "stop after this wall-clock budget (0 = no limit)", AMOUNT)
    valid_every: int = option(0, "validate every N updates (0 = every epoch)", COUNT)
    save_every: int = option(0, "also save last.pt every N updates (0 = at validation)", COUNT)
    patience: int = option(0, "early stopping: validations without improvement of "
                           "--early-stop-metric (0 = off)", COUNT)
    early_stop_metric: str = option("bleu", (
        "dev metric that selects best.pt and drives --patience: bleu (dev BLEU; the loss when "
        "there are no dev references), acc (dev token accuracy, as Omote et al.) or loss"),
        Choice(["bleu", "acc", "loss"]))
    keep_last: int = option(0, "also keep the model at the last N validations/saves as "
                            "checkpoints/step{UPDATE}.pt, older ones deleted (for `depnmt "
                            "average`; 0 = none)", COUNT)
    valid_beam: int = option(1, "beam size for dev BLEU (1 = greedy, fastest)", POSITIVE)
    valid_max_sentences: int = option(0, "dev sentences decoded for BLEU (0 = all)", COUNT)
    max_len: int = option(250, "skip training pairs longer than this (subwords); also the "
                          "source length limit of translate", POSITIVE)
    seed: int = option(1, "random seed (initialisation, data order)", SEED)
    init_partial: bool = option(False, (
        "with --init-from: copy only the weights whose name and role match (the same layer, "
        "embeddings tied alike, a scheme with the same options) and name the others, where "
        "a model of another architecture is refused by default; other dimensions (d_model, "
        "heads, d_ff) are refused either way"))
    device: str = option("auto", "auto (CUDA when available), cpu, cuda or cuda:N (under "
                         "torchrun: cuda = cuda:LOCAL_RANK)", str)
    precision: str = option("auto", (
        "autocast dtype of the forward pass: auto = bf16 on CPUs with native bf16 matrix "
        "multiplies (avx512_bf16/amx_bf16 in /proc/cpuinfo), fp32 on other CPUs, bf16 on CUDA "
        "GPUs of compute capability 8.0 on (Ampere, Hopper), fp16 with loss scaling on older "
        "ones (bf16 there is emulated: slow, with a warning); loss, softmaxes and optimizer "
        "state stay fp32"), Choice(PRECISIONS), envvar="DEPNMT_PRECISION")
    amp: bool = option(True, "--no-amp is --precision fp32 (older flag; with another "
                       "--precision it is refused)", flag="--amp/--no-amp")
    compile: str = option("off", (
        "dynamic: run the training step's forward pass and loss through torch.compile with "
        "dynamic shapes (the batches' sizes and lengths are symbols of one graph; a batch of "
        "one sentence compiles once more), counted in metrics.jsonl (compiled_graphs, "
        "recompiles) with a warning when recompiles keep coming; the first updates wait for "
        "the compiler. For GPUs (slower on a CPU). Checkpoints are the plain model's; "
        "validation stays uncompiled; --resume may change it. off: no compiling"),
        Choice(COMPILE_MODES))
    log_every: int = option(100, "updates between metrics.jsonl lines", POSITIVE)
    workers: int = option(-1, (
        "data-loader processes that read, collate and compute the tree features of the "
        "batches ahead of the training step (per process under torchrun; 0 = in the training "
        "process). -1: up to 4 on a GPU, leaving a core to each training process; 1 on a CPU "
        "of 2 cores or more; at most 64 (more is never faster, and each is a process with "
        "its own memory). Batches and results are the same for any number"),
        IntRange(min=-1, max=64))


# the fields of the model config that are options: name -> (flag, values, help)
ARCH: dict[str, tuple[str, Any, str]] = {
    "d_model": ("--d-model", POSITIVE, "model (embedding) dimension d_model"),
    "n_heads": ("--heads", POSITIVE, "attention heads"),
    "d_ff": ("--d-ff", POSITIVE, "feed-forward inner dimension"),
    "encoder_layers": ("--encoder-layers", POSITIVE, "encoder layers"),
    "decoder_layers": ("--decoder-layers", POSITIVE, "decoder layers"),
    "dropout": ("--dropout", DROPOUT, "dropout on embeddings, sublayer outputs and FFN"),
    "attention_dropout": ("--attention-dropout", DROPOUT, "dropout on attention weights"),
    "tie_decoder_embeddings": ("--tie-embeddings/--no-tie-embeddings", bool,
                               "share the decoder's input embedding and output projection"),
    "share_all_embeddings": ("--share-all-embeddings", bool,
                             "also share the source embedding (needs `depnmt bpe --joint`)"),
}
# what one invocation asks for, not a setting of the run: train.yaml does not record these
ONE_OFF = ("resume", "resume_on_changed_data", "check_settings")
# what --check-settings does not compare (:func:`setting_changes`): the folders (paths, not
# settings: the same files elsewhere are the same data), the one-off flags, and how a run runs
# rather than what it trains (the hardware; options that change no numbers)
NOT_SETTINGS = ("data_dir", "model_dir", "trees_dir", "init_from", "tensorboard", *ONE_OFF,
                "train_device", "train_precision", "train_amp", "train_compile",
                "train_workers", "train_log_every", "train_save_every")
# section prefix of a run's parameters -> the config.json section --resume reads it from
SECTIONS = {"arch_": "model", "train_": "training", "search_": "search"}
SCHEME_HELP = ("positional scheme: abs (keep the absolute PE) or noabs (drop it) and parts "
               "joined by '+', e.g. abs+dep+rel, abs+dbsa-enc, abs+gps-all, noabs+dep (the "
               "parts: see above)")
INPUTS = [
    Param("data_dir", ("-i", "--input"), None, "folder written by `depnmt bpe` (required; "
          "--resume: the folder the model was trained on when not given)", Folder(),
          metavar="BPE_DIR"),
    Param("model_dir", ("-o", "--output"), None, "where the model directory (config, "
          "vocabularies, checkpoints, metrics) goes", Folder(), required=True,
          metavar="MODEL_DIR"),
    Param("trees_dir", ("-t", "--trees"), None, "folder written by `depnmt parse` (needed by "
          "tree-based schemes); --resume: the folder the model was trained on when not given",
          Folder()),
    Param("scheme", ("--scheme",), "abs", SCHEME_HELP),
]
LAYERS = Param("layers", ("--layers",), None, "shortcut: encoder and decoder layers", POSITIVE)
OUTPUTS = [
    Param("resume", ("--resume",), False, "continue from MODEL_DIR/checkpoints/last.pt "
          "(optimizer, schedule, RNG and data order included); flags not given take the values "
          "the model was trained with (-t too); refused when the data differs from what the "
          "model was trained on", bool),
    Param("resume_on_changed_data", ("--resume-on-changed-data",), False, "with --resume: "
          "continue even though the training data (-i's text, -t's trees) differs from what "
          "the model was trained on, e.g. to fine-tune mid-run; metrics.jsonl records the "
          "change (a data_changed record) and config.json the new data", bool),
    Param("init_from", ("--init-from",), None, "start from the weights of this trained model "
          "(its folder: best.pt, else last.pt; or one of its checkpoints), with a fresh "
          "optimizer and schedule: its architecture must be this run's but for the schemes "
          "added (their weights start as in a fresh run) or removed (see --init-partial); "
          "its vocabularies and codes must be the data's", metavar="MODEL"),
    Param("tensorboard", ("--tensorboard",), None, "also write training loss, learning rate, "
          "tokens/s and the dev metrics as TensorBoard scalars to this folder (needs `pip "
          "install 'depnmt[tensorboard]'`)", Folder()),
    Param("check_settings", ("--check-settings",), False, "train nothing: compare the settings "
          "given (flags, --config) with those MODEL_DIR's run was trained with (its "
          "config.json) and exit, 0 when they are the same, else one line naming each that "
          "differs (exit 2); folders, the device and options that change no numbers are not "
          "compared. The comparison recipes run it before they reuse a finished model", bool),
]


@dataclass
class TrainingRun:
    """One training run, the one object from its configuration to the trainer.

    Its configuration (:func:`from_params`): where its data and model go, the model (its
    ``schemes`` entries complete with the options each declares), the training and search
    settings, what ``train.yaml`` records (:func:`saved_settings`) and, on ``--resume``, the
    model's ``config.json`` as read once (``saved``). What the set-up adds before the first
    update (:func:`depnmt.training.setup.prepare_run`): the vocabularies (and their sizes in
    ``model``), the trees' parsers, the data and its provenance, the learned options (in
    ``model``), the schemes built from them and the ``config.json`` written."""

    data_dir: Path
    model_dir: Path
    model: ModelConfig                  # completed by the set-up: vocabularies, learned options
    training: TrainOptions
    search: SearchConfig
    trees_dir: Path | None = None
    resume: bool = False
    tensorboard: Path | None = None
    settings: dict[str, Any] | None = None          # what train.yaml records (None: no file)
    init_from: Path | None = None                   # a trained model to start from (warmstart)
    resume_on_changed_data: bool = False
    saved: dict[str, Any] | None = None             # --resume: the model's config.json, read once
    # -- set up by depnmt.training.setup.prepare_run --
    src_vocab: Vocab | None = None
    tgt_vocab: Vocab | None = None
    tree_parsers: dict[str, dict] = field(default_factory=dict)   # side -> parser settings
    train_data: TrainCorpus | None = None           # read from the cache, batch by batch
    dev_data: list[Example] = field(default_factory=list)
    dev_refs: list[str] = field(default_factory=list)
    schemes: list[Scheme] = field(default_factory=list)   # built once: checked, learned
    provenance: dict[str, Any] = field(default_factory=dict)  # what it trains on (provenance)
    data_changed: list[str] = field(default_factory=list)     # resumed on other data: what
    settings_changed: list[str] = field(default_factory=list)  # resumed with other settings
    digests: dict[Path, str] = field(default_factory=dict)    # sha256 of the files read
    written: dict[str, Any] | None = None           # the config.json rank 0 wrote

    @property
    def parser_settings(self) -> dict | None:
        """The parser translate must run: only for schemes that read source trees (not DBSA)."""
        needs = any(SCHEMES[n].needs_source_trees for n in self.model.scheme_names)
        return self.tree_parsers.get("src") if needs else None


def model_params() -> list[Param]:
    """The model config's options (:data:`ARCH`), defaults from :class:`ModelConfig`."""
    defaults = {f.name: f.default for f in fields(ModelConfig)}
    return [Param(f"arch_{name}", (flag,), defaults[name], help_, kind, show_default=True)
            for name, (flag, kind, help_) in ARCH.items()]


def scheme_option_params() -> list[Param]:
    """Every registered scheme's options, one each, and the hidden 0.1.0 names of
    :data:`~depnmt.core.compat.RENAMED_OPTIONS` (``--gps-layers``: 0-based)."""
    params = []
    for name in declared_options():
        f = OPTION_FIELDS[name][0]
        params.append(field_param(f, show_default=f.default is not None))
    return params + [Param(old, (flag_name(old),), None, f"0.1.0 spelling of {flag_name(new)}, "
                           f"0-based (deprecated)", check=check_old_layer_list, hidden=True)
                     for old, (new, _) in RENAMED_OPTIONS.items()]


def core_params() -> list[Param]:
    """The options of a training run besides the schemes', in ``depnmt train``'s order."""
    return [*INPUTS, *model_params(), LAYERS,
            *field_params(TrainOptions, "train_", show_default=True),
            *search_params("train"), *OUTPUTS]


def train_params() -> list[Param]:
    """Every option of a training run, in ``depnmt train``'s order."""
    return [*core_params(), *scheme_option_params()]


# -- a run's parameters from a mapping ---------------------------------------------------------
def parse_values(values: Mapping[str, Any], source: str) -> tuple[dict[str, Any], set[str]]:
    """A run's parameters (name -> value, every option: the default where ``values`` gives
    none) and the names of those given, from ``values`` (keys as the flags without dashes,
    ``max-tokens`` or ``max_tokens``; 0.1.0 keys warn), as ``depnmt train --config`` reads a
    file named ``source``: an unknown or repeated key, a bad value or a missing required option
    is a DepnmtError naming it. An environment variable of an option (``$DEPNMT_PRECISION``)
    sets it where ``values`` does not, as on the command line, where the file wins over the
    variable too (:class:`~depnmt.commands.fields.EnvironmentDefault`)."""
    params = train_params()
    by_key = {key: p for p in params for key in p.keys}
    old_keys = {old[2:]: new.split("/")[-1][2:] for old, new in DEPRECATED["train"].items()}
    out = {p.name: p.default for p in params}
    keys: dict[str, str] = {}                           # parameter name -> the key that set it
    for key, value in values.items():
        where = config_where(values, key, source)       # FILE:LINE
        param = _param_of(str(key), by_key, old_keys, where)
        if param.name in keys:
            also = f" (also as '{keys[param.name]}')" if keys[param.name] != key else ""
            raise DepnmtError(f"{where}: option '{key}' is given twice{also}")
        keys[param.name] = key
        if value is not None:                           # `key:` with no value: the default
            out[param.name] = _checked(param, value, f"{key} in {where}")
    given = {name for name in keys if values[keys[name]] is not None}
    for param in params:
        if param.envvar and os.environ.get(param.envvar) and param.name not in given:
            out[param.name] = _checked(param, os.environ[param.envvar], param.envvar)
            given.add(param.name)
        if param.required and param.name not in given:
            raise DepnmtError(f"Missing option {' / '.join(map(repr, param.flags))}.")
    return out, given


def _param_of(key: str, by_key: dict[str, Param], old_keys: dict[str, str],
              source: str) -> Param:
    """The option a key sets; an old spelling gives its new option, with a warning."""
    spelled = key.replace("_", "-")
    if spelled not in by_key and spelled in old_keys:
        warn(f"{source}: {deprecation_message(repr(spelled), repr(old_keys[spelled]))}")
        spelled = old_keys[spelled]
    if spelled not in by_key:
        raise DepnmtError(f"{source}: unknown option '{key}'{suggestion(key, by_key)}")
    return by_key[spelled]


def _checked(param: Param, value: Any, where: str) -> Any:
    """``value`` converted and checked as the option's flag would be; a DepnmtError worded as
    the command line words a bad value."""
    try:
        return convert(param, value)
    except ValueError as exc:
        flag = next(f for f in reversed(param.flags) if f.startswith("-")).split("/")[0]
        raise DepnmtError(f"Invalid value for '{flag}' ({where}): {exc}") from None


# -- the run from its parameters ---------------------------------------------------------------
def from_params(params: dict[str, Any], given: set[str]) -> TrainingRun:
    """The run the parameters ``params`` describe (``given``: the names of those the user gave;
    with ``resume`` the others take the saved run's values, read once from its ``config.json``:
    :func:`inherit_saved`), in today's terms (a 0.1.0 scheme name or option warns,
    :func:`today_terms`) and checked: a :class:`~depnmt.core.errors.UsageError` for options that do
    not go together."""
    from depnmt.storage.modeldir import CONFIG
    saved = read_saved(Path(params["model_dir"])) if params["resume"] else None
    changed = (setting_changes(params, given, saved, Path(params["model_dir"]) / CONFIG)
               if saved is not None else [])
    params = (inherit_saved(params, given, params["model_dir"], saved) if saved is not None
              else dict(params))
    params = precision_of(params, given)
    check_data_dir(params, given)
    if not params["resume"] and "train_max_tokens" not in given:      # the device's default
        params["train_max_tokens"] = train_max_tokens(params["train_device"])
    layers = params.pop("layers")
    if layers is not None:
        params["arch_encoder_layers"] = params["arch_decoder_layers"] = layers
    name = scheme_of(params, given, saved)          # the one parse of a scheme's name
    params, given = today_terms(params, given, name)
    sections = {prefix: {k[len(prefix):]: v for k, v in params.items() if k.startswith(prefix)}
                for prefix in SECTIONS}
    arch = sections["arch_"]
    if arch["d_model"] % arch["n_heads"]:
        raise UsageError(f"--d-model {arch['d_model']} is not a multiple of --heads "
                         f"{arch['n_heads']} (each head gets d_model / heads dimensions)")
    schemes = scheme_entries_of(params["scheme"], params, given, name.components)
    check_together(params, given, saved)
    run = TrainingRun(
        params["data_dir"], params["model_dir"], ModelConfig(0, 0, **arch, schemes=schemes),
        TrainOptions(**sections["train_"]), search_config(**sections["search_"]),
        params["trees_dir"], params["resume"], params["tensorboard"],
        saved_settings(params, name.components),
        None if params["resume"] or not params.get("init_from") else Path(params["init_from"]),
        bool(params.get("resume_on_changed_data")), saved)
    run.settings_changed = changed
    return run


def precision_of(params: dict[str, Any], given: set[str]) -> dict[str, Any]:
    """The run's parameters with ``--no-amp`` (the older spelling of ``--precision fp32``) as
    what it means: ``train_precision`` fp32, ``train_amp`` on, so that ``config.json`` records
    the precision the run trains in. Given with another ``--precision``, a UsageError; a
    ``--precision`` given on ``--resume`` of a run trained with ``--no-amp`` (its saved
    ``amp`` false) takes effect."""
    if params["train_amp"]:
        return params
    precision = params["train_precision"]
    if "train_amp" in given and "train_precision" in given and precision not in ("fp32", "auto"):
        raise UsageError(f"--no-amp is --precision fp32 (its older spelling), and --precision "
                         f"{precision} is given too: give one of them")
    if "train_precision" in given and "train_amp" not in given:
        return {**params, "train_amp": True}
    return {**params, "train_precision": "fp32", "train_amp": True}


def check_data_dir(params: dict[str, Any], given: set[str]) -> None:
    """``-i`` is given, or on ``--resume`` recorded by the model and still there."""
    if params["data_dir"] is None:
        raise UsageError("Missing option '-i' / '--input' (the folder written by `depnmt bpe`; "
                         "--resume takes the model's own when its config.json records it)")
    if params["resume"] and "data_dir" not in given and not Path(params["data_dir"]).is_dir():
        raise DepnmtError(f"{params['model_dir']}: was trained on the bpe folder "
                          f"{params['data_dir']}, which is gone; pass -i BPE_DIR")


def check_together(params: dict[str, Any], given: set[str],
                   saved: dict[str, Any] | None = None) -> None:
    """The folders and one-off flags of a run go together: the model folder is none of the
    inputs, ``--init-from`` (and ``--init-partial``) and ``--resume-on-changed-data`` each with
    the right kind of run. ``saved``: the resumed run's ``config.json``, whose own
    ``--init-from`` (its ``train.yaml`` names it) a resume may be given."""
    inputs = {"bpe folder (-i)": params["data_dir"], "parse folder (-t)": params["trees_dir"]}
    if params["model_dir"] is not None:
        check_distinct(Path(params["model_dir"]),
                       {what: Path(path) for what, path in inputs.items() if path is not None})
    if params["resume"] and params.get("init_from") and "init_from" in given \
            and not started_from(saved, params["init_from"]):
        raise UsageError("--init-from starts a new run from a trained model and --resume "
                         "continues this one: give one of them")
    if params["train_init_partial"] and "train_init_partial" in given \
            and not params.get("init_from"):
        raise UsageError("--init-partial goes with --init-from (it says which weights a new run "
                         "copies from the trained model)")
    if params.get("resume_on_changed_data") and not params["resume"]:
        raise UsageError("--resume-on-changed-data goes with --resume (a new run records the "
                         "data it is given)")


def started_from(saved: dict[str, Any] | None, init_from: str | Path) -> bool:
    """Whether the run of ``saved`` (its ``config.json``) was started from ``init_from`` (a
    model folder or checkpoint, as ``--init-from`` names it), as its provenance records."""
    provenance = (saved or {}).get("provenance")
    record = provenance.get("init_from") if isinstance(provenance, dict) else None
    if not isinstance(record, dict):
        return False
    named = Path(init_from).resolve()
    return any(isinstance(record.get(key), str) and Path(record[key]).resolve() == named
               for key in ("folder", "checkpoint"))


def load(config: Mapping[str, Any] | str | Path) -> TrainingRun:
    """The run a ``train.yaml``-style mapping or YAML file describes (:func:`parse_values`)."""
    return from_params(*load_params(config))


def load_params(config: Mapping[str, Any] | str | Path) -> tuple[dict[str, Any], set[str]]:
    """The parameters (and the names of those given) of a ``train.yaml``-style mapping or YAML
    file (:func:`parse_values`)."""
    if isinstance(config, Mapping):
        values, source = config, "the train_model() config"
    elif not isinstance(config, (str, os.PathLike)):
        raise TypeError(f"train_model() takes a dict of train options or the path of a YAML "
                        f"file, not {type(config).__name__}")
    else:
        values, source = read_yaml_config(str(config)), str(config)
    return parse_values(values, source)


def read_saved(model_dir: Path) -> dict[str, Any] | None:
    """``--resume``: the model's ``config.json``, in today's form (the one read of it in a run,
    :func:`depnmt.storage.modeldir.read_config`, upgrades an old one); None when there is none (the
    missing checkpoint is reported before the run starts)."""
    from depnmt.storage.modeldir import CONFIG, read_config
    return read_config(model_dir, upgrade=True) if (model_dir / CONFIG).exists() else None


def inherit_saved(params: dict, given: set[str], model_dir: Path | None = None,
                  saved: dict[str, Any] | None = None) -> dict:
    """``--resume``: every option not given takes the value the model was trained with (its
    ``config.json``, ``saved`` when it was read, else read here: architecture, scheme and its
    options, training and search settings, the trees folder ``-t``), so `depnmt train -i D -o M
    --resume` continues the run as it was configured; options that are given (e.g. a larger
    ``--max-steps``) override it."""
    from depnmt.storage.modeldir import CONFIG
    model_dir = Path(model_dir if model_dir is not None else params["model_dir"])
    saved = saved if saved is not None else read_saved(model_dir)
    if saved is None:
        return dict(params)                 # the trainer reports the missing checkpoint
    values, where = saved_values(saved)
    # a hand-edited config.json: each value taken is checked as the option's flag would be
    by_name = {param.name: param for param in train_params()}
    out = {name: (_checked(by_name[name], values[name],
                           f"{where[name]} in {model_dir / CONFIG}")
                  if name in by_name and values[name] is not None else values[name])
           if name in values and name not in given else value
           for name, value in params.items()}
    if "layers" in given:
        out["arch_encoder_layers"] = out["arch_decoder_layers"] = params["layers"]
    data = saved.get("data") if isinstance(saved.get("data"), dict) else {}
    for name, key in (("data_dir", "bpe_dir"), ("trees_dir", "trees_dir")):
        if name not in given and isinstance(data.get(key), str):
            out[name] = Path(data[key])     # trees gone: prepare_run says so if it reads them
    return out


def saved_values(saved: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """A model's ``config.json`` (``saved``, in today's form) as a run's parameters: name ->
    the value it records (the scheme and its options, every model, training and search
    setting), and name -> where it records it (``model``, ``training.lr``)."""
    values = saved_scheme_values(saved["model"])   # today's scheme name and option names
    where = {name: "model" for name in values}
    for prefix, section in SECTIONS.items():
        values.update({prefix + k: v for k, v in saved.get(section, {}).items()})
        where.update({prefix + k: f"{section}.{k}" for k in saved.get(section, {})})
    return values, where


def check_settings(params: dict[str, Any], given: set[str]) -> None:
    """``--check-settings``: the settings given (``params``, ``given``: as :func:`from_params`
    takes them) must be those the model in ``params["model_dir"]`` was trained with (its
    ``config.json``; :func:`setting_changes`), else a DepnmtError naming each that differs,
    both values, and what to do; nothing is trained or written. So a script that skips a
    finished model folder (the comparison recipes) does not take a model trained with other
    settings for the one it would train now."""
    from depnmt.storage.modeldir import CONFIG
    model_dir = Path(params["model_dir"])
    saved = read_saved(model_dir)
    if saved is None:
        raise DepnmtError(f"{model_dir}: holds no trained model (no {CONFIG}): no settings to "
                          f"check")
    changes = setting_changes(params, given, saved, model_dir / CONFIG)
    if changes:
        raise DepnmtError(f"{model_dir}: trained with {'; '.join(changes)}: give other settings "
                          f"another model folder (a recipe: another work folder, DEPNMT_WORK), "
                          f"or remove {model_dir} and what was made from it to "
                          f"train it again")
    info(f"{model_dir}: trained with the settings given")


def setting_changes(params: dict[str, Any], given: set[str], saved: dict[str, Any],
                    config: Path) -> list[str]:
    """The settings given that differ from those the model of ``saved`` (its ``config.json``,
    the file ``config``, in today's form) was trained with, in ``depnmt train``'s order, each
    as ``--FLAG RECORDED, not GIVEN``; empty when none does. Values are compared as the
    options take them (``1e-3`` is ``0.001``; ``--layers N`` is both layer counts; a 0.1.0
    spelling is today's). Not compared: :data:`NOT_SETTINGS`, options left at their defaults,
    and what the model does not record (an option of a scheme it does not use, or one newer
    than the depnmt that trained it)."""
    params, given = dict(params), set(given)
    if "layers" in given:
        params["arch_encoder_layers"] = params["arch_decoder_layers"] = params["layers"]
        given |= {"arch_encoder_layers", "arch_decoder_layers"}
    params, given = today_terms(params, given)
    values, where = saved_values(saved)
    changes = []
    for param in train_params():
        name = param.name
        if name not in given or name in NOT_SETTINGS or values.get(name) is None:
            continue
        was = _checked(param, values[name], f"{where[name]} in {config}")
        if was != params[name]:
            changes.append(f"--{param.keys[0]} {shown(was)}, not {shown(params[name])}")
    return changes


def shown(value: Any) -> str:
    """A setting's value as a message shows it (booleans as ``true``/``false``)."""
    return str(value).lower() if isinstance(value, bool) else str(plain_value(value))


def saved_scheme_values(model: dict[str, Any]) -> dict[str, Any]:
    """A saved model config's scheme (in today's form: read by
    :func:`~depnmt.storage.modeldir.read_config`) as a run's parameters: ``scheme`` (today's name,
    what
    ``train.yaml`` records) and every scheme option's saved value."""
    schemes = model["schemes"]
    return {"scheme": scheme_name(schemes),
            **{k: v for s in schemes for k, v in s["options"].items()}}


def scheme_of(params: dict[str, Any], given: set[str], saved: dict[str, Any] | None
              ) -> SchemeName:
    """What the run's scheme is: the name given, parsed (:func:`parse_name`); on ``--resume``
    without ``--scheme``, the saved model's components as they are (not named and parsed
    back; an unknown one is the error its name gives)."""
    components = [entry["name"] for entry in saved["model"]["schemes"]] if saved else []
    if saved is None or "scheme" in given or not all(n in SCHEMES for n in components):
        return parse_name(params["scheme"])     # (a hand-edited unknown one: its error)
    return SchemeName(components, {}, scheme_name(saved["model"]["schemes"]))


def today_terms(params: dict[str, Any], given: set[str], name: SchemeName | None = None
                ) -> tuple[dict[str, Any], set[str]]:
    """A run's parameters (and the names of those given) in today's terms: the scheme's name
    (a 0.1.0 spelling: warned, replaced by today's), the options its variants or 0.1.0
    spelling set where they are not given, and the 0.1.0 options (``--gps-layers``: warned)
    under their new names and values. ``name``: what the scheme's name means, when parsed."""
    name = name or parse_name(params["scheme"])
    out = {**params, "scheme": name.canonical}
    out.update({k: v for k, v in name.options.items() if k not in given})
    given = set(given)
    for old, (new, convert_old) in RENAMED_OPTIONS.items():
        value = out.pop(old, None)
        if old in given and value is not None:
            if new in given:
                raise UsageError(f"{flag_name(old)} (0-based, the old spelling of "
                                 f"{flag_name(new)}) and {flag_name(new)} are the same "
                                 f"option: give {flag_name(new)} once")
            deprecation(f"{flag_name(old)} {value}", f"{flag_name(new)} {convert_old(value)}")
            out[new] = convert_old(value)
            given.add(new)
        given.discard(old)
    return out, given


def scheme_entries_of(scheme: str, values: dict, given: set[str],
                      components: list[str] | None = None) -> list[dict]:
    """The model config's ``schemes`` for the scheme name ``scheme`` (its ``components`` when
    parsed) from the scheme options' values; a warning for each option given that none of the
    components uses."""
    names = resolve(scheme) if components is None else components
    for option_name, users in declared_options().items():
        if option_name in given and not set(users) & set(names):
            warn(f"{flag_name(option_name)} is ignored: it is an option of {', '.join(users)}, "
                 f"which --scheme {scheme} does not use")
    return scheme_entries(names, values)


def saved_settings(params: dict[str, Any], components: list[str] | None = None
                   ) -> dict[str, Any]:
    """What ``train.yaml`` records: the run's settings as a ``--config`` file (key: the
    option's first long flag without dashes, in ``depnmt train``'s order; only the options of
    the schemes the run uses, its ``components``; paths absolute; None values left out; not
    the one-off :data:`ONE_OFF`)."""
    used = set(resolve(params["scheme"]) if components is None else components)
    unused = {name for name, users in declared_options().items() if not used & set(users)}
    return {p.keys[0]: plain_value(params[p.name]) for p in train_params()
            if p.name not in unused and p.name not in ONE_OFF and p.keys
            and params.get(p.name) is not None}
