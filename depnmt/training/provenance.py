"""What a training run trains on, identified by content: ``config.json``'s ``provenance``.

``train`` records the identity of every file the run reads besides the vocabularies and codes
(which ``config.json``'s ``files`` record and :func:`~depnmt.storage.modeldir.check_same_subwords`
checks), and ``train --resume`` compares the data it is given with it before any work
(:func:`compare`): a model is continued on the data it was trained on, or on other data only on
purpose (``--resume-on-changed-data``, which ``metrics.jsonl`` records as a ``data_changed``
record, :func:`changed_record`)::

    {"format": 1,
     "text": {"folder": "/abs/bpe",                       the bpe folder (-i)
              "files": {"train.en": SHA256, "train.de": ..., "dev.en": ..., "dev.de": ...}},
     "references": {"folder": "/abs/prepare",              dev BLEU's references
                    "files": {"dev.raw.de": SHA256}},
     "trees": {"folder": "/abs/parse",                     -t; null without trees
               "control": null | {"settings": {kind, seed, labels, noise}, "sides": ["src"],
                                  "source_sha256": ...},   a `depnmt controls` folder's
               "lines": {"train.en.conllu": 29000, ...},   as its manifest records them
               "files": {"train.en.conllu": SHA256, "dev.en.conllu": ...}},
     "init_from": null | {"folder": "/abs/m0", "checkpoint": "/abs/m0/checkpoints/best.pt",
                          "sha256": ...}}                  --init-from's weights

Files are identified by the sha256 of their bytes, never by size and modification time; the
folders are recorded to name them in messages, not compared (a copy of the same files
elsewhere is the same data). ``init_from`` is recorded, not compared: a resumed run no longer
reads it.
"""

from __future__ import annotations

import json
import time
from itertools import zip_longest
from pathlib import Path
from typing import Any, Iterable

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.manifest import load_manifest
from depnmt.data.record import sha256

FORMAT = 1
KEY = "provenance"              # config.json's key
EVENT = "data_changed"          # metrics.jsonl's record of a resume on changed data
SETTINGS_EVENT = "settings_changed"     # ... and of one with other settings (--warmup, ...)
ACCEPT_FLAG = "--resume-on-changed-data"


def file_digests(folder: Path, names: Iterable[str]) -> dict[str, str]:
    """``{name: sha256}`` of the files ``names`` of ``folder`` that exist, read in threads as
    the training-data cache reads its sources (:func:`depnmt.data.cache.arrays.file_digests`)."""
    from depnmt.data.cache.arrays import file_digests as digests_of
    present = [name for name in names if (folder / name).is_file()]
    found = digests_of([folder / name for name in present])
    return {name: found[folder / name] for name in present}


def text_record(data_dir: Path, langs: dict[str, str]) -> dict[str, Any]:
    """The bpe folder's training and dev text (``SPLIT.LANG`` of both sides) that a run reads."""
    names = [f"{split}.{lang}" for split in ("train", "dev") for lang in langs.values()]
    return {"folder": str(data_dir.resolve()), "files": file_digests(data_dir, names)}


def check_prepare_unchanged(data_dir: Path, bpe: dict[str, Any]) -> None:
    """The bpe folder's dev text (both sides) must still be its prepare folder's dev text,
    segmented: ``train`` scores dev BLEU against the prepare folder's ``dev.raw.TGT`` by line
    and copies its tokenizers into ``config.json``, which fit the bpe folder only then. A
    prepare folder made again since ``depnmt bpe`` (other dev files, another corpus slice or
    tokenizer) is an :class:`InputError` naming the first line that differs, before any work;
    the training text is not compared (another ``--first`` leaves the dev set as it was)."""
    prepare_dir = Path(bpe["prepare_dir"])
    load_manifest(prepare_dir, "prepare", verify=False)     # a folder gone: the usual error
    for lang in (bpe["src_lang"], bpe["tgt_lang"]):
        segmented = data_dir / f"dev.{lang}"
        if segmented.is_file():
            check_same_words(segmented, prepare_dir / f"dev.{lang}", data_dir)


def check_same_words(segmented: Path, tokenized: Path, data_dir: Path) -> None:
    """Each line of the subword file ``segmented`` has the tokens of the same line of
    ``tokenized`` (its source in the prepare folder); else one :class:`InputError` naming the
    prepare file's line."""
    from depnmt.core.subwords import merge_subwords
    from depnmt.core.textio import count_lines, iter_lines
    from depnmt.stages.bpe import split_tokens
    again = (f"the prepare folder was made again after `depnmt bpe -o {data_dir}`, so dev BLEU "
             f"would be scored against other references: run `depnmt bpe -i "
             f"{tokenized.parent}` again")
    if not tokenized.is_file():
        raise InputError(tokenized, None, f"missing, but {segmented} was made from it; {again}")
    for number, (subwords, tokens) in enumerate(zip_longest(iter_lines(segmented),
                                                            iter_lines(tokenized)), start=1):
        if subwords is None or tokens is None:
            raise InputError(tokenized, None, f"has {count_lines(tokenized)} lines but "
                                              f"{segmented} has {count_lines(segmented)}; {again}")
        if merge_subwords(split_tokens(subwords)) != split_tokens(tokens):
            raise InputError(tokenized, number, f"not the sentence of {segmented}:{number}, "
                                                f"which was made from it; {again}")


def references_record(prepare_dir: Path, tgt_lang: str) -> dict[str, Any] | None:
    """The dev references (``dev.raw.TGT`` of the prepare folder) dev BLEU is scored against;
    None when there are none."""
    name = f"dev.raw.{tgt_lang}"
    if not (prepare_dir / name).is_file():
        return None
    return {"folder": str(prepare_dir.resolve()), "files": file_digests(prepare_dir, [name])}


def trees_record(trees_dir: Path | None, langs: dict[str, str], sides: Iterable[str]
                 ) -> dict[str, Any] | None:
    """The tree files of ``sides`` a run reads (``{train,dev}.LANG.conllu``), their line counts
    as the folder's manifest records them and its control (``depnmt controls``); None
    without trees."""
    sides = list(sides)
    if trees_dir is None or not sides:
        return None
    manifest = load_manifest(trees_dir, "parse", verify=False)
    names = [f"{split}.{langs[side]}.conllu" for split in ("train", "dev") for side in sides]
    outputs = manifest.get("outputs") or {}
    control = manifest.get("control")
    return {"folder": str(trees_dir.resolve()),
            "control": None if not isinstance(control, dict) else {
                "settings": control.get("settings"), "sides": control.get("sides"),
                "source_sha256": (control.get("source") or {}).get("sha256")},
            "lines": {name: (outputs.get(name) or {}).get("lines") for name in names
                      if name in outputs},
            "files": file_digests(trees_dir, names)}


def init_from_record(source: Path | None) -> dict[str, Any] | None:
    """``--init-from``'s model folder and checkpoint, with the checkpoint's sha256."""
    if source is None:
        return None
    from depnmt.training.warmstart import source_checkpoint
    folder, checkpoint = source_checkpoint(source)
    return {"folder": str(folder.resolve()), "checkpoint": str(checkpoint.resolve()),
            "sha256": sha256(checkpoint)}


def record(run: Any, bpe: dict[str, Any], saved: dict[str, Any] | None = None
           ) -> dict[str, Any]:
    """The provenance of the training run ``run`` (a :class:`~depnmt.training.config.TrainingRun`
    whose ``tree_parsers`` are known) on the bpe folder of manifest ``bpe``; ``saved``: the
    provenance the model recorded (``--resume``: its ``init_from`` is kept)."""
    langs = {"src": bpe["src_lang"], "tgt": bpe["tgt_lang"]}
    init_from = (init_from_record(run.init_from) if run.init_from is not None and not run.resume
                 else (saved or {}).get("init_from"))
    return {"format": FORMAT,
            "text": text_record(run.data_dir, langs),
            "references": references_record(Path(bpe["prepare_dir"]), langs["tgt"]),
            "trees": trees_record(run.trees_dir, langs, run.tree_parsers),
            "init_from": init_from}


# -- comparing ---------------------------------------------------------------------------------
def compare(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Short descriptions of what differs between the data a model was trained on (``saved``)
    and the data given now (``now``), both :func:`record`'s; empty when it is the same."""
    return [*compare_files(saved.get("text"), now.get("text"), "text"),
            *compare_files(saved.get("references"), now.get("references"), "dev references"),
            *compare_trees(saved.get("trees"), now.get("trees"))]


def compare_files(saved: dict | None, now: dict | None, what: str) -> list[str]:
    """The files of two records of one kind (``what``: ``text``, ``trees``, ...) that differ,
    are new or are missing, each named by its path now."""
    saved, now = saved or {"files": {}}, now or {"files": {}}
    folder = Path(now.get("folder") or saved.get("folder") or ".")
    old, new = saved.get("files") or {}, now.get("files") or {}
    changes = []
    for name in sorted(set(old) | set(new)):
        before, after = old.get(name), new.get(name)
        if before == after:
            continue
        if before is None:
            changes.append(f"{folder / name}: the model was trained without it")
        elif after is None:
            changes.append(f"{folder / name}: missing (the model was trained on "
                           f"{Path(saved['folder']) / name})")
        else:
            changes.append(f"{folder / name} differs from the {what} the model was trained on "
                           f"(sha256 {after[:12]}…, trained on {before[:12]}…)")
    return changes


def compare_trees(saved: dict | None, now: dict | None) -> list[str]:
    """What differs between two trees records: the control (a control folder given for the
    parser's trees, or one of another kind), else the tree files."""
    if saved is None and now is None:
        return []
    if saved is None:
        return [f"-t {now['folder']}: the model was trained without trees"]
    if now is None:
        return [f"trained on the trees of {saved['folder']}, but no trees are given"]
    before, after = control_text(saved.get("control")), control_text(now.get("control"))
    if before != after:
        held = "the parser's" if after == "none" else after
        return [f"trained on trees {saved['folder']} (control: {before}) but -t "
                f"{now['folder']} is {held} trees"]
    return compare_files(saved, now, "trees")


def control_text(control: dict | None, seed: bool = True) -> str:
    """``none``, or the control's description (``random-projective (seed 1, labels keep)``;
    ``seed`` False: without the seed)."""
    if not control:
        return "none"
    from depnmt.stages.parse.controls import Control
    try:
        return Control.from_dict(control.get("settings")).describe(seed)
    except DepnmtError:
        settings = control.get("settings")
        if isinstance(settings, dict) and not seed:
            settings = {k: v for k, v in settings.items() if k != "seed"}
        return json.dumps(settings, sort_keys=True)


def mismatch_error(model_dir: Path, changes: list[str]) -> DepnmtError:
    """The one-line error of ``--resume`` on data that differs from the model's (``changes``:
    :func:`compare`'s), with how to continue anyway."""
    return DepnmtError(f"{model_dir}: {'; '.join(changes)}. --resume continues a run on the "
                       f"data it was trained on: give that data, or add {ACCEPT_FLAG} to "
                       f"continue on this data on purpose (metrics.jsonl records the change)")


def changed_record(step: int, changes: list[str]) -> dict[str, Any]:
    """The ``metrics.jsonl`` record of a resume on changed data: exactly ``{"event":
    "data_changed", "step": N, "changed": [...], "time": UNIX_TIME}`` (``step``: the update
    the run continues from; ``time``: seconds since the epoch, unlike the elapsed training
    seconds of the other records)."""
    return {"event": EVENT, "step": step, "changed": list(changes),
            "time": round(time.time(), 3)}


def settings_record(step: int, elapsed: float, changes: list[str]) -> dict[str, Any]:
    """The ``metrics.jsonl`` record of a resume with other settings: ``{"event":
    "settings_changed", "step": N, "changed": ["--FLAG BEFORE, not NOW", ...], "time": T}``
    (``step``: the update the run continues from; ``time``: its training seconds, as the other
    records count them; ``changed``: :func:`depnmt.training.config.setting_changes`)."""
    return {"event": SETTINGS_EVENT, "step": step, "changed": list(changes),
            "time": round(elapsed, 3)}
