"""``depnmt bpe --subwords-from DIR``: segment new data with the subwords of an earlier bpe
folder or of a trained model's folder, learning nothing.

Fine-tuning a trained model on other data (``train --init-from``), or scoring and training on
a new test domain with the same segmentation, needs the new text cut into the very subwords the
model's embeddings are rows of. This writes a bpe folder like any other (the same file names and
manifest, so ``parse``, ``train`` and ``translate`` take it), whose segmenter files
(``bpe.json``, codes, filter vocabularies) and vocabularies are copies, byte for byte, of
``DIR``'s: ``train --init-from`` and ``--resume`` compare exactly those bytes. Subwords of the
new text that the copied vocabulary lacks become ``<unk>`` in training, as rare ones do; the
stage says how many there are.
"""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

from depnmt.core.errors import DepnmtError
from depnmt.core.log import info, warn
from depnmt.core.manifest import write_manifest
from depnmt.core.stagedir import check_distinct, stage_output
from depnmt.core.textio import read_json
from depnmt.core.vocab import Vocab
from depnmt.core.workers import worker_pool
from depnmt.stages.bpe import (CONFIG_FILE, SIDES, Segmenter, count_tokens, line_total,
                               prepared_inputs, presegment, read_config, segment_splits, stage_owns)
from depnmt.storage.modeldir import subword_files


def subword_sources(source: Path) -> tuple[dict[str, Segmenter], dict[str, Vocab], list[str]]:
    """The segmenters and vocabularies of a bpe or model folder, and the names of the files
    they come from (``bpe.json`` first); a :class:`DepnmtError` naming what is missing."""
    read_config(source)
    segmenters = {side: Segmenter.from_dir(source, side) for side in SIDES}
    vocabs = {}
    for side in SIDES:
        name = f"vocab.{side}.txt"
        if not (source / name).is_file():
            raise DepnmtError(f"{source}: no {name}; expected a folder written by `depnmt bpe` "
                              f"or `depnmt train`")
        vocabs[side] = Vocab.load(source / name)
    return segmenters, vocabs, [CONFIG_FILE, *subword_files(source)]


def source_record(source: Path) -> tuple[dict, dict[str, str]]:
    """What ``source`` records of how its subwords were made (its bpe manifest's options, or
    a model's ``subwords``) and its languages (``{}`` when it records none)."""
    for name, key in (("manifest.json", "options"), ("config.json", "subwords")):
        path = source / name
        if path.is_file():
            record = read_json(path, "")
            if isinstance(record, dict) and isinstance(record.get(key), dict) and \
                    (name == "config.json" or record.get("stage") == "bpe"):
                langs = {s: record[f"{s}_lang"] for s in SIDES if record.get(f"{s}_lang")}
                return record[key], langs
    return {}, {}


def unknown_share(counts: Counter, vocab: Vocab) -> tuple[int, int, int]:
    """``(subword types, occurrences, all occurrences)`` of ``counts`` not in ``vocab``."""
    missing = {t: n for t, n in counts.items() if t not in vocab.stoi}
    return len(missing), sum(missing.values()), sum(counts.values())


def run_bpe_from(prepare_dir: Path, out_dir: Path, source: Path, jobs: int = 1) -> dict:
    """Segment a prepare folder into ``out_dir`` (all or nothing) with the codes, filter
    vocabularies and vocabularies of the bpe or model folder ``source``, copied; return the
    manifest. ``jobs`` > 1 segments in that many processes, with the same output."""
    source = Path(source)
    check_distinct(out_dir, {"prepare folder": prepare_dir, "--subwords-from folder": source})
    prep, langs, splits = prepared_inputs(prepare_dir)
    segmenters, vocabs, names = subword_sources(source)
    options, their_langs = source_record(source)
    for side in SIDES:
        if their_langs.get(side, langs[side]) != langs[side]:
            warn(f"{source}: its {side} language is '{their_langs[side]}', this data's is "
                 f"'{langs[side]}'")
    with worker_pool(jobs) as pool:
        train_counts = {side: count_tokens(prepare_dir / f"train.{lang}",
                                           line_total(prep, f"train.{lang}",
                                                      prepare_dir / f"train.{lang}"), pool)
                        for side, lang in langs.items()}
        pool.set_state(segmenters)
        presegment(pool, segmenters, train_counts)
        with stage_output(out_dir, "bpe", owns=stage_owns(langs)) as tmp:
            outputs, counts = segment_splits(pool, segmenters, prepare_dir, tmp,
                                             (prep, langs, splits), train_counts)
            for name in names:
                shutil.copyfile(source / name, tmp / name)
            for side in SIDES:
                types, missing, total = unknown_share(counts[side], vocabs[side])
                (warn if missing else info)(
                    f"train.{langs[side]}: {missing} of {total} subwords ({types} distinct) "
                    f"are not in vocab.{side}.txt and become <unk>"
                    + (f" ({100 * missing / max(total, 1):.2f} %)" if missing else ""))
            codes = {s: segmenters[s].segmenter_config(s).get("codes") for s in SIDES}
            return write_manifest(
                tmp, "bpe", inputs={"prepare": str(prepare_dir.resolve())},
                options={**options, "subwords_from": str(source.resolve())},
                outputs=sorted(set(outputs + names)),
                extra={"src_lang": langs["src"], "tgt_lang": langs["tgt"],
                       "prepare_dir": str(prepare_dir.resolve()), "codes": codes,
                       "splits": splits, "vocab_sizes": {s: len(vocabs[s]) for s in SIDES}})
