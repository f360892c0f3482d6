"""Errors, not tracebacks: a full disk, unwritable or unreadable files, malformed .gz input and
a malformed config.json give one line `error: PATH[:LINE]: what is wrong`, exit 2, and leave
earlier outputs intact.

The full disk is a file size limit (`resource.setrlimit(RLIMIT_FSIZE)`) in a subprocess with
SIGXFSZ ignored, so writes past it fail with EFBIG ("File too large"); ENOSPC ("No space left
on device") takes the same path (tests/unit/test_textio.py writes through /dev/full).
Permissions: read-only folders and unreadable files (chmod) in a subprocess that, when the
tests run as root, drops the capabilities that let root ignore them (CAP_DAC_OVERRIDE,
CAP_DAC_READ_SEARCH); in-process, outputs under a regular file (ENOTDIR) and a patched `open`
raising EACCES.
"""

from __future__ import annotations

import builtins
import ctypes
import errno
import gzip
import io
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import TINY_MODEL, run_cli

LIMIT = 4000        # bytes: above every log line, below every output these stages write


def run_limited(args: list, limit: int = LIMIT, **kwargs) -> subprocess.CompletedProcess:
    """``depnmt ARGS`` in a subprocess that may write files of at most ``limit`` bytes."""
    def limit_files():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)       # EFBIG instead of a core dump
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return subprocess.run([sys.executable, "-m", "depnmt.cli", *map(str, args)],
                          env={**os.environ, "DEPNMT_NO_PROGRESS": "1"}, capture_output=True,
                          text=True, preexec_fn=limit_files, **kwargs)


PR_CAPBSET_DROP, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 24, 1, 2


def run_unprivileged(args: list) -> subprocess.CompletedProcess:
    """``depnmt ARGS`` in a subprocess bound by file permissions even when the tests run as root
    (skips where the capabilities cannot be dropped)."""
    def drop_root_powers():
        if os.geteuid() == 0:
            libc = ctypes.CDLL(None, use_errno=True)
            for cap in (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH):
                if libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
                    raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")
    try:
        return subprocess.run([sys.executable, "-m", "depnmt.cli", *map(str, args)],
                              env={**os.environ, "DEPNMT_NO_PROGRESS": "1"}, capture_output=True,
                              text=True, preexec_fn=drop_root_powers)
    except subprocess.SubprocessError as exc:
        pytest.skip(f"cannot drop root's file permission capabilities: {exc}")


def assert_one_error(stderr: str, pattern: str) -> None:
    """Exactly one error line, matching ``pattern``, and no traceback."""
    import re
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and re.search(pattern, errors[0]), stderr


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def temporaries(folder: Path) -> list[str]:
    return [p.name for p in folder.rglob("*.tmp")]


@pytest.fixture(scope="module")
def given_trees(tiny_bpe, tmp_path_factory) -> Path:
    """Chain trees (each word headed by the next) over the tiny corpus's English side."""
    from depnmt.stages.parse import Sentence, write_conllu
    given = tmp_path_factory.mktemp("given")
    for split in ("train", "dev", "test"):
        lines = (tiny_bpe.parent / "prepare" / f"{split}.en").read_text().splitlines()
        write_conllu(given / f"{split}.en.conllu",
                     [Sentence(ws, [i + 2 for i in range(len(ws) - 1)] + [0],
                               ["dep"] * (len(ws) - 1) + ["root"])
                      for ws in (line.split() for line in lines)])
    return given


def stage_args(stage: str, tiny_bpe: Path, tiny_model: Path, given: Path, out: Path) -> list:
    prep = tiny_bpe.parent / "prepare"
    return {
        "prepare": ["prepare", "--src-lang", "en", "--tgt-lang", "de", "--train-src",
                    prep / "train.raw.en", "--train-tgt", prep / "train.raw.de", "--dev-size",
                    "20", "--test-size", "20", "-o", out],
        "parse": ["parse", "-i", prep, "-o", out, "--backend", "conllu", "--conllu-dir", given],
        "bpe": ["bpe", "-i", prep, "-o", out, "--merges", "300"],
        "train": ["train", "-i", tiny_bpe, "-o", out, *TINY_MODEL, "--max-steps", "1"],
        "score": ["score", "--ref", prep / "test.raw.de", "--src", prep / "test.raw.en",
                  "--bucket-plot", out / "delta.png", prep / "test.raw.de", prep / "test.raw.en"],
        "report": ["report", "--ref", prep / "test.raw.de", "-s", "a", tiny_model,
                   prep / "test.raw.de", "-o", out / "results", "--bootstrap", "0"],
    }[stage]


@pytest.mark.parametrize("stage", ["prepare", "parse", "bpe", "train", "score", "report"])
def test_disk_full_is_one_error_and_keeps_earlier_outputs(stage, tiny_bpe, tiny_model,
                                                          given_trees, tmp_path):
    out = tmp_path / "out"
    args = stage_args(stage, tiny_bpe, tiny_model, given_trees, out)
    if stage != "train":                         # a first complete run, then a failing one
        assert run_cli(args) == 0
    before = snapshot(out)
    proc = run_limited(args)
    assert proc.returncode == 2, proc.stderr
    assert_one_error(proc.stderr, rf"^error: {out}/\S+: cannot write: File too large$")
    assert temporaries(out) == []
    if stage != "train":                         # the other helper's checkpoint logic aside
        assert snapshot(out) == before


def test_translate_to_a_full_disk_names_stdout(tiny_model, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("A man rides a bike.\n" * 50)
    with open("/dev/full", "w") as full:
        proc = subprocess.run([sys.executable, "-m", "depnmt.cli", "translate", "-m", tiny_model,
                               "-i", src, "--beam", "1"], stdout=full, stderr=subprocess.PIPE,
                              text=True, env={**os.environ, "DEPNMT_NO_PROGRESS": "1"})
    assert proc.returncode == 2
    assert_one_error(proc.stderr, r"^error: <stdout>: cannot write: No space left on device$")
    assert "Exception ignored" not in proc.stderr


@pytest.mark.parametrize("stage", ["prepare", "parse", "bpe", "train"])
def test_output_folder_under_a_file_is_one_error(stage, tiny_bpe, tiny_model, given_trees,
                                                 tmp_path, capsys):
    """The output folder cannot be made (ENOTDIR here; EACCES and EROFS take the same path)."""
    (tmp_path / "file").write_text("x\n")
    out = tmp_path / "file" / "out"
    assert run_cli(stage_args(stage, tiny_bpe, tiny_model, given_trees, out)) == 2
    assert_one_error(capsys.readouterr().err,
                     rf"^error: {out}: cannot create the folder: Not a directory$")


@pytest.mark.parametrize("stage", ["prepare", "parse", "bpe", "train"])
def test_read_only_output_folder_is_one_error(stage, tiny_bpe, tiny_model, given_trees,
                                              tmp_path):
    out = tmp_path / "out"
    args = stage_args(stage, tiny_bpe, tiny_model, given_trees, out)
    if stage == "train":
        out.mkdir()
    else:                                        # a first complete run, then a failing one
        assert run_cli(args) == 0
    before = snapshot(out)
    out.chmod(0o555)
    try:
        proc = run_unprivileged(args)
    finally:
        out.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert_one_error(proc.stderr, rf"^error: {out}/\S+: cannot write: Permission denied$")
    assert snapshot(out) == before and temporaries(out) == []


@pytest.mark.parametrize("name", ["vocab.src.txt", "codes.joint"])
def test_unreadable_model_file_really(name, tiny_model, tmp_path):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    (model / name).chmod(0)
    src = tmp_path / "in.txt"
    src.write_text("A dog.\n")
    proc = run_unprivileged(["translate", "-m", model, "-i", src])
    assert proc.returncode == 2, proc.stderr
    assert_one_error(proc.stderr, rf"^error: {model / name}: cannot read: Permission denied$")


def deny(monkeypatch, name: str) -> None:
    """Opening a file called ``name`` fails with EACCES, as for a file without read permission
    (chmod cannot show it: the tests may run as root)."""
    real = builtins.open

    def fake(file, *args, **kwargs):
        if Path(str(file)).name == name:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(file))
        return real(file, *args, **kwargs)
    monkeypatch.setattr(builtins, "open", fake)
    monkeypatch.setattr(io, "open", fake)                 # what pathlib calls


@pytest.mark.parametrize("name", ["vocab.src.txt", "vocab.tgt.txt", "codes.joint",
                                  "bpe.json", "config.json"])
def test_unreadable_model_file_is_one_error(name, tiny_model, tmp_path, monkeypatch, capsys):
    src = tmp_path / "in.txt"
    src.write_text("A dog.\n")
    deny(monkeypatch, name)
    assert run_cli(["translate", "-m", tiny_model, "-i", src]) == 2
    assert_one_error(capsys.readouterr().err,
                     rf"^error: {tiny_model / name}: cannot read: Permission denied$")


@pytest.mark.parametrize("damage, message", [
    ("not gzip", r"train.en.gz: not a gzip file"),
    ("truncated", r"train.en.gz(:\d+)?: compressed data ends early \(the file is truncated\)"),
])
def test_malformed_gzip_input_is_one_error(damage, message, tmp_path, capsys):
    text = "".join(f"sentence number {i} .\n" for i in range(5000)).encode()
    data = gzip.compress(text)
    (tmp_path / "train.en.gz").write_bytes(text if damage == "not gzip" else data[:len(data) // 2])
    (tmp_path / "train.de.gz").write_bytes(data)
    code = run_cli(["prepare", "--src-lang", "en", "--tgt-lang", "de", "--tokenizer-src", "keep",
                    "--tokenizer-tgt", "keep", "--train-src", tmp_path / "train.en.gz",
                    "--train-tgt", tmp_path / "train.de.gz", "-o", tmp_path / "out"])
    err = capsys.readouterr().err
    assert code == 2, err                        # was 130 and `aborted` for a truncated file
    assert_one_error(err, message)


@pytest.mark.parametrize("config, message", [
    ({"config_format": 1}, r'config.json: no "model"'),
    ({"config_format": 1, "model": {"d_model": 8}}, r'config.json: no "model.src_vocab_size"'),
    ("model", r"config.json: expected a JSON object, found str"),
    (None, r"config.json:3: not valid JSON"),
])
def test_malformed_config_json_is_one_error(config, message, tiny_model, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    path = model / "config.json"
    path.write_text('{\n "config_format": 1,\n "model": }\n' if config is None
                    else json.dumps(config))
    src = tmp_path / "in.txt"
    src.write_text("A dog.\n")
    for args in (["translate", "-m", model, "-i", src],
                 ["report", "--ref", src, "-s", "a", model, src]):
        assert run_cli(args) == 2
        assert_one_error(capsys.readouterr().err, rf"^error: {model}/{message}")


def test_wrong_type_in_config_json_is_one_error(tiny_model, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    config["model"]["d_model"] = "32"
    (model / "config.json").write_text(json.dumps(config))
    assert run_cli(["translate", "-m", model]) == 2
    assert_one_error(capsys.readouterr().err,
                     r'config.json: "model.d_model" should be an integer, found "32"')


@pytest.mark.parametrize("key, value, message", [
    ("max_tokens", "zzz", "'--max-tokens' (training.max_tokens in {config}): 'zzz' is not a "
                          "valid integer range."),
    ("lr", -1, "'--lr' (training.lr in {config}): -1.0 is not in the range x>0."),
    ("early_stop_metric", "zzz", "'--early-stop-metric' (training.early_stop_metric in "
                                 "{config}): 'zzz' is not one of 'bleu', 'acc', 'loss'.")])
def test_a_bad_saved_training_setting_is_one_error_on_resume(key, value, message, tiny_model,
                                                             tiny_bpe, tmp_path, capsys):
    """`train --resume` takes the settings not given from config.json, checked as the flags
    are (a hand-edited value was a TypeError or ValueError traceback, or taken as it was)."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    config = json.loads((model / "config.json").read_text())
    config["training"][key] = value
    (model / "config.json").write_text(json.dumps(config))
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, "--resume", "--max-steps", "13"]) == 2
    assert_one_error(capsys.readouterr().err, "^" + re.escape(
        "error: Invalid value for " + message.format(config=model / "config.json")))


def test_malformed_metrics_line_is_one_error(tiny_model, tiny_bpe, tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    lines = (model / "metrics.jsonl").read_text().splitlines()
    (model / "metrics.jsonl").write_text("\n".join(lines[:2] + ['{"event": "train", '] +
                                                   lines[2:]) + "\n")
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    assert run_cli(["report", "--ref", ref, "-s", "a", model, ref]) == 2
    assert_one_error(capsys.readouterr().err, rf"^error: {model}/metrics.jsonl:3: not valid JSON")


@pytest.mark.parametrize("command", ["runs", "plot", "report", "average"])
def test_an_unfinished_last_metrics_record_is_left_out(command, tiny_model, tiny_bpe, tmp_path,
                                                       capsys):
    """A log whose last line has no line break yet (its training is writing it, or was killed
    while writing) is read without that line, with a warning: these commands follow runs in
    progress. The same text followed by a line break is a malformed line, an error (`average
    --best` raised a JSONDecodeError's traceback; the tiny model has no snapshots to average,
    so it ends in that error after the warning)."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    log = model / "metrics.jsonl"
    lines = len(log.read_text().splitlines())
    with open(log, "a") as fh:
        fh.write('{"event": "train", "step": 99, "lo')
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    argv = {"runs": ["runs", model], "plot": ["plot", "-m", model, "-o", tmp_path / "p.png"],
            "report": ["report", "--ref", ref, "-s", "a", model, ref],
            "average": ["average", "-m", model, "--best", "1", "-o", "a"]}[command]
    assert run_cli(argv) == (2 if command == "average" else 0)
    assert f"warning: {log}:{lines + 1}: an unfinished last record (being written, or its " \
           f"training was killed while writing it) is left out" in capsys.readouterr().err
    with open(log, "a") as fh:
        fh.write("\n")
    assert run_cli(argv) == 2
    assert_one_error(capsys.readouterr().err, rf"^error: {log}:{lines + 1}: not valid JSON")


def fail_with(monkeypatch, exc: BaseException, tmp_path: Path) -> list:
    """``depnmt prepare`` arguments whose run raises ``exc`` inside the stage."""
    import depnmt.commands.prepare as command

    def boom(*args, **kwargs):
        raise exc
    monkeypatch.setattr(command, "prepare", boom)
    for lang in ("en", "de"):
        (tmp_path / lang).write_text("a\n")
    return ["prepare", "--src-lang", "en", "--tgt-lang", "de", "--train-src", tmp_path / "en",
            "--train-tgt", tmp_path / "de", "-o", tmp_path / "out"]


@pytest.mark.parametrize("exc, line", [
    (PermissionError(errno.EACCES, "Permission denied", "/some/file"),
     "error: /some/file: Permission denied"),
    (OSError(errno.EXDEV, "Invalid cross-device link", "/a", None, "/b"),
     "error: /a -> /b: Invalid cross-device link"),
    (OSError(errno.ENOSPC, "No space left on device"),
     "error: No space left on device (errno 28, no file named)"),
])
def test_last_resort_oserror_is_one_line(exc, line, monkeypatch, capsys, tmp_path):
    """An OSError that no stage named (e.g. from a library) still gives one line, exit 2."""
    args = fail_with(monkeypatch, exc, tmp_path)
    assert run_cli(args) == 2
    assert capsys.readouterr().err.splitlines() == [line]


@pytest.mark.parametrize("exc", [ValueError("a bug"), EOFError("a bug")])
def test_programming_errors_keep_their_traceback(exc, monkeypatch, tmp_path):
    """Not an OSError: a bug, re-raised (click would turn an EOFError into `aborted`)."""
    args = fail_with(monkeypatch, exc, tmp_path)
    with pytest.raises(type(exc), match="a bug"):
        run_cli(args)


def damage_valid_record(log: Path, how: str) -> int:
    """Damage the first ``valid`` record of ``log`` (``no-step``, ``text-step``, ``bad-utf8``
    inside a value, ``bad-bytes`` for the whole line); returns its 1-based line number."""
    lines = log.read_bytes().split(b"\n")
    index = next(i for i, line in enumerate(lines) if b'"valid"' in line)
    record = json.loads(lines[index])
    if how == "no-step":
        del record["step"]
    elif how == "text-step":
        record["step"] = str(record["step"])
    lines[index] = json.dumps(record).encode()
    if how == "bad-utf8":
        lines[index] = lines[index].replace(b'"valid"', b'"val\xffid"')
    elif how == "bad-bytes":
        lines[index] = b"\xff\xfe\x00garbage"
    log.write_bytes(b"\n".join(lines))
    return index + 1


@pytest.mark.parametrize("how, message", [
    ("no-step", 'a "valid" record without "step"'),
    ("text-step", 'a "valid" record whose "step" is "'),
    ("bad-utf8", "not valid UTF-8"),
    ("bad-bytes", "not valid UTF-8"),
])
@pytest.mark.parametrize("command", ["runs", "plot", "report", "average"])
def test_a_damaged_metrics_record_is_one_error_naming_its_line(command, how, message, tiny_model,
                                                               tiny_bpe, tmp_path, capsys):
    """Every reader of metrics.jsonl (`report`, `runs`, `plot`, `average --best`) refuses a
    record without an integer `step` or with bytes that are not UTF-8 (train writes ASCII
    JSON): one error naming the file and line, no traceback, no table from a guess."""
    model = tmp_path / "model"
    shutil.copytree(tiny_model, model)
    log = model / "metrics.jsonl"
    line = damage_valid_record(log, how)
    ref = tiny_bpe.parent / "prepare" / "test.raw.de"
    argv = {"runs": ["runs", model], "plot": ["plot", "-m", model, "-o", tmp_path / "p.png"],
            "report": ["report", "--ref", ref, "-s", "a", model, ref, "--bootstrap", "0",
                       "--shuffles", "0"],
            "average": ["average", "-m", model, "--best", "1", "-o", "a"]}[command]
    assert run_cli(argv) == 2
    out, err = capsys.readouterr()
    assert_one_error(err, "^" + re.escape(f"error: {log}:{line}: {message}"))
    assert "|" not in out and not (tmp_path / "p.png").exists()


@pytest.mark.parametrize("where", ["a file", "under a file", "read-only"])
def test_an_unusable_tensorboard_folder_is_refused_before_training(where, tiny_bpe, tmp_path):
    """`train --tensorboard DIR`: a DIR that is a file, cannot be made or cannot be written in
    is one error when the run is set up, before any data is read or update made (it used to
    fail at the first logged record, losing the training done); the Python API too."""
    from depnmt.api import train_model
    from depnmt.core.errors import DepnmtError
    board, model = tmp_path / "tb", tmp_path / "m"
    if where == "a file":
        board.write_text("not a folder\n")
        with pytest.raises(DepnmtError, match="'--tensorboard'.* is a file"):   # the Python API
            train_model({"input": tiny_bpe, "output": model, "device": "cpu", "layers": 1,
                         "d-model": 32, "heads": 2, "d-ff": 64, "max-steps": 4,
                         "tensorboard": board})
        proc = run_unprivileged(["train", "-i", tiny_bpe, "-o", model, "--tensorboard", board])
        assert proc.returncode == 2 and "'--tensorboard'" in proc.stderr      # the option's check
        assert f"{board}' is a file" in proc.stderr and "Traceback" not in proc.stderr
        assert not model.exists()
        return
    elif where == "under a file":
        (tmp_path / "f").write_text("a file\n")
        board = tmp_path / "f" / "tb"
        message = rf"^error: {board}: cannot create the folder: Not a directory$"
    else:
        board.mkdir()
        board.chmod(0o555)
        message = rf"^error: --tensorboard {board}: cannot write in it: Permission denied$"
    try:
        proc = run_unprivileged(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL,
                                 "--max-steps", "4", "--valid-every", "2",
                                 "--tensorboard", board])
    finally:
        if board.is_dir():
            board.chmod(0o755)
    assert proc.returncode == 2, proc.stderr
    assert_one_error(proc.stderr, message)
    assert "updates" not in proc.stderr and not (model / "metrics.jsonl").exists()
