"""One training run's set-up: everything before the first update, in the order it happens.

fairseq splits its ``train.py`` (set-up, epochs) from its ``Trainer`` (model, optimizer, one
step); JoeyNMT's ``training.py`` likewise keeps data and config loading outside its
``TrainManager``. Here :func:`prepare_run` does the set-up and returns a :class:`TrainingRun`
(plain data, no model), :class:`depnmt.train.Trainer` owns the model and the loop, and
:func:`depnmt.training.run` joins them with what surrounds a run (process group, the model
directory's lock, SIGTERM/SIGINT/SIGHUP, TensorBoard, the manifest):

1. the model directory: a fresh run must not overwrite a trained model, ``--resume`` needs one;
   a fresh run clears what a run killed before its first ``last.pt`` left;
2. the data folder's manifests and vocabularies; the model config completed with the
   vocabulary sizes (``--resume``: the saved config's learned options kept), every scheme's
   options checked against the model (:func:`~depnmt.model.schemes.registry.check_schemes`);
3. the parsers whose trees the schemes read; the training pairs with their trees as a
   :class:`~depnmt.datacache.TrainCorpus` over the data folder's cache (built on first use,
   on every core), the dev examples in memory;
4. **the learn step**: options the schemes learn from the training examples (GPS's label
   vocabulary, :func:`~depnmt.model.schemes.registry.learn_options`) go into the model config,
   before any model exists;
5. ``config.json``, the vocabularies and the segmenter written into the model directory, and
   ``train.yaml``: the run's settings as a ``depnmt train --config`` file.

Tree features are computed later, by the model's own scheme stack (``Trainer``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from . import distributed as dist
from .data import Example, attach_trees, load_parallel
from .datacache import TrainCorpus, open_corpus
from .errors import DepnmtError
from .log import warn
from .manifest import load_manifest
from .model.schemes.base import Scheme
from .model.schemes.registry import SCHEMES, check_schemes, learn_options, with_learned
from .model.transformer import ModelConfig
from .modeldir import (check_same_subwords, checkpoint_dir, load_vocabs, read_config,
                       save_vocabs, subword_digests, write_config)
from .runconfig import TrainOptions
from .search import SearchConfig
from .textio import read_lines
from .vocab import Vocab

METRICS = "metrics.jsonl"
SETTINGS = "train.yaml"      # the run's `depnmt train` options, read back by `train --config`
SIDE_NAMES = {"src": "source", "tgt": "target"}


@dataclass
class TrainingRun:
    """What a training run works on, set up by :func:`prepare_run`."""

    data_dir: Path
    model_dir: Path
    trees_dir: Path | None
    opts: TrainOptions
    search: SearchConfig
    resume: bool
    model_cfg: ModelConfig                          # complete: vocabularies, learned options
    src_vocab: Vocab
    tgt_vocab: Vocab
    tree_parsers: dict[str, dict] = field(default_factory=dict)   # side -> parser settings
    train_data: TrainCorpus | None = None           # read from the cache, batch by batch
    dev_data: list[Example] = field(default_factory=list)
    dev_refs: list[str] = field(default_factory=list)
    settings: dict[str, Any] | None = None          # what train.yaml records (None: no file)
    schemes: list[Scheme] = field(default_factory=list)   # built once: checked, learned
    init_from: Path | None = None                   # a trained model to start from (warmstart)

    @property
    def parser_settings(self) -> dict | None:
        """The parser translate must run: only for schemes that read source trees (not DBSA)."""
        needs = any(SCHEMES[n].needs_source_trees for n in self.model_cfg.scheme_names)
        return self.tree_parsers.get("src") if needs else None


def prepare_run(data_dir: Path, model_dir: Path, model_cfg: ModelConfig | None,
                opts: TrainOptions,
                trees_dir: Path | None = None, resume: bool = False,
                search: SearchConfig | None = None,
                settings: dict[str, Any] | None = None,
                init_from: Path | None = None) -> TrainingRun:
    """Steps 1–5 of the module docstring; rank 0 writes the model directory. ``settings``:
    the options of ``depnmt train`` that :data:`SETTINGS` records (None: no file);
    ``init_from``: a trained model the new run starts from (:mod:`depnmt.warmstart`)."""
    check_model_dir(model_dir, resume)
    if dist.is_main() and not resume:   # what a run killed before its first last.pt left
        for leftover in (model_dir / METRICS, checkpoint_dir(model_dir) / "best.pt"):
            leftover.unlink(missing_ok=True)
    bpe = load_manifest(data_dir, "bpe")
    if resume:
        check_same_subwords(data_dir, model_dir)
    src_vocab, tgt_vocab = load_vocabs(data_dir)
    cfg, schemes = model_config(data_dir, model_dir, model_cfg, resume, (src_vocab, tgt_vocab))
    run = TrainingRun(data_dir, model_dir, trees_dir, opts, search or SearchConfig(), resume,
                      cfg, src_vocab, tgt_vocab, settings=settings, init_from=init_from)
    run.tree_parsers = tree_parsers(cfg, trees_dir)
    run.train_data = load_split(run, "train", bpe, training=True)
    run.dev_data = load_split(run, "dev", bpe, training=False)
    cfg.schemes = learn_options(cfg.schemes, run.train_data, schemes)     # the learn step
    run.schemes = schemes                           # the model is built from these (learned)
    prepare_dir = Path(bpe["prepare_dir"])
    ref = prepare_dir / f"dev.raw.{bpe['tgt_lang']}"
    run.dev_refs = read_lines(ref) if ref.exists() and run.dev_data else []
    if dist.is_main():
        write_model_dir(run, bpe, load_manifest(prepare_dir, "prepare", verify=False))
    dist.barrier()
    return run


def check_model_dir(model_dir: Path, resume: bool) -> None:
    last = checkpoint_dir(model_dir) / "last.pt"
    if resume and not last.exists():
        raise DepnmtError(f"{model_dir}: --resume given but there is no {last}")
    if not resume and last.exists():
        raise DepnmtError(f"{model_dir}: already holds a trained model; pass --resume to "
                          f"continue it or choose another -o folder")


def model_config(data_dir: Path, model_dir: Path, cfg: ModelConfig | None, resume: bool,
                 vocabs: tuple[Vocab, Vocab]) -> tuple[ModelConfig, list[Scheme]]:
    """The run's model config: ``cfg`` (``--resume``: the saved one when None, and the saved
    learned options either way) with the vocabulary sizes, checked; and its schemes, built
    for the check (the learn step uses them)."""
    if resume:
        saved = ModelConfig.from_dict(read_config(model_dir)["model"])
        cfg = cfg or saved
        cfg.schemes = with_learned(cfg.schemes, saved.schemes)
    src_vocab, tgt_vocab = vocabs
    cfg.src_vocab_size, cfg.tgt_vocab_size = len(src_vocab), len(tgt_vocab)
    if cfg.share_all_embeddings and src_vocab != tgt_vocab:
        raise DepnmtError(f"{data_dir}: --share-all-embeddings needs a joint vocabulary "
                          f"(run `depnmt bpe --joint`)")
    return cfg, check_schemes(cfg.schemes, cfg.dims)


def tree_parsers(cfg: ModelConfig, trees_dir: Path | None) -> dict[str, dict]:
    """Parser settings of each side whose trees training reads: ``src`` when a scheme reads
    or learns from source trees, ``tgt`` when one learns from target trees."""
    classes = [SCHEMES[n] for n in cfg.scheme_names]
    needed = {"src": any(c.needs_source_trees or c.trains_on_source_trees for c in classes),
              "tgt": any(c.needs_target_trees for c in classes)}
    sides = [side for side, need in needed.items() if need]
    if not sides:
        return {}
    if trees_dir is None:
        raise DepnmtError(f"scheme {'+'.join(cfg.scheme_names)} needs "
                          f"{' and '.join(SIDE_NAMES[s] for s in sides)} trees: pass --trees "
                          f"PARSE_DIR (made by `depnmt parse --side "
                          f"{sides[0] if len(sides) == 1 else 'both'}`)")
    parsed = load_manifest(trees_dir, "parse", verify=False)
    out = {}
    for side in sides:
        settings = (parsed.get("parser") or {}).get(side)
        if settings is None:
            raise DepnmtError(f"{trees_dir}: has no {SIDE_NAMES[side]}-side trees (parse with "
                              f"--side {side})")
        out[side] = settings
    return out


def load_split(run: TrainingRun, split: str, bpe: dict, training: bool) -> Sequence[Example]:
    """The examples of ``split`` with the trees the schemes read (no features yet): the
    training split read from the cache (:func:`depnmt.datacache.open_corpus`, pairs over
    ``--max-len`` left out), the others (small) loaded in memory (longer ones truncated)."""
    langs = {"src": bpe["src_lang"], "tgt": bpe["tgt_lang"]}
    src = run.data_dir / f"{split}.{langs['src']}"
    tgt = run.data_dir / f"{split}.{langs['tgt']}"
    if not src.exists():
        if training:
            raise DepnmtError(f"{src}: missing; the bpe folder has no training data")
        return []
    max_len = run.opts.max_len
    trees = {side: run.trees_dir / f"{split}.{langs[side]}.conllu" for side in run.tree_parsers}
    if training:
        for path in (tgt, *trees.values()):
            if not path.is_file():
                raise DepnmtError(f"{path}: missing (needed to train)")
        corpus, dropped = open_corpus(run.data_dir, split, langs, {"src": run.src_vocab,
                                                                   "tgt": run.tgt_vocab},
                                      trees, max_len)
        if dropped:
            warn(f"{src}: {dropped} training pairs longer than --max-len {max_len} subwords "
                 f"skipped")
        return corpus
    examples, _ = load_parallel(src, tgt, run.src_vocab, run.tgt_vocab, max_len)
    for side, path in trees.items():
        attach_trees(examples, path, side)
    return examples


def write_model_dir(run: TrainingRun, bpe: dict, prepare: dict) -> None:
    """``config.json`` (everything translate needs), vocabularies, segmenter and
    :data:`SETTINGS`."""
    from .bpe import Segmenter
    save_vocabs(run.model_dir, (run.src_vocab, run.tgt_vocab))
    for side in ("src", "tgt"):
        Segmenter.from_dir(run.data_dir, side).save(run.model_dir, side)
    write_config(run.model_dir, {
        "model": run.model_cfg.to_dict(),
        "src_lang": bpe["src_lang"], "tgt_lang": bpe["tgt_lang"],
        "tokenizers": prepare["tokenizers"],
        "parser": {"src": run.parser_settings, "training": run.tree_parsers},
        "subwords": bpe.get("options", {}),
        "max_src_len": run.opts.max_len,
        "search": asdict(run.search),
        "training": asdict(run.opts),
        "data": {"bpe_dir": str(run.data_dir.resolve()),
                 "trees_dir": str(run.trees_dir.resolve()) if run.trees_dir else None},
        "files": subword_digests(run.model_dir),
    })
    if run.settings is not None:
        write_settings(run.model_dir / SETTINGS, run.settings)


def write_settings(path: Path, settings: dict[str, Any]) -> None:
    """``settings`` (option name -> value) as the YAML file ``depnmt train --config`` reads."""
    import yaml
    from .textio import atomic_open
    with atomic_open(path) as fh:
        fh.write(f"# this run's settings: `depnmt train --config {path} -o DIR` trains the "
                 f"same into DIR, `... --resume` continues it; flags given beside --config win\n")
        yaml.safe_dump(settings, fh, sort_keys=False, allow_unicode=True)
