"""``depnmt archive``: the evidence of a campaign's finished runs without their checkpoints.

A converged run of the comparison recipes leaves ~200 MB of checkpoints beside a few hundred
kilobytes that its results table is computed from. This copies, for every finished run of the
recipes' layout (``FOLDER/models/NAME`` with ``manifest.json``, beside a non-empty
``FOLDER/hyps/NAME.LANG``; the runs :func:`depnmt.report.runs_in_folders` reads), exactly
those small files::

    OUT/<FOLDER's name>/models/NAME/config.json     what was trained, with which options
    OUT/<FOLDER's name>/models/NAME/manifest.json   versions, inputs, the finished run's progress
    OUT/<FOLDER's name>/models/NAME/metrics.jsonl   every logged update and validation
    OUT/<FOLDER's name>/hyps/NAME.LANG              the test hypotheses

so that ``depnmt report -f OUT/<FOLDER's name> ...`` (BLEU, chrF, dev loss, epochs, intervals,
p-values) and ``depnmt plot`` (training curves) give the same table and curves on a machine that
never had the models — e.g. from a repository, a paper's supplementary material, or after the
machine that trained them is gone. Files are written atomically; archiving again replaces them
(a run finished since is added). Unfinished runs are skipped with a warning.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from .errors import DepnmtError
from .report import runs_in_folders
from .textio import atomic_open, make_dir, naming

MODEL_FILES = ("config.json", "manifest.json", "metrics.jsonl")


def copy_file(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` atomically (bytes as they are)."""
    with naming(src, "read"):
        data = src.read_bytes()
    with atomic_open(dst, "wb") as fh:
        fh.write(data)


def archive(folders: Sequence[Path], out: Path) -> list[Path]:
    """Copy the results evidence of every finished run in ``folders`` (the recipes' results
    folders, one per seed) into ``out/<folder name>/``; returns the archived model folders.
    Two folders with the same name would overwrite each other's runs: an error."""
    names: dict[str, Path] = {}
    for folder in folders:
        other = names.setdefault(folder.resolve().name, folder)
        if other is not folder:
            raise DepnmtError(f"{other} and {folder} have the same name: archive them into "
                              f"different folders")
    if out.resolve() in {f.resolve() for f in folders}:
        raise DepnmtError(f"{out}: is one of the folders being archived")
    archived = []
    for run in runs_in_folders(list(folders)):
        target = out / run.model_dir.parent.parent.resolve().name
        model = make_dir(target / "models" / run.model_dir.name)
        for name in MODEL_FILES:
            copy_file(run.model_dir / name, model / name)
        copy_file(run.hyp, make_dir(target / "hyps") / run.hyp.name)
        archived.append(model)
    return archived
