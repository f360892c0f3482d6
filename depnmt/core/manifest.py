"""Stage manifests: ``manifest.json`` next to a stage's outputs.

Every stage (prepare, parse, bpe, train) writes one, recording its inputs, options, library
versions and the line count of every output file. The data stages write it last, into a
folder that appears complete or not at all (:mod:`depnmt.core.stagedir`). The next stage loads it
with
:func:`load_manifest`, which checks that the files are still the ones the manifest describes.
"""

from __future__ import annotations

import datetime as _dt
import json
from importlib import metadata
from pathlib import Path
from typing import Any, Iterable

from depnmt.core.errors import DepnmtError
from depnmt.core.textio import atomic_open, count_lines, read_json
from depnmt.version import __version__

MANIFEST = "manifest.json"
TRACKED_LIBRARIES = ("torch", "sacremoses", "subword-nmt", "stanza", "spacy", "ginza", "ja-ginza",
                     "sudachipy", "sacrebleu")


def library_versions(names: Iterable[str] = TRACKED_LIBRARIES) -> dict[str, str]:
    """Installed versions of the libraries that shape a stage's output (absent ones omitted)."""
    versions = {"depnmt": __version__}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return versions


def write_manifest(out_dir: str | Path, stage: str, *, inputs: dict[str, Any],
                   options: dict[str, Any], outputs: Iterable[str | Path],
                   extra: dict[str, Any] | None = None) -> dict:
    """Write ``out_dir/manifest.json`` and return it. ``outputs`` are files inside ``out_dir``."""
    out_dir = Path(out_dir)
    files = {}
    for out in outputs:
        p = Path(out)
        p = p if p.is_absolute() else out_dir / p
        files[p.relative_to(out_dir).as_posix()] = {"lines": count_lines(p)}
    manifest = {
        "stage": stage,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "versions": library_versions(),
        "inputs": {k: (str(v) if isinstance(v, Path) else v) for k, v in inputs.items()},
        "options": options,
        "outputs": files,
    }
    if extra:
        manifest.update(extra)
    with atomic_open(out_dir / MANIFEST) as fh:
        json.dump(manifest, fh, indent=2, ensure_ascii=False)
        fh.write("\n")
    return manifest


def being_written(stage_dir: Path, stage: str) -> str:
    """A note for the missing-manifest error when a stage's temporary folder lies beside
    ``stage_dir`` (:mod:`depnmt.core.stagedir`): a run is writing it, or was killed."""
    if next(stage_dir.parent.glob(f".{stage_dir.name}.tmp-*"), None) is None:
        return ""
    return (f" (a `depnmt {stage}` run is writing it, or was interrupted; the folder appears "
            f"when the run completes)")


def load_manifest(stage_dir: str | Path, stage: str, *, verify: bool = True) -> dict:
    """Load the manifest of ``stage`` from ``stage_dir``; with ``verify``, re-count output lines.

    Raises :class:`DepnmtError` naming the folder when the manifest is missing, belongs to another
    stage, or an output file was changed or removed since it was written.
    """
    stage_dir = Path(stage_dir)
    path = stage_dir / MANIFEST
    manifest = read_json(path, f"{stage_dir}: no {MANIFEST} found; run `depnmt {stage}` to "
                               f"create this folder first{being_written(stage_dir, stage)}")
    if manifest.get("stage") != stage:
        raise DepnmtError(f"{path}: written by stage '{manifest.get('stage')}', expected "
                          f"'{stage}' output here")
    if not isinstance(manifest.get("outputs"), dict):
        raise DepnmtError(f"{path}: incomplete (it lists no outputs); re-run `depnmt {stage}`")
    if verify:
        for name, info in manifest.get("outputs", {}).items():
            f = stage_dir / name
            if not f.exists():
                raise DepnmtError(f"{f}: listed in {path} but missing; re-run `depnmt {stage}`")
            n = count_lines(f)
            if n != info["lines"]:
                raise DepnmtError(f"{f}: has {n} lines but {path} recorded {info['lines']}; the "
                                  f"file changed after `depnmt {stage}` wrote it")
    return manifest
