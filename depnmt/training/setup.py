"""One training run's set-up: everything before the first update, in the order it happens.

fairseq splits its ``train.py`` (set-up, epochs) from its ``Trainer`` (model, optimizer, one
step); JoeyNMT's ``training.py`` likewise keeps data and config loading outside its
``TrainManager``. Here :func:`prepare_run` sets up the run a
:class:`~depnmt.training.config.TrainingRun` describes (plain data, no model: it fills in the
run's set-up fields), :class:`depnmt.training.loop.Trainer` owns the model and the loop, and
:func:`depnmt.training.job.run` joins them with what surrounds a run (process group, the model
directory's lock, SIGTERM/SIGINT/SIGHUP, TensorBoard, the manifest):

1. the model directory: a fresh run must not overwrite a trained model (what is checked
   before the lock, :func:`check_not_foreign`, is not checked again); a fresh run clears
   what a run killed before its first ``last.pt`` left;
2. the data folder's manifests (its dev text still its prepare folder's,
   :func:`~depnmt.training.provenance.check_prepare_unchanged`) and vocabularies; the model
   config completed with the
   vocabulary sizes (``--resume``: the saved config's learned options kept, from the
   ``config.json`` read when the run was configured), every scheme's options checked
   against the model (:func:`~depnmt.model.schemes.registry.check_schemes`);
3. the parsers whose trees the schemes read; the identity of the data
   (:mod:`depnmt.training.provenance`), which ``--resume`` compares with the model's before any
   work;
   the training pairs with their trees as a
   :class:`~depnmt.data.cache.TrainCorpus` over the data folder's cache (built on first use,
   on every core), the dev examples in memory;
4. **the learn step**: options the schemes learn from the training examples (GPS's label
   vocabulary, :func:`~depnmt.model.schemes.registry.learn_options`) go into the model config,
   before any model exists;
5. ``config.json`` (with the data's provenance; kept as ``run.written``, which validation's
   translator reads), the vocabularies and the segmenter written into the model directory,
   and ``train.yaml``: the run's settings as a ``depnmt train --config`` file; a
   ``--resume-on-changed-data`` on other data first logs a ``data_changed`` record to
   ``metrics.jsonl``.

Tree features are computed later, by the model's own scheme stack (``Trainer``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

from depnmt.core.errors import DepnmtError
from depnmt.core.log import warn
from depnmt.core.manifest import load_manifest
from depnmt.core.textio import append_line, read_json, read_lines
from depnmt.data.batches import Example, attach_trees, load_parallel
from depnmt.data.cache import open_corpus
from depnmt.model.schemes.base import Scheme
from depnmt.model.schemes.registry import SCHEMES, check_schemes, learn_options, with_learned
from depnmt.model.transformer import ModelConfig
from depnmt.storage.modeldir import (CONFIG, LOCK, MODEL_FILES, check_same_subwords, checkpoint_dir,
                                     load_model_checkpoint, load_vocabs, metrics_lines,
                                     read_config, save_vocabs, subword_digests, subword_files,
                                     write_config)
from depnmt.training import distributed as dist
from depnmt.training import provenance
from depnmt.training.config import TrainingRun
from depnmt.training.metricslog import METRICS
from depnmt.training.validation import DEV_BLEU, dev_bleu_record
from depnmt.training.warmstart import check_warm_start

SETTINGS = "train.yaml"      # the run's `depnmt train` options, read back by `train --config`
SIDE_NAMES = {"src": "source", "tgt": "target"}


def prepare_run(run: TrainingRun) -> TrainingRun:
    """Steps 1–5 of the module docstring, filling in ``run``'s set-up fields; rank 0 writes
    the model directory. ``run.settings``: the options of ``depnmt train`` that
    :data:`SETTINGS` records (None: no file); ``run.init_from``: a trained model the new run
    starts from (:mod:`depnmt.training.warmstart`); ``run.resume_on_changed_data``: ``--resume``
    continues on data other than the model's instead of refusing it."""
    check_model_dir(run.model_dir, run.resume)
    if dist.is_main() and not run.resume:   # what a run killed before its first last.pt left
        for leftover in (run.model_dir / METRICS, checkpoint_dir(run.model_dir) / "best.pt"):
            leftover.unlink(missing_ok=True)
    bpe = load_manifest(run.data_dir, "bpe")
    provenance.check_prepare_unchanged(run.data_dir, bpe)
    if run.resume:
        if run.saved is None:       # read when the run was configured, unless made by hand
            run.saved = read_config(run.model_dir, upgrade=True)
        check_same_subwords(run.data_dir, run.model_dir)
    run.src_vocab, run.tgt_vocab = load_vocabs(run.data_dir)
    run.schemes = complete_model(run)
    check_warm_start(run.init_from, run.data_dir, run.model, run.schemes,
                     run.training.init_partial)                               # before any write
    run.tree_parsers = tree_parsers(run.model, run.trees_dir, run.saved)
    run.provenance = check_data(run, bpe)             # --resume: before any work
    run.train_data = load_split(run, "train", bpe, training=True)
    run.dev_data = load_split(run, "dev", bpe, training=False)
    run.model.schemes = learn_options(run.model.schemes, run.train_data, run.schemes)  # learn
    prepare_dir = Path(bpe["prepare_dir"])
    ref = prepare_dir / f"dev.raw.{bpe['tgt_lang']}"
    run.dev_refs = read_lines(ref) if ref.exists() and run.dev_data else []
    if dist.is_main():
        if run.resume:     # refused before config.json records the run's settings, not after
            log_resume_changes(run, resumable(run))
        write_model_dir(run, bpe, load_manifest(prepare_dir, "prepare", verify=False))
    dist.barrier()
    return run


def check_model_dir(model_dir: Path, resume: bool) -> None:
    """Under the model directory's lock, after :func:`check_not_foreign` (before it):
    ``--resume`` needs a log whose every line is UTF-8
    (:func:`~depnmt.storage.modeldir.metrics_lines`); a fresh run refuses a trained model (one that
    finished while this run waited for the folder is found here)."""
    if resume and (model_dir / METRICS).is_file():
        metrics_lines(model_dir / METRICS)              # its rewind reads every line
    if not resume and (checkpoint_dir(model_dir) / "last.pt").exists():
        raise DepnmtError(f"{model_dir}: already holds a trained model; pass --resume to "
                          f"continue it or choose another -o folder")


def check_not_foreign(model_dir: Path, resume: bool, data_dir: Path | None = None) -> None:
    """What is checked before the folder's lock is taken, so that not even the lock file lands
    among a user's files: ``--resume`` needs a ``last.pt``; a fresh run's ``model_dir`` holds no
    files that are not a model's (:func:`foreign_files`). (A second training of a model being
    trained is then told that the folder is in use, under the lock.)"""
    last = checkpoint_dir(model_dir) / "last.pt"
    if resume and not last.exists():
        raise DepnmtError(f"{model_dir}: --resume given but there is no {last}")
    foreign = [] if resume else foreign_files(model_dir, data_dir)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise DepnmtError(f"{model_dir}: holds files that are not a depnmt model's ({shown}), "
                          f"and train writes config.json, vocabularies and checkpoints there: "
                          f"choose a new or empty -o folder")


def foreign_files(model_dir: Path, data_dir: Path | None) -> list[str]:
    """The entries of an existing ``model_dir`` that are not a model folder's: none when its
    ``config.json`` is one ``depnmt train`` wrote (a run killed before its first ``last.pt``,
    whose files the new run replaces; others stay untouched); else every entry but those
    ``train`` writes (what a run killed before ``config.json`` leaves: the lock, the
    vocabularies and codes, logs, checkpoints, temporary files)."""
    if not model_dir.is_dir():
        return []
    if written_by_train(model_dir / CONFIG):
        return []
    owned = {*MODEL_FILES, LOCK, checkpoint_dir(Path()).name,
             *(subword_files(data_dir) if data_dir is not None else ())} - {CONFIG}
    return [f"{name} (not written by `depnmt train`)" if name == CONFIG else name
            for name in sorted(p.name for p in model_dir.iterdir())
            if name not in owned and not name.endswith(".tmp")]


def written_by_train(config: Path) -> bool:
    """Whether ``config`` is a model's ``config.json`` (a JSON object with ``train``'s
    stamps and model), not a file of the same name of someone else's."""
    if not config.is_file():
        return False
    try:
        return {"config_format", "depnmt_version", "model"} <= set(read_json(config, ""))
    except DepnmtError:
        return False


def check_data(run: TrainingRun, bpe: dict) -> dict[str, Any]:
    """The provenance of the data ``run`` reads (:func:`depnmt.training.provenance.record`; the
    sha256 it read kept in ``run.digests`` for the cache, which would read them again); on
    ``--resume`` (``run.saved``: the model's config) compared with the model's: other data is
    a DepnmtError naming what changed, unless ``run.resume_on_changed_data`` (then
    ``run.data_changed`` says what). A model folder of an earlier depnmt, which recorded no
    provenance, resumes with a warning."""
    saved = run.saved
    recorded = (saved or {}).get(provenance.KEY)
    now = provenance.record(run, bpe, recorded if isinstance(recorded, dict) else None)
    run.digests = {run.data_dir / name: digest for name, digest in now["text"]["files"].items()}
    if now["trees"] is not None:
        run.digests.update({run.trees_dir / name: digest
                            for name, digest in now["trees"]["files"].items()})
    if saved is None:
        return now
    if not isinstance(recorded, dict):
        warn(f"{run.model_dir / CONFIG}: records no provenance of the data it was trained on "
             f"(written by an earlier depnmt), so the data given cannot be checked against it; "
             f"it is recorded from now on")
        return now
    changes = provenance.compare(recorded, now)
    if changes and not run.resume_on_changed_data:
        raise provenance.mismatch_error(run.model_dir, changes)
    run.data_changed = changes
    return now


def resumable(run: TrainingRun) -> dict[str, Any]:
    """The progress ``last.pt`` holds, once it is known to fit the run ``--resume`` configured
    (architecture, scheme and options, vocabularies: :func:`load_model_checkpoint`), else its
    DepnmtError: raised before :func:`write_model_dir` writes the new settings into
    ``config.json`` (a refused resume left them there, and every later ``--resume`` took them
    and was refused too)."""
    last = checkpoint_dir(run.model_dir) / "last.pt"
    state = load_model_checkpoint(last, run.model.to_dict(), subword_digests(run.model_dir))
    return state["progress"]


def log_resume_changes(run: TrainingRun, progress: dict[str, Any]) -> None:
    """Append to ``metrics.jsonl``, at the update ``last.pt`` holds (``progress``; the resumed
    run's rewind keeps them), the ``data_changed`` record of ``run.data_changed`` and the
    ``settings_changed`` record of ``run.settings_changed`` (each when there is one), and say
    so: the config.json written next records the new data and settings alone."""
    step = progress["step"]
    if run.data_changed:
        append_line(run.model_dir / METRICS,
                    json.dumps(provenance.changed_record(step, run.data_changed)))
        warn(f"{run.model_dir}: continuing from update {step} on changed data "
             f"({'; '.join(run.data_changed)}); recorded in {METRICS}")
    if run.settings_changed:
        append_line(run.model_dir / METRICS, json.dumps(provenance.settings_record(
            step, progress.get("elapsed", 0.0), run.settings_changed)))
        warn(f"{run.model_dir}: trained up to update {step} with "
             f"{'; '.join(run.settings_changed)}: it continues with the settings given; "
             f"recorded in {METRICS}")


def complete_model(run: TrainingRun) -> list[Scheme]:
    """``run.model`` completed and checked: the saved learned options kept (``--resume``:
    ``run.saved``, in today's form), the vocabulary sizes set; returns its schemes, built for
    the check (the learn step uses them)."""
    cfg = run.model
    if run.resume:
        cfg.schemes = with_learned(cfg.schemes, run.saved["model"]["schemes"])
    cfg.src_vocab_size, cfg.tgt_vocab_size = len(run.src_vocab), len(run.tgt_vocab)
    if cfg.share_all_embeddings and run.src_vocab != run.tgt_vocab:
        raise DepnmtError(f"{run.data_dir}: --share-all-embeddings needs a joint vocabulary "
                          f"(run `depnmt bpe --joint`)")
    return check_schemes(cfg.schemes, cfg.dims)


def tree_parsers(cfg: ModelConfig, trees_dir: Path | None, saved: dict[str, Any] | None = None
                 ) -> dict[str, dict]:
    """Parser settings of each side whose trees training reads: ``src`` when a scheme reads
    or learns from source trees, ``tgt`` when one learns from target trees. ``saved``: the
    config of the model resumed, whose trees folder ``--resume`` takes when none is given
    (an error when it no longer exists)."""
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
    data = (saved or {}).get("data")
    recorded = data.get("trees_dir") if isinstance(data, dict) else None
    if recorded == str(trees_dir) and not trees_dir.exists():
        raise DepnmtError(f"{trees_dir}: no longer exists, and the model was trained on its "
                          f"trees ({CONFIG} data.trees_dir): pass -t PARSE_DIR with those trees")
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
    training split read from the cache (:func:`depnmt.data.cache.open_corpus`, pairs over
    ``--max-len`` left out), the others (small) loaded in memory (longer ones truncated)."""
    langs = {"src": bpe["src_lang"], "tgt": bpe["tgt_lang"]}
    src = run.data_dir / f"{split}.{langs['src']}"
    tgt = run.data_dir / f"{split}.{langs['tgt']}"
    if not src.exists():
        if training:
            raise DepnmtError(f"{src}: missing; the bpe folder has no training data")
        return []
    max_len = run.training.max_len
    trees = {side: run.trees_dir / f"{split}.{langs[side]}.conllu" for side in run.tree_parsers}
    if training:
        for path in (tgt, *trees.values()):
            if not path.is_file():
                raise DepnmtError(f"{path}: missing (needed to train)")
        read = {path: run.digests[path] for path in (src, tgt, *trees.values())
                if path in run.digests}         # hashed for the provenance: not read again
        corpus, dropped = open_corpus(run.data_dir, split, langs, {"src": run.src_vocab,
                                                                   "tgt": run.tgt_vocab},
                                      trees, max_len, known=read)
        if dropped:
            warn(f"{src}: {dropped} training pairs longer than --max-len {max_len} subwords "
                 f"skipped")
        return corpus
    examples, _ = load_parallel(src, tgt, run.src_vocab, run.tgt_vocab, max_len)
    for side, path in trees.items():
        attach_trees(examples, path, side, src if side == "src" else tgt)
    return examples


def write_model_dir(run: TrainingRun, bpe: dict, prepare: dict) -> None:
    """``config.json`` (everything translate needs; kept as ``run.written``; the task tags of
    multitask data, :func:`depnmt.stages.multitask.model_record`; dev BLEU's tokenizer,
    :func:`~depnmt.training.validation.dev_bleu_record`), vocabularies, segmenter and
    :data:`SETTINGS`."""
    from depnmt.stages import multitask
    from depnmt.stages.bpe import Segmenter
    save_vocabs(run.model_dir, (run.src_vocab, run.tgt_vocab))
    for side in ("src", "tgt"):
        Segmenter.from_dir(run.data_dir, side).save(run.model_dir, side)
    run.written = {
        "model": run.model.to_dict(),
        "src_lang": bpe["src_lang"], "tgt_lang": bpe["tgt_lang"],
        "tokenizers": prepare["tokenizers"],
        "parser": {"src": run.parser_settings, "training": run.tree_parsers},
        "subwords": bpe.get("options", {}),
        "max_src_len": run.training.max_len,
        "search": asdict(run.search),
        "training": asdict(run.training),
        "data": {"bpe_dir": str(run.data_dir.resolve()),
                 "trees_dir": str(run.trees_dir.resolve()) if run.trees_dir else None},
        "files": subword_digests(run.model_dir),
        provenance.KEY: run.provenance,
        DEV_BLEU: dev_bleu_record(bpe["tgt_lang"], run.saved if run.resume else None),
    }
    tagged = multitask.model_record(prepare)     # trained on `depnmt multitask` data
    if tagged is not None:
        run.written[multitask.KEY] = tagged
    write_config(run.model_dir, run.written)
    if run.settings is not None:
        write_settings(run.model_dir / SETTINGS, run.settings)


def write_settings(path: Path, settings: dict[str, Any]) -> None:
    """``settings`` (option name -> value) as the YAML file ``depnmt train --config`` reads."""
    import yaml

    from depnmt.core.textio import atomic_open
    with atomic_open(path) as fh:
        fh.write(f"# this run's settings: `depnmt train --config {path} -o DIR` trains the "
                 f"same into DIR, `... --resume` continues it; flags given beside --config win\n")
        yaml.safe_dump(settings, fh, sort_keys=False, allow_unicode=True)
