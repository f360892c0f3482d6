"""The identity of a campaign's data: ``data.json`` at the root of a ``depnmt archive``.

An archive keeps a campaign's finished runs without their checkpoints; continuing the campaign
on another machine remakes the data stages there (prepare, parse, bpe) and trains the runs not
yet archived. For those to be runs of the same comparison, the remade data must be the data
the archived runs were trained on. ``data.json`` records it, one entry per data folder (by its
name in the work folder: ``prepare``, ``parse``, ``bpe``, ``words``, ``multitask``, ...)::

    {"format": 1,
     "folders": {"bpe": {"stage": "bpe",
                         "options": {...},               the stage manifest's options
                         "versions": {...},              the libraries that made it
                         "files": {"train.ja": {"lines": 50000, "sha256": "..."}, ...},
                         "codes": {"src": {"file": "codes.joint", "sha256": "..."}, ...},
                         "runs": ["bpe-run-plateau/models/abs", ...]},   trained on it
                 "parse": {... "parser": {...}, "parser_models": {...},
                           "parser_versions": {...}},   settings, descriptions, model versions
                 "prepare": {... "tokenizers": {...}}}}

Every file a stage wrote (the outputs its manifest lists) is identified by its sha256, so the
record does not depend on paths, dates or the machine; the files decide, and the options and
versions recorded with them explain a difference (a differing option is named in the error)
but are not compared on their own (a parser release that writes the same trees passes).
:func:`record_runs` adds the data of
newly archived runs (a run's ``manifest.json`` names its ``-i/--input`` and ``-t/--trees`` folders;
each names the folders it was made from); :func:`check_folders` compares data folders with the
record before a continued campaign trains anything.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from depnmt.core.errors import DepnmtError
from depnmt.core.log import info, warn
from depnmt.core.manifest import MANIFEST, load_manifest
from depnmt.core.textio import atomic_open, naming, read_json

DATA_RECORD = "data.json"
FORMAT = 1
STAGE_FIELDS = {"prepare": ("tokenizers",), "parse": ("parser", "parser_models",
                                                      "parser_versions")}
CHUNK = 1 << 20


def sha256(path: Path) -> str:
    """The sha256 of a file's bytes (hex)."""
    digest = hashlib.sha256()
    with naming(path, "read"), open(path, "rb") as fh:
        for block in iter(lambda: fh.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def folder_record(folder: Path) -> dict:
    """The record of one data stage folder: its manifest's stage, options and library versions,
    the lines and sha256 of every file it lists, the parser settings and versions (parse), the
    tokenizers (prepare) and the BPE codes' checksums (bpe). Checks the line counts first."""
    manifest = load_manifest(folder, stage_of(folder))
    outputs = manifest.get("outputs", {})
    codes = sorted({name for name in (manifest.get("codes") or {}).values() if name in outputs})
    files = {name: {"lines": outputs[name]["lines"], "sha256": sha256(folder / name)}
             for name in codes + sorted(set(outputs) - set(codes))}     # codes compared first
    record = {"stage": manifest["stage"], "options": manifest.get("options"),
              "versions": manifest.get("versions"), "files": files}
    for key in STAGE_FIELDS.get(manifest["stage"], ()):
        record[key] = manifest.get(key)
    if manifest["stage"] == "bpe":
        record["codes"] = {side: {"file": name, "sha256": files[name]["sha256"]}
                           for side, name in (manifest.get("codes") or {}).items()
                           if name in files}
    return record


def stage_of(folder: Path) -> str:
    """The stage named by ``folder``'s manifest."""
    manifest = read_json(folder / MANIFEST, f"{folder}: no {MANIFEST} found: not a data stage "
                                            f"folder (prepare, parse, bpe)")
    return str(manifest.get("stage"))


def upstream(folder: Path) -> list[Path]:
    """``folder`` and every stage folder it was made from (its manifest's inputs that are
    folders with a manifest), upstream first."""
    inputs = read_json(folder / MANIFEST, f"{folder}: no {MANIFEST} found").get("inputs") or {}
    chain: list[Path] = []
    for value in inputs.values():
        if isinstance(value, str) and (Path(value) / MANIFEST).is_file():
            chain += [p for p in upstream(Path(value)) if p not in chain]
    return chain + [folder]


def data_folders(folders: Sequence[Path]) -> list[Path]:
    """``folders`` with the folders they were made from, upstream first, each once."""
    out: list[Path] = []
    for folder in folders:
        out += [p for p in upstream(folder) if p.resolve() not in {q.resolve() for q in out}]
    return out


def run_data(model_dir: Path) -> list[Path] | None:
    """The data folders a finished run was trained on (its ``-i/--input`` and ``-t/--trees``
    folders, as its manifest records them, and their inputs); None when one is not on this
    machine."""
    inputs = load_manifest(model_dir, "train", verify=False).get("inputs") or {}
    given = [Path(inputs[k]) for k in ("bpe", "trees") if inputs.get(k)]
    missing = [p for p in given if not (p / MANIFEST).is_file()]
    if missing:
        warn(f"{model_dir}: its data folder {missing[0]} is not on this machine: not recorded "
             f"in {DATA_RECORD}")
        return None
    return data_folders(given)


# ---------------------------------------------------------------------------------------------
# Comparing records

def short(digest: str) -> str:
    return digest[:12] + "…"


def file_difference(name: str, here: dict, recorded: dict) -> str | None:
    """How folder ``name``'s files ``here`` differ from the ``recorded`` ones (the first
    differing file, in the record's order), or None."""
    for file, entry in recorded["files"].items():
        mine = here["files"].get(file)
        if mine is None:
            return f"{name}/{file} is in the archive's record but not here"
        if mine["sha256"] != entry["sha256"]:
            return (f"{name}/{file} differs from the archive's record (sha256 "
                    f"{short(mine['sha256'])} here, {short(entry['sha256'])} archived)")
    extra = sorted(set(here["files"]) - set(recorded["files"]))
    if extra:
        return f"{name}/{extra[0]} is here but not in the archive's record"
    return None


def option_difference(here: dict, recorded: dict) -> str:
    """``"; options differ: merges 3000 vs 4000, ..."`` (here vs archived), or ``""``."""
    mine, theirs = here.get("options") or {}, recorded.get("options") or {}
    diffs = [f"{k} {json.dumps(mine.get(k))} vs {json.dumps(theirs.get(k))}"
             for k in sorted(set(mine) | set(theirs)) if mine.get(k) != theirs.get(k)]
    return f"; options differ: {', '.join(diffs)}" if diffs else ""


def difference(name: str, here: dict, recorded: dict) -> str | None:
    """Why folder ``name`` here is not the recorded one (files first), or None."""
    if here["stage"] != recorded.get("stage"):
        return (f"{name} holds stage '{here['stage']}' but the archive's record is of stage "
                f"'{recorded.get('stage')}'")
    found = file_difference(name, here, recorded)
    return found + option_difference(here, recorded) if found else None


# ---------------------------------------------------------------------------------------------
# The record file

def load_record(archive: Path) -> dict:
    """``ARCHIVE/data.json``, or an empty record."""
    path = archive / DATA_RECORD
    if not path.exists():
        return {"format": FORMAT, "folders": {}}
    record = read_json(path, f"{path}: missing")
    if record.get("format") != FORMAT or not isinstance(record.get("folders"), dict):
        raise DepnmtError(f"{path}: not a data record of format {FORMAT}")
    return record


def save_record(archive: Path, record: dict) -> None:
    with atomic_open(archive / DATA_RECORD) as fh:
        json.dump(record, fh, indent=2, ensure_ascii=False)
        fh.write("\n")


@contextmanager
def locked(archive: Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the archive folder: runs archived at once (JOBS=N) update
    ``data.json`` one after the other."""
    import fcntl
    import os
    with naming(archive, "lock"):
        fd = os.open(archive, os.O_RDONLY)
    try:
        with naming(archive, "lock"):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def recorded_runs(record: dict) -> set[str]:
    return {run for entry in record["folders"].values() for run in entry.get("runs", [])}


def record_runs(runs: Sequence[tuple[str, Path]], archive: Path) -> int:
    """Add the data of ``runs`` (``(name in the archive, model directory)``) not yet in
    ``ARCHIVE/data.json`` to it; returns how many were added. Two runs trained on different
    data in a folder of the same name: a DepnmtError naming both."""
    with locked(archive):
        record = load_record(archive)
        known, cache = recorded_runs(record), {}
        added = 0
        for run, model_dir in runs:
            folders = None if run in known else run_data(model_dir)
            if folders is None:
                continue
            for folder in folders:
                key = folder.resolve()
                cache[key] = cache.get(key) or folder_record(folder)
                add_run(record, key.name, cache[key], run)
            added += 1
        if added:
            save_record(archive, record)
    return added


def add_run(record: dict, name: str, here: dict, run: str) -> None:
    """Record that ``run`` was trained on data folder ``name`` (``here``: its record)."""
    entry = record["folders"].setdefault(name, {**here, "runs": []})
    found = difference(name, here, entry)
    if found:
        raise DepnmtError(f"{run} and {entry['runs'][0]} were trained on different data: "
                          f"{found}; archive them into different folders")
    if run not in entry["runs"]:
        entry["runs"].append(run)


def check_folders(folders: Sequence[Path], archive: Path) -> list[str]:
    """Check data ``folders`` (and those they were made from) against ``ARCHIVE/data.json``;
    returns the names of the folders checked (none without a record). A folder that differs:
    a one-line DepnmtError naming it and its first differing file."""
    path = archive / DATA_RECORD
    if not path.exists():
        info(f"{archive}: no {DATA_RECORD}: nothing to check the data against")
        return []
    recorded = load_record(archive)["folders"]
    checked = []
    for folder in data_folders(folders):
        name = folder.resolve().name
        if name not in recorded:
            info(f"{folder}: not in {path} yet (no archived run was trained on it)")
            continue
        found = difference(name, folder_record(folder), recorded[name])
        if found:
            raise DepnmtError(f"{found}: the data is not the archived campaign's ({path})")
        checked.append(name)
    return checked
