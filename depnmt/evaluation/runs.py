"""``depnmt runs``: where every training run under some folders stands — for a campaign of many
runs that is stopped and continued over days, without opening any log.

A run is a model directory (``config.json`` and ``metrics.jsonl``, as ``depnmt train`` writes
them). Its state:

* ``training`` — a process holds its training lock (found in ``/proc/locks``: the lock itself
  is not touched, so a status query never gets in a trainer's way);
* ``finished`` — ``manifest.json`` exists; why it ended is read from the recorded progress:
  ``early stop`` (the selection metric did not improve for ``--patience`` validations),
  ``epoch cap`` (``--max-epochs``), ``update cap`` (``--max-steps``) or ``time cap``;
* ``stopped`` — a ``last.pt`` but no manifest and no live trainer: ``depnmt train ... --resume``
  (or re-running a recipe) continues it;
* ``not saved`` — no checkpoint yet.

A run resumed on other data on purpose (``train --resume-on-changed-data``) says so after its
state: ``data changed at update N`` (the JSON lists what changed, ``data_changed``); one
resumed with other settings (``--warmup``, ``--max-steps``, ...) says ``settings changed at
update N`` (``settings_changed``).

In the comparison recipes' layout (``FOLDER/models/NAME`` beside ``FOLDER/hyps/NAME.LANG``) it
also says whether the run's test hypotheses are written.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from depnmt.core.errors import DepnmtError
from depnmt.core.log import warn
from depnmt.core.manifest import load_manifest
from depnmt.core.optionspec import check_options, option
from depnmt.core.schemename import scheme_name
from depnmt.storage.modeldir import checkpoint_dir, read_config, read_metrics
from depnmt.training.provenance import EVENT, KEY as PROVENANCE, SETTINGS_EVENT, control_text

RESERVED = {"last", "best"}


@dataclass
class System:
    """One run of a system: its name in the table, model directory and hypothesis file."""

    name: str
    model_dir: Path
    hyp: Path

    @property
    def likelihood(self) -> Path:
        """Its test likelihood file, beside the hypotheses (:mod:`depnmt.decoding.likelihood`)."""
        from depnmt.decoding.likelihood import likelihood_file
        return likelihood_file(Path(self.hyp))

    @property
    def settings(self) -> Path:
        """``HYP.settings``: what the comparison recipes made its hypotheses (and test
        likelihood) with (``recipes/lib/compare.sh``: ``record_settings``), when they did."""
        hyp = Path(self.hyp)
        return hyp.with_name(hyp.name + ".settings")


@dataclass
class RunsSettings:
    """The options of ``depnmt runs``, each a field (:func:`~depnmt.core.optionspec.option`)."""

    as_json: bool = option(False, "one JSON object per run instead of a table", flag="--json")

    def __post_init__(self):
        check_options(self)


def training_summary(model_dir: Path, records: list[dict] | None = None) -> dict:
    """What ``depnmt train`` logged: scheme, seed, parameters, updates, seconds, mean target
    tokens/s and 1-minute load average over the logged windows, best dev BLEU, the selected
    validation (updates, epoch and dev loss of the last one marked best), the last dev UAS
    values (DBSA) and the resumes on changed data (:func:`data_changes`). ``records``: the
    run's ``metrics.jsonl`` when the caller has read it already."""
    config = read_config(model_dir)
    records = read_metrics(model_dir) if records is None else records
    start = next((r for r in records if r["event"] == "start"), {})
    train = [r for r in records if r["event"] == "train"]
    valid = [r for r in records if r["event"] == "valid"]
    ends = [r for r in records if r["event"] == "end"]
    timed = [r for r in records if r["event"] != EVENT]     # its time is the clock's
    selected = next((r for r in reversed(valid) if r.get("best")), None)
    summary = {
        "scheme": scheme_name(config["model"]["schemes"]),       # e.g. abs+dbsa-enc
        "trees": trees_trained_on(config),
        "seed": config.get("training", {}).get("seed"),
        "parameters": start.get("parameters"),
        "updates": max((r["step"] for r in records), default=0),
        "train_seconds": sum(r["elapsed"] for r in ends) if ends else
        (timed[-1]["time"] if timed else None),
        "tgt_tokens_per_s": (sum(r["tgt_tokens_per_s"] for r in train) / len(train)
                             if train else None),
        "load": mean_of([r["load"] for r in train if "load" in r]),
        "dev_bleu": max((r["dev_bleu"] for r in valid if "dev_bleu" in r), default=None),
        "selected_step": selected and selected["step"],
        "selected_epoch": selected and selected["epoch"],
        "selected_dev_nll": selected and selected.get("dev_nll"),
        "finished": bool(ends),
        "data_changed": resume_changes(records, EVENT),
        "settings_changed": resume_changes(records, SETTINGS_EVENT),
    }
    if valid:
        summary.update({k: v for k, v in valid[-1].items() if k.startswith("dev_uas")})
    return summary


def trees_trained_on(config: dict) -> str | None:
    """The trees a run was trained on, as the runs of one system must share them (its
    ``config.json``'s provenance): ``none``, ``the parser's trees``, or a control's kind with
    its sides (``random-projective (labels keep) control trees, src``; its seed left out, as
    the training seed: replicates may differ by it); None for a run of an earlier depnmt,
    which records no provenance."""
    provenance = config.get(PROVENANCE)
    if not isinstance(provenance, dict):
        return None
    trees = provenance.get("trees")
    if not isinstance(trees, dict):
        return "none"
    control = trees.get("control")
    if not isinstance(control, dict):
        return "the parser's trees"
    sides = ", ".join(str(side) for side in control.get("sides") or [])
    return f"{control_text(control, seed=False)} control trees" + (f", {sides}" if sides else "")


def replicate_seeds(config: dict) -> tuple[Any, Any] | None:
    """What tells a run from the other replicates of its system: its training seed and the
    seed of the control trees it trained on (None without a control), from its
    ``config.json``; None when it records no training seed (not checked)."""
    seed = config.get("training", {}).get("seed")
    if seed is None:
        return None
    trees = (config.get(PROVENANCE) or {}).get("trees")
    control = trees.get("control") if isinstance(trees, dict) else None
    settings = control.get("settings") if isinstance(control, dict) else None
    return seed, settings.get("seed") if isinstance(settings, dict) else None


def seeds_text(seeds: Sequence[Any]) -> str:
    """``seed 7`` or ``seed 7 and control seed 1`` for a run's :func:`replicate_seeds`; an
    ensemble's (a tuple of its members') joined with ``+``."""
    if seeds and isinstance(seeds[0], (tuple, list)):
        return " + ".join(seeds_text(s) for s in seeds)
    seed, control = seeds
    return f"seed {seed}" + (f" and control seed {control}" if control is not None else "")


def replicate_problem(runs: Sequence[tuple[str, str | None, Any]]) -> str | None:
    """What keeps ``runs`` — per run its name, the trees it trained on
    (:func:`trees_trained_on`) and its seeds (:func:`replicate_seeds`; None where not
    recorded: not compared) — from being replicates of one system, as ``report`` and
    ``contrastive --compare`` require: runs on different trees (the parser's and a control's,
    two control kinds), or two with the same seeds on the same trees (the same initial weights
    and batch order: their spread is not the seed-to-seed noise the intervals, the p-values
    over runs and the power table take it for). None when they are replicates."""
    trees = sorted({t for _, t, _ in runs if t is not None})
    if len(trees) > 1:
        return (f"mixes runs on different trees: {'; '.join(trees)} (a control is a system of "
                f"its own)")
    seen: dict[Any, str] = {}
    for name, _, seeds in runs:
        if seeds is None:
            continue
        if seeds in seen:
            return (f"has two runs trained with {seeds_text(seeds)} on the same trees, "
                    f"{seen[seeds]} and {name}: runs of a system differ by seed (train --seed), "
                    f"else their spread is not training noise")
        seen[seeds] = name
    return None


def resume_changes(records: Sequence[dict], event: str) -> list[dict]:
    """The resumes the log records as ``event``: on other data (``data_changed``, ``train
    --resume-on-changed-data``) or with other settings (``settings_changed``): ``step`` (the
    update the run continued from) and ``changed`` (what differed) of each."""
    return [{"step": r.get("step"), "changed": r.get("changed") or []}
            for r in records if r["event"] == event]


def changes_note(state: dict[str, Any]) -> str:
    """``data changed at update 10``, ``settings changed at update 10, 40``, both, or "" when
    the run trained on one data set with one set of settings (a :func:`run_state` record)."""
    notes = [f"{what} changed at update {', '.join(str(c['step']) for c in changes)}"
             for what, changes in (("data", state.get("data_changed")),
                                   ("settings", state.get("settings_changed"))) if changes]
    return "; ".join(notes)


def mean_of(values: Sequence) -> float | None:
    """The mean of the values that are not None (None when there are none)."""
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def runs_in_folders(folders: Sequence[Path]) -> list[System]:
    """The runs of the recipes' layout: every ``FOLDER/models/NAME`` with a finished training
    (``manifest.json``) and a hypothesis file ``FOLDER/hyps/NAME.<target language>``; each
    folder is one replicate (e.g. ``compare``, ``compare-seed2``). Unfinished ones are skipped
    with a warning, and so is a run a process trains (a finished run resumed to train on keeps
    its earlier ``manifest.json`` while its log and checkpoints change)."""
    runs = []
    for folder in folders:
        models = folder / "models"
        if not models.is_dir():
            raise DepnmtError(f"{folder}: no models/ folder (expected the layout of the "
                              f"comparison recipes: models/NAME and hyps/NAME.LANG)")
        for model in sorted(p for p in models.iterdir() if p.is_dir()):
            config = read_config(model)
            hyp = folder / "hyps" / f"{model.name}.{config['tgt_lang']}"
            pid = trainer_pid(model)
            if pid is not None:
                warn(f"{model}: skipped (training, process {pid}: its log and checkpoints are "
                     f"changing)")
            elif (model / "manifest.json").exists() and hyp.exists() and hyp.stat().st_size:
                runs.append(System(model.name, model, hyp))
            else:
                warn(f"{model}: skipped (training or translation not finished)")
    if not runs:
        raise DepnmtError(f"no finished runs in {', '.join(map(str, folders))}")
    return runs


def model_dirs(folders: Sequence[Path]) -> list[Path]:
    """Every model directory at or below ``folders``, sorted by path."""
    found: set[Path] = set()
    for folder in folders:
        if not folder.is_dir():
            raise DepnmtError(f"{folder}: not a folder")
        for config in [folder / "config.json", *folder.rglob("config.json")]:
            if config.is_file() and (config.parent / "metrics.jsonl").is_file():
                found.add(config.parent)
    return sorted(found)


def trainer_pid(model_dir: Path) -> int | None:
    """The process holding ``model_dir``'s training lock, or None. Read from ``/proc/locks``
    on Linux (the lock is not touched); elsewhere the process ``.lock`` names when it is alive
    (which can be wrong after the trainer ended and its number was reused)."""
    lock = model_dir / ".lock"
    try:
        st = lock.stat()
    except OSError:
        return None
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return _named_pid(lock)
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->":              # a waiter, not the holder
            continue
        major, minor, inode = fields[5].split(":")
        if (int(inode) == st.st_ino and int(major, 16) == os.major(st.st_dev)
                and int(minor, 16) == os.minor(st.st_dev)):
            return int(fields[4])
    return None


def _named_pid(lock: Path) -> int | None:
    """The process ``lock`` names, when it is alive."""
    try:
        pid = int(lock.read_text().strip() or 0)
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:         # alive, owned by someone else
        return pid
    return pid


def finish_reason(progress: dict[str, Any], training: dict[str, Any]) -> str:
    """Why a finished run ended, from the manifest's progress and the training options."""
    epochs_done = progress.get("epoch", 1) - (1 if not progress.get("batches_done") else 0)
    if training.get("patience") and progress.get("bad_validations", 0) >= training["patience"]:
        return "early stop"
    if training.get("max_epochs") and epochs_done >= training["max_epochs"]:
        return "epoch cap"
    if training.get("max_steps") and progress.get("step", 0) >= training["max_steps"]:
        return "update cap"
    if training.get("max_minutes"):
        return "time cap"
    return "finished"


def minutes_per_epoch(records: Sequence[dict[str, Any]], last: int = 3) -> float | None:
    """Median wall minutes per epoch over the last ``last`` pairs of consecutive validations
    of one process (no ``start`` record between them: a resume's lost work is not counted);
    None without two such validations."""
    spans, prev = [], None
    for r in records:
        if r["event"] == "start":
            prev = None
        elif r["event"] == "valid":
            if prev is not None and r.get("epoch", 0) > prev.get("epoch", 0):
                spans.append((r["time"] - prev["time"]) / 60 / (r["epoch"] - prev["epoch"]))
            prev = r
    spans = sorted(spans[-last:])
    return spans[len(spans) // 2] if spans else None


def minutes_left(epoch: int, training: dict[str, Any], per_epoch: float | None) -> float | None:
    """Wall minutes to the epoch cap at the recent pace, for a run in its epoch ``epoch``
    (counted as not started: an upper bound, which early stopping can cut short): (max epochs
    − epochs done) × minutes per epoch; None without ``--max-epochs`` or a pace."""
    cap = training.get("max_epochs")
    if not cap or per_epoch is None:
        return None
    return max(cap - max(epoch - 1, 0), 0) * per_epoch


def run_state(model_dir: Path) -> dict[str, Any]:
    """One run's record: ``run``, ``scheme``, ``seed``, ``state`` (see the module docstring),
    ``epoch`` and ``updates`` reached, wall minutes per epoch lately, at most how many
    minutes are left to the epoch cap at that pace (:func:`minutes_left`), the selection metric's
    ``best`` value and the update it came from, the last validation's metric, the averaged
    checkpoints, whether the recipe's hypothesis file is written (None outside the recipes'
    layout) and the resumes on changed data or settings (``data_changed``,
    ``settings_changed``: :func:`resume_changes`)."""
    config = read_config(model_dir)
    training = config.get("training", {})
    records = read_metrics(model_dir)
    summary = training_summary(model_dir, records)
    metric = "dev_" + (training.get("early_stop_metric") or "bleu").replace("loss", "nll")
    valid = [r for r in records if r["event"] == "valid"]
    if valid and metric not in valid[-1]:       # bleu without dev references: the loss selects
        metric = "dev_nll"
    best = [r for r in valid if r.get("best")]
    ckpt = checkpoint_dir(model_dir)
    manifest = model_dir / "manifest.json"
    pid = trainer_pid(model_dir)
    if pid is not None:
        state = f"training (process {pid})"
    elif manifest.exists():
        progress = load_manifest(model_dir, "train", verify=False).get("progress", {})
        state = f"finished: {finish_reason(progress, training)}"
    elif (ckpt / "last.pt").exists():
        state = "stopped (resumable)"
    else:
        state = "not saved"
    epoch = max((r.get("epoch", 0) for r in records if r["event"] in ("train", "valid")),
                default=0)
    per_epoch = minutes_per_epoch(records)
    left = None if state.startswith("finished") else minutes_left(epoch, training, per_epoch)
    hyps = model_dir.parent.parent / "hyps"
    written = None
    if model_dir.parent.name == "models" and hyps.is_dir():
        hyp = hyps / f"{model_dir.name}.{config.get('tgt_lang', '')}"
        written = hyp.is_file() and hyp.stat().st_size > 0
    return {
        "run": str(model_dir),
        "scheme": summary["scheme"],
        "seed": summary["seed"],
        "state": state,
        "epoch": epoch,
        "updates": summary["updates"],
        "metric": metric,
        "best": best[-1].get(metric) if best else None,
        "best_step": best[-1]["step"] if best else None,
        "last": valid[-1].get(metric) if valid else None,
        "min_per_epoch": per_epoch,
        "max_min_left": left,
        "averages": sorted(p.stem for p in ckpt.glob("*.pt")
                           if p.stem not in RESERVED and not p.stem.startswith("step"))
        if ckpt.is_dir() else [],
        "hypothesis": written,
        "data_changed": summary["data_changed"],
        "settings_changed": summary["settings_changed"],
    }


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, list):
        return ", ".join(value) or "–"
    return str(value)


def markdown(states: Sequence[dict[str, Any]], root: Path | None = None) -> str:
    """The records as a markdown table (run paths relative to ``root`` when under it)."""
    head = ["run", "scheme", "seed", "state", "epoch", "updates", "min/epoch", "≤ min left",
            "selection metric", "best", "at update", "last", "averaged", "test hypotheses"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in states:
        run = Path(s["run"])
        if root is not None and run.is_relative_to(root):
            run = run.relative_to(root)
        state = "; ".join(filter(None, [s["state"], changes_note(s)]))
        cells = [str(run), s["scheme"], s["seed"], state, s["epoch"], s["updates"],
                 None if s["min_per_epoch"] is None else round(s["min_per_epoch"], 1),
                 None if s["max_min_left"] is None else round(s["max_min_left"]),
                 s["metric"], s["best"], s["best_step"], s["last"], s["averages"],
                 s["hypothesis"]]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)
