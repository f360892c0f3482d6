"""``depnmt archive``: the evidence of a campaign's finished runs without their checkpoints.

A converged run of the comparison recipes leaves ~200 MB of checkpoints beside a few hundred
kilobytes that its results table is computed from. This copies, for every finished run of the
recipes' layout (``FOLDER/models/NAME`` with ``manifest.json``, beside a non-empty
``FOLDER/hyps/NAME.LANG``; the runs :func:`depnmt.evaluation.runs.runs_in_folders` reads), exactly
those small files::

    OUT/<FOLDER's name>/models/NAME/config.json     what was trained, with which options
    OUT/<FOLDER's name>/models/NAME/manifest.json   versions, inputs, the finished run's progress
    OUT/<FOLDER's name>/models/NAME/metrics.jsonl   every logged update and validation
    OUT/<FOLDER's name>/hyps/NAME.LANG              the test hypotheses
    OUT/<FOLDER's name>/hyps/NAME.LANG.ref-logprob  the test references' log-probability under
                                                    the selected checkpoint, where the run has it
    OUT/<FOLDER's name>/hyps/NAME.LANG.settings     what the recipes made the hypotheses with
                                                    (checkpoint, beam, alpha, test source), where
                                                    the run has it

so that ``depnmt report -f OUT/<FOLDER's name> ...`` (BLEU, chrF, test NLL, dev loss, epochs,
intervals, p-values) and ``depnmt plot`` (training curves) give the same table and curves on a
machine that never had the models — e.g. from a repository, a paper's supplementary material,
or after the machine that trained them is gone. Files are written atomically and flushed to
disk; archiving again replaces them (a run finished since is added). Unfinished runs, and
runs a process is training, are skipped with a warning.

One writer: an archive holds ``PARENT/.OUT.lock`` (:func:`depnmt.core.stagedir.hold_lock`) while it
writes ``OUT``; a second `depnmt archive` into the same ``OUT`` (campaign jobs archiving their
seeds at once) waits for it and then runs, so the result is that of the two one after the other.
A run's test hypotheses are copied after its model files and its test likelihood
(:mod:`depnmt.decoding.likelihood`; computed by the comparison recipes while the checkpoints exist,
it
cannot be made from the archive): ``report -f`` sees a run once it is complete.

``OUT/data.json`` records the data the runs were trained on (:mod:`depnmt.data.record`: every
data stage's options, parser versions and the sha256 of each file it wrote), so that a
campaign continued on another machine can check that its remade data is the same
(``depnmt archive --check-data``) before it trains anything.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from depnmt.core.errors import DepnmtError, UsageError
from depnmt.core.optionspec import Folder, check_options, option
from depnmt.core.stagedir import COMMIT_DELAY, hold_lock, sibling
from depnmt.core.textio import atomic_open, make_dir, naming
from depnmt.data.record import record_runs
from depnmt.evaluation.runs import runs_in_folders

MODEL_FILES = ("config.json", "manifest.json", "metrics.jsonl")


@dataclass
class ArchiveSettings:
    """The options of ``depnmt archive`` (:func:`archive`,
    :func:`depnmt.data.record.check_folders`),
    each a field (:func:`~depnmt.core.optionspec.option`)."""

    out: Path | None = option(None, "archive folder: OUT/<FOLDER's name>/models/NAME/ and hyps/, "
                              "OUT/data.json", Folder(), flag=("-o", "--output"), required=True,
                              metavar="OUT")
    check: tuple[Path, ...] = option((), "a data folder (bpe, parse; repeatable): check it and the "
                                     "folders it was made from against OUT/data.json first "
                                     "(nothing to check without one)", Folder(exists=True),
                                     flag="--check-data", multiple=True)

    def __post_init__(self):
        check_options(self)

    def check_request(self, folders: Sequence[Path]) -> None:
        """A :class:`UsageError` when there is nothing to do: no ``folders`` to archive, no
        ``--check-data``."""
        if not folders and not self.check:
            raise UsageError("give the results FOLDERS to archive, or --check-data DIR")


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
    runs = runs_in_folders(list(folders))
    make_dir(out)
    with hold_lock(sibling(out, "lock"), out, "another `depnmt archive` writes this folder",
                   wait=True):
        return archive_runs(runs, out)


def archive_runs(runs: Sequence, out: Path) -> list[Path]:
    """Record the data of ``runs`` (:class:`depnmt.evaluation.runs.System`) and copy their files
    into
    ``out`` (holding its lock); returns the archived model folders."""
    record_runs([(archived_name(run.model_dir), run.model_dir) for run in runs], out)
    delay = float(os.environ.get(COMMIT_DELAY, "0") or 0)   # tests: two archives at once
    if delay:
        time.sleep(delay)
    archived = []
    for run in runs:
        model = make_dir(out / archived_name(run.model_dir))
        for name in MODEL_FILES:
            copy_file(run.model_dir / name, model / name)
        hyps = make_dir(model.parent.parent / "hyps")
        for evidence in (run.likelihood, run.settings):
            if evidence.is_file():
                copy_file(evidence, hyps / evidence.name)
        copy_file(run.hyp, hyps / run.hyp.name)
        archived.append(model)
    return archived


def archived_name(model_dir: Path) -> str:
    """Where the run in ``model_dir`` (``FOLDER/models/NAME``) goes in the archive:
    ``<FOLDER's name>/models/NAME``."""
    return f"{model_dir.parent.parent.resolve().name}/models/{model_dir.name}"
