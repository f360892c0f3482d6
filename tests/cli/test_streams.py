"""Bad input, class "standard streams": a command started without standard input or output
(``<&-``, ``>&-``) is one error line naming the stream when it needs it, exit status 2, no
traceback, and runs as usual when it does not; a reader of standard output that goes away
(``| head``) ends the command with exit status 141, as SIGPIPE would, and no message."""

from __future__ import annotations

import os
import subprocess
import sys

from .conftest import on_cpu
from .test_chaos import chaos

error_lines = chaos.error_lines


def depnmt(args: list, close: tuple[int, ...] = (), **kwargs) -> subprocess.CompletedProcess:
    """``python -m depnmt.cli ARGS`` with the file descriptors ``close`` closed in the child."""
    def closed():
        for fd in close:
            os.close(fd)
    return subprocess.run([sys.executable, "-m", "depnmt.cli", *on_cpu(args)],
                          env={**os.environ, "DEPNMT_NO_PROGRESS": "1"}, preexec_fn=closed,
                          stderr=subprocess.PIPE, text=True, **kwargs)


def test_help_without_standard_output_is_one_error_line():
    done = depnmt(["--help"], close=(1,))
    assert done.returncode == 2
    assert error_lines(done.stderr) == [
        "error: <stdout>: closed (the command was started without it); write the output to a "
        "file (-o FILE or > FILE)"]
    assert "Traceback" not in done.stderr


def test_translate_without_standard_input_names_it(tiny_model):
    done = depnmt(["translate", "-m", tiny_model], close=(0,), stdout=subprocess.DEVNULL)
    assert done.returncode == 2, done.stderr
    assert error_lines(done.stderr) == [
        "error: <stdin>: closed (the command was started without it); give the input as a file"]


def test_a_command_that_does_not_write_standard_output_runs_without_it(tiny_model, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("a dog runs .\n", encoding="utf-8")
    done = depnmt(["translate", "-m", tiny_model, "-i", source, "-o", tmp_path / "out.txt"],
                  close=(0, 1))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out.txt").read_text(encoding="utf-8").count("\n") == 1


def closed_pipe_run(args: list, **kwargs) -> subprocess.CompletedProcess:
    """Run with standard output a pipe whose reader has already gone away."""
    read, write = os.pipe()
    os.close(read)
    try:
        return depnmt(args, stdout=write, **kwargs)
    finally:
        os.close(write)


def test_help_into_a_closed_pipe_is_141_quietly():
    done = closed_pipe_run(["--help"])
    assert done.returncode == 141
    assert done.stderr == ""


def test_translations_into_a_closed_pipe_are_141_quietly(tiny_model):
    done = closed_pipe_run(["translate", "-m", tiny_model], input="a dog runs .\n" * 50)
    assert done.returncode == 141, done.stderr
    assert error_lines(done.stderr) == [] and "Traceback" not in done.stderr


def test_training_outlives_the_reader_of_its_messages(tiny_bpe, tmp_path):
    """A reader of standard error that goes away (``2>&1 | tee log`` or a recipe's job prefixer
    ended by Ctrl-C) costs the messages, not the run: the training goes on, and a SIGTERM
    afterwards still stops it after the update with ``last.pt`` saved (exit status 143)."""
    import json
    import signal
    import time

    from .conftest import TINY_MODEL
    model = tmp_path / "model"
    read, write = os.pipe()
    child = subprocess.Popen(
        [sys.executable, "-m", "depnmt.cli",
         *on_cpu(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "100000",
                  "--save-every", "100000"])],
        env={**os.environ, "DEPNMT_NO_PROGRESS": "1"}, stdout=subprocess.DEVNULL, stderr=write)
    os.close(write)
    metrics = model / "metrics.jsonl"

    def records() -> list[dict]:
        text = metrics.read_text(encoding="utf-8") if metrics.exists() else ""
        return [json.loads(line) for line in text.splitlines() if line.endswith("}")]

    try:
        deadline = time.monotonic() + 120
        while not any(r["event"] == "valid" for r in records()):       # messages were written
            assert child.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        os.close(read)                                               # the reader goes away
        read = None
        seen = len(records())
        while len(records()) < seen + 3:                             # epochs go on, each a message
            assert child.poll() is None, "the training died with its reader"
            assert time.monotonic() < deadline
            time.sleep(0.2)
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=120) == 143
    finally:
        if read is not None:
            os.close(read)
        if child.poll() is None:
            child.kill()
    stopped = records()[-1]
    assert stopped["event"] == "stopped" and stopped["signal"] == "SIGTERM"
    from depnmt.storage.checkpoint import load_checkpoint
    assert load_checkpoint(model / "checkpoints" / "last.pt")["progress"]["step"] == stopped["step"]
