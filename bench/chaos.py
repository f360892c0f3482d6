"""Chaos per stage: SIGKILLs, two writers, a full disk and a read-only folder against every
stage that writes files (prepare, parse, bpe, train, average, export, report), on the tiny
corpus (the first 400 Multi30k pairs of ``../shared/data``, 300 BPE merges, a 1-layer model);
the short version is ``tests/cli/test_chaos.py``, which imports these functions.

Each stage writes a folder OUT (``average``: a copy of a trained model, where it adds
``checkpoints/avg.pt``; ``report``: the folder of ``-o OUT/results``). An uninterrupted run
gives the reference :func:`snapshot` of OUT and the command's duration D (launch to exit).
Then, for each stage:

* kills — ``--kills`` times: the command is started and SIGKILLed at a moment uniform over
  [0, D]; a downstream reader (:class:`Stage` ``read``: ``load_manifest`` of the folder, the
  checkpoints, the report's JSON) must then see the reference output, none, or fail with a
  ``DepnmtError`` (a clear error) — never a mixed or partial output it accepts; then the same
  command runs again and must give the reference snapshot, or one ``error:`` line (``train``:
  "already holds a trained model; pass --resume", after which ``--resume`` must give the
  reference but for the records the resume adds: :func:`as_resumed`). Each kill starts from
  what the previous one left (a complete output, which the run replaces), except
  ``train``'s, which start from a fresh folder (it refuses to replace a trained model);
* two writers — the command twice, the second started a moment (uniform over [0, D/2]) after
  the first: each exits 0 or with one ``error:`` line, and OUT is the reference;
* full disk — OUT on a tmpfs too small for it (``mount -t tmpfs``, as root) or, where
  mounting is not allowed, a file size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored: EFBIG);
* read-only — the previous complete output (``train``: an empty folder) made read-only
  (chmod 555), the command run without root's power to ignore permissions.

Full disk and read-only must give one ``error:`` line, a non-zero exit and OUT as it was
before (``train``: a model folder the reader accepts or refuses clearly; a training run that
stops keeps its checkpoints by design). No outcome may print a Python traceback.

**What "identical" means** (:func:`normalize`): every file byte for byte, except fields that
differ between two uninterrupted runs of the same command — in ``manifest.json`` (compared
as parsed JSON) ``created`` (the wall clock) and, in train's, ``progress.elapsed`` (seconds
of training); in ``metrics.jsonl`` each record's ``time`` and the end record's ``elapsed``
(seconds since the start), ``tgt_tokens_per_s``, ``src_tokens_per_s``, ``batch_wait_s``,
``batch_wait_share`` (speed) and ``load`` (the machine's load average); in a checkpoint (``*.pt``,
compared as loaded: every tensor
bit for bit, all other values equal) ``progress.elapsed`` and ``sha256`` (the digest over
the rest, ``elapsed`` included). Not compared: lock files (``*.lock``: the model folder's
``.lock``, ``average``'s ``checkpoints/.NAME.pt.lock``, holding the PID of the last writer)
and temporary files of killed writers (``*.tmp``, counted as "temp files left": no reader
opens them).

    python bench/chaos.py                         # 20 kills per stage
    python bench/chaos.py --kills 5 --stages prepare,bpe

Exit status 1 when any outcome fails.
"""

from __future__ import annotations

import ctypes
import importlib.util
import io
import json
import os
import random
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import click

BENCH = Path(__file__).resolve().parent
ENV = {"DEPNMT_NO_PROGRESS": "1", "OMP_NUM_THREADS": "1", "DEPNMT_PRECISION": "fp32"}
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--max-tokens", "400",
        "--warmup", "10", "--lr", "3e-3", "--log-every", "2", "--valid-max-sentences", "10",
        "--beam", "2", "--device", "cpu"]
TIMING = {"manifest.json": {"created", "elapsed"}, "checkpoint": {"elapsed", "sha256"},
          "metrics.jsonl": {"time", "elapsed", "tgt_tokens_per_s", "src_tokens_per_s", "load",
                            "batch_wait_s", "batch_wait_share"}}


# --- what a folder holds -------------------------------------------------------------------

def normalize(name: str, data: bytes):
    """The comparable content of the file ``name`` (module docstring: the fields left out)."""
    base = Path(name).name
    if base == "manifest.json":
        return without(json.loads(data), TIMING[base])
    if base == "metrics.jsonl":
        return [without(json.loads(line), TIMING[base]) for line in data.decode().splitlines()]
    if base.endswith(".pt"):
        import torch
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        return without(state, TIMING["checkpoint"])
    return data


def without(x, keys: set[str]):
    """``x`` (JSON data or a checkpoint's state) without the dict entries named ``keys`` at
    any depth; tensors as ``(dtype, shape, bytes)``, so that ``==`` compares them bit for
    bit."""
    if isinstance(x, dict):
        return {k: without(v, keys) for k, v in x.items() if k not in keys}
    if isinstance(x, (list, tuple)):
        return [without(v, keys) for v in x]
    if hasattr(x, "numpy"):                  # a torch.Tensor
        return str(x.dtype), tuple(x.shape), x.contiguous().numpy().tobytes()
    return x


def temporary(name: str) -> bool:
    """A temporary file of an interrupted writer (``atomic_open``'s ``.NAME.XXXX.tmp``)."""
    return name.endswith(".tmp")


def snapshot(folder: Path) -> dict | None:
    """``{relative path: normalized content}`` of every file under ``folder`` (temporary files
    and lock files left out); None when there is no folder."""
    if not folder.is_dir():
        return None
    return {p.relative_to(folder).as_posix(): normalize(p.name, p.read_bytes())
            for p in sorted(folder.rglob("*"))
            if p.is_file() and not temporary(p.name) and not p.name.endswith(".lock")}


def observe(folder: Path) -> dict[str, bytes] | None | str:
    """The files of ``folder`` (flat) read through one open handle of it, so that a rename
    during the read cannot mix two folders: ``{name: normalized content}``; None when there is
    no folder; "gone" when the folder read was renamed away from ``folder`` (a writer replacing
    it, then deleting its files) before the read ended — what such a handle lists is no longer
    the stage's output, and may be empty or a part of it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return None
    files = {}
    try:
        for name in os.listdir(fd):
            with os.fdopen(os.open(name, os.O_RDONLY, dir_fd=fd), "rb") as fh:
                files[name] = normalize(name, fh.read())
        if not same_inode(fd, folder):
            return "gone"
    except FileNotFoundError:
        return "gone"
    finally:
        os.close(fd)
    return files


def same_inode(fd: int, path: Path) -> bool:
    """Whether ``path`` still names the file that ``fd`` has open."""
    try:
        here, there = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        return False
    return (here.st_dev, here.st_ino) == (there.st_dev, there.st_ino)


def leftovers(out: Path) -> list[str]:
    """What writers of ``out`` left beside it (``.OUT.tmp-PID``, ``.OUT.old-PID``) and in it
    (``*.tmp``), besides the lock file."""
    beside = [p.name for p in out.parent.glob(f".{out.name}.*") if p.name != f".{out.name}.lock"]
    inside = [str(p.relative_to(out)) for p in out.rglob("*.tmp")] if out.is_dir() else []
    return sorted(beside + inside)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def label(line: str, out: Path) -> str:
    """An error line as a table row: ``out`` shown as OUT, process ids as PID."""
    return re.sub(r"process \d+", "process PID", line.replace(str(out), "OUT"))


def one_error(proc: subprocess.CompletedProcess) -> str | None:
    """The error line when ``proc`` failed with exactly one ``error:`` line and no traceback;
    None otherwise."""
    errors = error_lines(proc.stderr)
    if proc.returncode != 0 and len(errors) == 1 and "Traceback" not in proc.stderr:
        return errors[0]
    return None


# --- running depnmt ------------------------------------------------------------------------

def command(args: list) -> list[str]:
    return [sys.executable, "-m", "depnmt.cli", *map(str, args)]


def start(args: list, preexec: Callable[[], None] | None = None) -> subprocess.Popen:
    """``depnmt ARGS`` in the background, output captured as text."""
    return subprocess.Popen(command(args), env={**os.environ, **ENV}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec)


def finish(proc: subprocess.Popen) -> subprocess.CompletedProcess:
    out, err = proc.communicate()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def run(args: list, preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess:
    return finish(start(args, preexec))


def limit_file_size(limit: int) -> Callable[[], None]:
    """A ``preexec_fn``: files of at most ``limit`` bytes, EFBIG past it (SIGXFSZ ignored)."""
    def limited():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return limited


PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def drop_root_powers() -> None:
    """A ``preexec_fn``: as root, drop the capabilities that let root ignore file permissions
    (raises ``OSError`` where that is not allowed)."""
    if os.geteuid() == 0:
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
            if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


@contextmanager
def small_disk(size: int) -> Iterator[Path | None]:
    """A folder on a tmpfs of ``size`` bytes (unmounted afterwards), or None where mounting is
    not allowed."""
    root = Path(tempfile.mkdtemp(prefix="depnmt-chaos-disk-"))
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(root)],
                             capture_output=True).returncode == 0 if os.geteuid() == 0 else False
    try:
        yield root if mounted else None
    finally:
        if mounted:
            subprocess.run(["umount", str(root)], check=True)
        shutil.rmtree(root, ignore_errors=True)


def disk_usage(folder: Path, page: int = 4096) -> int:
    """Bytes the files under ``folder`` take on a tmpfs (whole pages)."""
    if not folder.exists():
        return 0
    return sum(-(-p.stat().st_size // page) * page for p in folder.rglob("*") if p.is_file())


# --- the stages ----------------------------------------------------------------------------

def random_trees(prep: Path, folder: Path, seed: int) -> Path:
    """Random trees over the English side of every split of ``prep``, in ``folder`` (made
    once)."""
    from depnmt.core.trees import random_heads
    from depnmt.stages.parse import Sentence, write_conllu
    if not folder.exists():
        rng = random.Random(seed)
        for split in ("train", "dev", "test"):
            trees = []
            for line in (prep / f"{split}.en").read_text(encoding="utf-8").splitlines():
                heads = random_heads(len(line.split()), rng)
                trees.append(Sentence(line.split(), heads,
                                      ["root" if h == 0 else "dep" for h in heads]))
            write_conllu(folder / f"{split}.en.conllu", trees)
    return folder


def read_stage_folder(stage: str) -> Callable[[Path], None]:
    """The next stage's reader of a stage folder: ``load_manifest`` (line counts checked)."""
    def read(out: Path) -> None:
        from depnmt.core.manifest import load_manifest
        load_manifest(out, stage)
    return read


def read_model(out: Path) -> None:
    """What ``translate`` reads of a model folder: its config and every checkpoint in it."""
    from depnmt.storage.modeldir import load_model_checkpoint, read_config
    config = read_config(out)
    for path in sorted((out / "checkpoints").glob("*.pt")):
        load_model_checkpoint(path, config["model"])


def read_export(out: Path) -> None:
    """What ``translate --ct2`` reads first: the export's description."""
    from depnmt.core.textio import read_json
    read_json(out / "depnmt-export.json", f"{out}: no depnmt-export.json")


def read_report(out: Path) -> None:
    """A reader of the report: its JSON; the table and the figure beside it must exist."""
    from depnmt.core.textio import read_json
    read_json(out / "results.json", f"{out}: no results.json")
    missing = [n for n in ("results.md", "results.png") if not (out / n).exists()]
    if missing:
        raise PartialOutput(f"{out}: results.json without {', '.join(missing)}")


class PartialOutput(Exception):
    """A reader found an output it would accept, yet incomplete."""


@dataclass
class Stage:
    """How to run one stage into a folder ``out`` of the corpus folder ``work`` and read it."""
    name: str
    args: Callable[[Path, Path], list]
    read: Callable[[Path], None]
    seed: Callable[[Path, Path], None] = lambda work, out: None     # what out holds first
    read_only: Callable[[Path], Path] = lambda out: out             # the folder to chmod
    resume: list = field(default_factory=list)   # run after the re-run's one-line error
    all_or_nothing: bool = True                  # a failed run leaves out as it was
    replaces: bool = True      # a run replaces a complete output (train refuses: each kill
                               # starts from a fresh folder)


def train_args(work: Path, out: Path) -> list:
    return ["train", "-i", work / "bpe", "-o", out, *TINY, "--max-steps", "8",
            "--valid-every", "4", "--save-every", "4", "--keep-last", "2"]


def base_model(work: Path) -> Path:
    """The trained model that average, export and report start from (made once)."""
    model = work / "base-model"
    if not (model / "checkpoints" / "last.pt").exists():
        shutil.rmtree(model, ignore_errors=True)
        proc = run(train_args(work, model))
        if proc.returncode != 0:
            raise SystemExit(f"training the base model failed:\n{proc.stderr}")
    return model


def copy_model(work: Path, out: Path) -> None:
    shutil.copytree(base_model(work), out)


def make_empty(work: Path, out: Path) -> None:
    out.mkdir()


STAGES = {s.name: s for s in [
    Stage("prepare", lambda w, o: [
        "prepare", "--src-lang", "en", "--tgt-lang", "de", "--train-src",
        w / "prepare" / "train.raw.en", "--train-tgt", w / "prepare" / "train.raw.de",
        "--dev-size", "20", "--test-size", "20", "-o", o], read_stage_folder("prepare")),
    Stage("parse", lambda w, o: [
        "parse", "-i", w / "prepare", "-o", o, "--backend", "conllu", "--conllu-dir",
        random_trees(w / "prepare", w / "given-trees", 0)], read_stage_folder("parse")),
    Stage("bpe", lambda w, o: ["bpe", "-i", w / "prepare", "-o", o, "--merges", "300"],
          read_stage_folder("bpe")),
    Stage("train", train_args, read_model, resume=["--resume"], all_or_nothing=False,
          replaces=False),
    Stage("average", lambda w, o: ["average", "-m", o, "--last", "2", "-o", "avg"], read_model,
          seed=copy_model, read_only=lambda o: o / "checkpoints"),
    Stage("export", lambda w, o: ["export", "-m", base_model(w), "-o", o, "--force"],
          read_export),
    Stage("report", lambda w, o: [
        "report", "--ref", w / "prepare" / "test.raw.de", "-s", "a", base_model(w),
        w / "prepare" / "test.raw.de", "-o", o / "results", "--bootstrap", "0",
        "--shuffles", "0"], read_report, seed=make_empty),
]}


# --- the checks ----------------------------------------------------------------------------

@dataclass
class Reference:
    """An uninterrupted run's output, duration (seconds, launch to exit), the bytes its folder
    takes on a tmpfs and its largest file's size."""
    content: dict
    seconds: float
    disk: int
    largest: int


def reference(stage: Stage, work: Path, out: Path) -> Reference:
    """Run ``stage`` uninterrupted into a fresh ``out`` (the folder the checks then use: an
    output may name its own folder, as export's README does)."""
    fresh(stage, work, out)
    started = time.monotonic()
    proc = run(stage.args(work, out))
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"{stage.name}: the uninterrupted run failed:\n{proc.stderr}")
    largest = max(p.stat().st_size for p in out.rglob("*") if p.is_file())
    return Reference(snapshot(out), seconds, disk_usage(out), largest)


def fresh(stage: Stage, work: Path, out: Path) -> None:
    """``out`` as the stage finds it before its first run (none, an empty folder, a model)."""
    shutil.rmtree(out, ignore_errors=True)
    for left in out.parent.glob(f".{out.name}.*"):
        shutil.rmtree(left) if left.is_dir() else left.unlink()
    stage.seed(work, out)


def reader_verdict(stage: Stage, out: Path, ref: Reference, before: dict | None) -> str | None:
    """None when a downstream reader sees the reference, the output before the run, or fails
    with a clear error; else what is wrong."""
    from depnmt.core.errors import DepnmtError
    seen = snapshot(out)
    try:
        stage.read(out)
    except DepnmtError:
        return None                       # refused clearly
    except Exception as exc:              # noqa: BLE001 — a reader crash is the failure
        return f"reader: {type(exc).__name__}: {exc}"
    if not stage.all_or_nothing or seen in (ref.content, before):
        return None
    return "reader accepted an output that is neither the previous nor the complete one"


def rerun_verdict(stage: Stage, work: Path, out: Path, ref: Reference,
                  outcomes: Counter) -> str | None:
    """Run the command again (then ``stage.resume`` after a one-line error, when the stage
    has one); None when the result is the reference or one error line."""
    proc = run(stage.args(work, out))
    if proc.returncode == 0:
        outcomes["identical after re-run"] += 1
        return None if snapshot(out) == ref.content else "re-run: output differs from reference"
    line = one_error(proc)
    if line is None:
        return f"re-run: exit {proc.returncode} without one error line:\n{proc.stderr[-2000:]}"
    outcomes[f"re-run: {label(line, out)}"] += 1
    if stage.resume:
        resumed = run([*stage.args(work, out), *stage.resume])
        if resumed.returncode != 0:
            return f"resume failed:\n{resumed.stderr[-2000:]}"
        outcomes["identical after --resume"] += 1
        got, want = as_resumed(snapshot(out)), as_resumed(ref.content)
        if got != want:
            return f"resume: output differs from reference ({differing(got, want)})"
    return None


def differing(got: dict, want: dict) -> str:
    """The files two snapshots disagree on, and for JSON-like content the first differing
    top-level entry or line, so that a failure says where to look."""
    names = sorted(set(got) ^ set(want))
    if names:
        return "files only on one side: " + ", ".join(names)
    parts = []
    for name in sorted(n for n in got if got[n] != want[n]):
        a, b = got[name], want[name]
        if isinstance(a, dict) and isinstance(b, dict):
            keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            parts.append(f"{name}: {', '.join(map(str, keys))}")
        elif isinstance(a, list) and isinstance(b, list):
            first = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
            parts.append(f"{name}: record {first} of {len(a)} (reference {len(b)}): "
                         f"{str(a[first] if first < len(a) else None)[:300]} vs "
                         f"{str(b[first] if first < len(b) else None)[:300]}")
        else:
            parts.append(name)
    return "; ".join(parts)


def as_resumed(content: dict) -> dict:
    """A model folder's snapshot without what a ``--resume`` adds to an uninterrupted run's:
    its ``start`` records in ``metrics.jsonl`` and so the record count (``log_records`` of
    the checkpoints' and the manifest's ``progress``, the manifest's line count of
    ``metrics.jsonl``)."""
    content = {name: without(value, {"log_records"}) for name, value in content.items()}
    content["metrics.jsonl"] = [r for r in content.get("metrics.jsonl", [])
                                if r.get("event") != "start"]
    if "manifest.json" in content:
        content["manifest.json"].get("outputs", {}).get("metrics.jsonl", {}).pop("lines", None)
    return content


def kill_once(stage: Stage, work: Path, out: Path, ref: Reference, rng: random.Random,
              outcomes: Counter) -> str | None:
    """One SIGKILL at a uniform moment of the command's duration, the reader's check, the
    re-run; None when all is well, else the failure."""
    before = snapshot(out)
    proc = start(stage.args(work, out))
    time.sleep(rng.uniform(0.0, ref.seconds))
    if proc.poll() is None:
        proc.kill()
        outcomes["killed"] += 1
    else:
        outcomes["finished before the kill"] += 1
    finish(proc)
    return (reader_verdict(stage, out, ref, before)
            or rerun_verdict(stage, work, out, ref, outcomes))


def check_kills(stage: Stage, work: Path, out: Path, ref: Reference, kills: int,
                seed: int) -> tuple[Counter, list[str]]:
    """``kills`` kills, each from the state the previous one left (the first, and each of a
    stage that does not replace its output, from a fresh folder); the outcome counts and the
    failures."""
    rng, outcomes, failures = random.Random(seed), Counter(), []
    fresh(stage, work, out)
    for _ in range(kills):
        if not stage.replaces:
            fresh(stage, work, out)
        failure = kill_once(stage, work, out, ref, rng, outcomes)
        if failure:
            failures.append(failure)
        left = leftovers(out)
        outcomes["temp files left"] += len(left)
    return outcomes, failures


def check_two_writers(stage: Stage, work: Path, out: Path, ref: Reference,
                      rng: random.Random) -> tuple[Counter, list[str]]:
    """Two runs of the command, the second started a moment after the first."""
    outcomes, failures = Counter(), []
    fresh(stage, work, out)
    first = start(stage.args(work, out))
    time.sleep(rng.uniform(0.0, ref.seconds / 2))
    second = start(stage.args(work, out))
    for proc in (finish(first), finish(second)):
        if proc.returncode == 0:
            outcomes["writer succeeded"] += 1
        elif one_error(proc):
            outcomes[f"writer refused: {label(one_error(proc), out)}"] += 1
        else:
            failures.append(f"two writers: exit {proc.returncode}:\n{proc.stderr[-2000:]}")
    if snapshot(out) != ref.content:
        failures.append("two writers: output differs from reference")
    return outcomes, failures


def failed_cleanly(stage: Stage, out: Path, proc: subprocess.CompletedProcess,
                   before: dict | None, ref: Reference, what: str) -> str | None:
    """None when ``proc`` failed with one error line and left ``out`` as it was (a stage that
    is not all or nothing: as its reader accepts or clearly refuses)."""
    if one_error(proc) is None:
        return f"{what}: exit {proc.returncode} without one error line:\n{proc.stderr[-2000:]}"
    if stage.all_or_nothing and snapshot(out) != before:
        return f"{what}: the output changed"
    if stage.all_or_nothing and leftovers(out):
        return f"{what}: left {leftovers(out)}"
    return reader_verdict(stage, out, ref, before)


def check_full_disk(stage: Stage, work: Path, ref: Reference, scratch: Path
                    ) -> tuple[Counter, list[str]]:
    """The command on a disk too small for its output: a tmpfs holding what ``out`` holds
    before the run plus half of the reference output, or else a file size limit of half the
    reference's largest file."""
    probe = scratch / "probe"
    fresh(stage, work, probe)
    seeded = disk_usage(probe)
    shutil.rmtree(probe, ignore_errors=True)
    with small_disk(seeded + max((ref.disk - seeded) // 2, 16384)) as disk:
        out = (disk or scratch) / "full"
        fresh(stage, work, out)
        before = snapshot(out)
        preexec = None if disk else limit_file_size(max(ref.largest // 2, 4096))
        proc = run(stage.args(work, out), preexec)
        kind = "tmpfs" if disk else "RLIMIT_FSIZE"
        failure = failed_cleanly(stage, out, proc, before, ref, f"full disk ({kind})")
        line = label(one_error(proc) or "", out)
        return Counter({f"full disk ({kind}): {line}": 1}), [failure] if failure else []


def check_read_only(stage: Stage, work: Path, out: Path, ref: Reference
                    ) -> tuple[Counter, list[str]]:
    """The command into a read-only folder holding its previous complete output (a stage
    that refuses a folder holding a complete run: an empty read-only folder)."""
    if not stage.replaces:
        fresh(stage, work, out)
        out.mkdir(exist_ok=True)
    elif snapshot(out) != ref.content:      # the two writers' check leaves it complete
        fresh(stage, work, out)
        run(stage.args(work, out))
    before, target = snapshot(out), stage.read_only(out)
    target.chmod(0o555)
    try:
        proc = run(stage.args(work, out), drop_root_powers)
    finally:
        target.chmod(0o755)
    failure = failed_cleanly(stage, out, proc, before, ref, "read-only")
    line = label(one_error(proc) or "", out)
    return Counter({f"read-only: {line}": 1}), [failure] if failure else []


def check_stage(stage: Stage, work: Path, kills: int, seed: int, scratch: Path) -> dict:
    """Every check of one stage; ``{"outcomes": Counter, "failures": [...], "seconds": D}``."""
    scratch.mkdir(parents=True, exist_ok=True)
    out = scratch / "out"
    ref = reference(stage, work, out)
    outcomes, failures = check_kills(stage, work, out, ref, kills, seed)
    for more, bad in (check_two_writers(stage, work, out, ref, random.Random(seed)),
                      check_full_disk(stage, work, ref, scratch),
                      check_read_only(stage, work, out, ref)):
        outcomes.update(more)
        failures += bad
    return {"outcomes": outcomes, "failures": failures, "seconds": ref.seconds}


def tiny_corpus(work: Path) -> Path:
    """``bench/kill_resume.py``'s tiny corpus (prepare + bpe) in ``work``."""
    spec = importlib.util.spec_from_file_location("bench_kill_resume", BENCH / "kill_resume.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.tiny_corpus(work)


def table(name: str, result: dict, kills: int) -> str:
    lines = [f"{name}: uninterrupted run {result['seconds']:.1f} s, {kills} kill attempts, "
             f"{len(result['failures'])} failure(s)"]
    lines += [f"  {count:4d}  {what}" for what, count in sorted(result["outcomes"].items())]
    lines += [f"  FAIL  {f}" for f in result["failures"]]
    return "\n".join(lines)


@click.command()
@click.option("--kills", default=20, show_default=True, help="SIGKILLs per stage")
@click.option("--stages", default=",".join(STAGES), show_default=True,
              help="comma-separated stages")
@click.option("--seed", default=1, show_default=True, help="seed of the kill moments")
@click.option("--work", type=click.Path(path_type=Path, file_okay=False),
              help="working folder (default: a temporary one, removed)")
def main(kills: int, stages: str, seed: int, work: Path | None) -> None:
    unknown = set(stages.split(",")) - set(STAGES)
    if unknown:
        raise click.BadParameter(f"unknown stage(s) {', '.join(sorted(unknown))}",
                                 param_hint="--stages")
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        work = work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        tiny_corpus(work)
        for name in stages.split(","):
            started = time.monotonic()
            result = check_stage(STAGES[name], work, kills, seed, work / f"chaos-{name}")
            print(table(name, result, kills) + f"\n  ({time.monotonic() - started:.0f} s)",
                  flush=True)
            failed |= bool(result["failures"])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
