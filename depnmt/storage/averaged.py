"""What an average of checkpoints (``depnmt average``) records about the snapshots it averaged,
and the check, at every load of the average, that it still stands for the run.

An average is made once, from the ``step{N}.pt`` snapshots there were then; the run may go on
afterwards (``train --resume``, or an average taken while the model trains), and a resumed run
writes a snapshot it had written before again. ``NAME.pt`` records, under
:data:`SOURCES`, each snapshot it averaged (file name, update, the SHA-256 of the whole
checkpoint and of its weights alone) and, under :data:`NEWEST`, the newest snapshot's update
when it was made. Loading it (``translate``, ``rescore``, ``contrastive``, ``export``, the
API) then

* refuses it, naming the file, when a snapshot it averaged is still in its folder but holds
  other weights (it was written again on other data or with other options): the average is no
  longer the mean of the checkpoints of that name;
* warns when the run has snapshots newer than the newest one when it was made (it trained on):
  the average is what it was, the mean of the updates it names, not of the run's latest ones
  (``depnmt average`` again averages those).

A snapshot that ``--keep-last`` has deleted since cannot be compared and is not missed: the
average keeps the weights it computed. Averages made before sources were recorded load as
before.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from depnmt.core.errors import DepnmtError
from depnmt.core.log import warn
from depnmt.storage.checkpoint import content_digest, load_checkpoint, recorded_digest

SOURCES = "averaged_sources"        # [{name, step, sha256, weights_sha256}] of an average
NEWEST = "newest_snapshot"          # the newest snapshot's update when the average was made


def snapshot_step(path: Path) -> int | None:
    """N of a ``step{N}.pt`` snapshot's name, else None."""
    digits = path.stem[4:]
    return int(digits) if path.stem.startswith("step") and digits.isdigit() else None


def newest_snapshot(folder: Path) -> int | None:
    """The highest update of the ``step{N}.pt`` snapshots in ``folder`` (None: none)."""
    steps = [snapshot_step(p) for p in folder.glob("step*.pt")]
    return max((s for s in steps if s is not None), default=None)


def source_record(path: Path, state: dict[str, Any]) -> dict[str, Any]:
    """What an average records of the snapshot ``path`` (loaded, and so verified, as
    ``state``): its name, update and the SHA-256 of the whole checkpoint (the one it records,
    which loading it checked; computed only for a checkpoint of an earlier version that
    records none) and of its weights."""
    whole = recorded_digest(path) or content_digest(state)
    return {"name": path.name, "step": state.get("progress", {}).get("step", snapshot_step(path)),
            "sha256": whole, "weights_sha256": content_digest(state["model"])}


def average_record(folder: Path, sources: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What an average of snapshots of ``folder`` (their :func:`source_record` ``sources``)
    records about them: :data:`SOURCES` and :data:`NEWEST` (module docstring)."""
    return {SOURCES: list(sources), NEWEST: newest_snapshot(folder)}


def check_average(path: Path, state: dict[str, Any]) -> None:
    """The average ``path`` (a loaded checkpoint ``state``) against the snapshots beside it:
    a :class:`DepnmtError` when one it averaged holds other weights now, a warning when newer
    ones exist (module docstring). Other checkpoints: nothing to check."""
    sources = state.get(SOURCES)
    if not isinstance(sources, list):
        return
    for source in sources:
        snapshot = path.parent / str(source.get("name"))
        if snapshot.is_file() and not same_snapshot(snapshot, source):
            raise DepnmtError(f"{path}: an average of {snapshot.name} (update {source.get('step')})"
                              f", which holds other weights now (written again since the average "
                              f"was made): run `depnmt average` again")
    newest, then = newest_snapshot(path.parent), state.get(NEWEST)
    if isinstance(then, int) and newest is not None and newest > then:
        steps = ", ".join(str(s.get("step")) for s in sources)
        warn(f"{path}: the average of updates {steps}; the run has trained to update {newest} "
             f"since (step{newest}.pt): `depnmt average` again to average its newest snapshots")


def same_snapshot(snapshot: Path, source: dict[str, Any]) -> bool:
    """Whether the file ``snapshot`` holds the weights ``source`` records: at once when the
    file's recorded SHA-256 is the one averaged, else by loading it and comparing its weights
    (a snapshot written again by an exact resume holds the same weights with another time)."""
    if recorded_digest(snapshot) == source.get("sha256"):
        return True
    return content_digest(load_checkpoint(snapshot).get("model")) == source.get("weights_sha256")
