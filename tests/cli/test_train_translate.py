"""train → translate → score end to end, resumption, atomic checkpoints and bad input."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import torch

from depnmt.storage.checkpoint import load_checkpoint

from .conftest import TINY_MODEL, overriding, popen, run_cli, run_subprocess


def metrics(model: Path) -> list[dict]:
    return [json.loads(l) for l in (model / "metrics.jsonl").read_text().splitlines()]


def test_train_writes_self_contained_model_dir(tiny_model):
    names = {p.name for p in tiny_model.iterdir()}
    assert {"config.json", "vocab.src.txt", "vocab.tgt.txt", "bpe.json", "codes.joint",
            "metrics.jsonl", "manifest.json", "checkpoints"} <= names
    config = json.loads((tiny_model / "config.json").read_text())
    assert config["model"]["schemes"] == [{"name": "abs", "options": {}}]
    assert config["tokenizers"]["src"]["kind"] == "moses"
    valid = [m for m in metrics(tiny_model) if m["event"] == "valid"]
    assert [m["step"] for m in valid] == [6, 12]
    assert all("dev_bleu" in m and "dev_nll" in m for m in valid)
    assert (tiny_model / "checkpoints" / "best.pt").exists()


def test_translate_keeps_one_line_per_input_line(tiny_model, tmp_path):
    raw = (b"A man is riding a bike.\n\n   \n"
           + b"invalid \xff\xfe bytes\n"
           + b" ".join([b"dog"] * 1000) + b"\n"
           + b"last line without newline")
    src = tmp_path / "in.txt"
    src.write_bytes(raw)
    proc = run_subprocess(["translate", "-m", tiny_model, "-i", src])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")
    assert out[-1] == "" and len(out) - 1 == 6
    assert out[1] == "" and out[2] == ""
    assert "truncated" in proc.stderr and "input line 5" in proc.stderr
    assert "invalid UTF-8" in proc.stderr and "Traceback" not in proc.stderr
    # stdin gives the same result as --input
    stdin = run_subprocess(["translate", "-m", tiny_model], input=raw.decode("utf-8", "replace"))
    assert stdin.stdout == proc.stdout


def test_translate_and_score_chain(tiny_model, tiny_bpe, tmp_path):
    prepare = tiny_bpe.parent / "prepare"
    hyp = tmp_path / "hyp.de"
    proc = run_subprocess(["translate", "-m", tiny_model, "-i", prepare / "test.raw.en",
                           "--beam", "1"])
    hyp.write_text(proc.stdout)
    assert len(proc.stdout.splitlines()) == 30
    score = run_subprocess(["score", "--ref", prepare / "test.raw.de", "--json", hyp])
    assert score.returncode == 0, score.stderr
    assert {"bleu", "chrf", "ter", "signature"} <= json.loads(score.stdout.splitlines()[0]).keys()


def final_weights(model: Path) -> dict:
    return load_checkpoint(model / "checkpoints" / "last.pt")["model"]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_resume_continues_exactly(tiny_bpe, tmp_path, precision):
    """6 updates in one go == 3 updates, stop, --resume to 6 (data order, RNG, optimizer), in
    fp32 and in bf16 autocast (which runs, emulated, on any CPU); the precision is recorded."""
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["-i", tiny_bpe, *overriding(TINY_MODEL, "--max-tokens", "150"),
              "--valid-every", "0", "--precision", precision]
    assert run_cli(["train", *common, "-o", straight, "--max-steps", "6"]) == 0
    assert run_cli(["train", *common, "-o", split, "--max-steps", "3"]) == 0
    assert run_cli(["train", *common, "-o", split, "--max-steps", "6", "--resume"]) == 0
    a, b = final_weights(straight), final_weights(split)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    starts = [m for m in metrics(split) if m["event"] == "start"]
    assert [m["precision"] for m in starts] == [precision, precision]
    assert json.loads((split / "manifest.json").read_text())["precision"] == precision


def test_the_manifest_records_the_machine_a_run_trained_on(tiny_model, monkeypatch):
    """What a run's exact numbers depend on beyond data and settings: the device, torch, its
    CPU kernel level, oneDNN's cap and the CPU's ISA flags (bf16 follows the kernels)."""
    from depnmt.core.device import ISA_FLAGS, machine_record, this_cpu_flags
    machine = json.loads((tiny_model / "manifest.json").read_text())["machine"]
    assert machine["device"] == "cpu" and machine["torch"] == torch.__version__
    assert machine["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert machine["cpu_flags"] == sorted(set(ISA_FLAGS) & this_cpu_flags())
    assert machine["threads"] >= 1
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "avx2")
    assert machine_record(torch.device("cpu"))["onednn_max_isa"] == "AVX2"


def test_resume_takes_the_saved_flags(tiny_bpe, tmp_path):
    """`--resume` with only -i/-o/--max-steps continues a run configured with non-default
    architecture, scheme, scheme options and training flags, exactly."""
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["-i", tiny_bpe, *overriding(TINY_MODEL, "--max-tokens", "150"),
              "--valid-every", "0", "--scheme", "abs+rel", "--rel-k", "3", "--dropout", "0.2"]
    assert run_cli(["train", *common, "-o", straight, "--max-steps", "6"]) == 0
    assert run_cli(["train", *common, "-o", split, "--max-steps", "3"]) == 0
    assert run_cli(["train", "-i", tiny_bpe, "-o", split, "--resume", "--max-steps", "6"]) == 0
    a, b = final_weights(straight), final_weights(split)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    config = json.loads((split / "config.json").read_text())
    assert config["model"]["schemes"] == [{"name": "abs", "options": {}}, {"name": "rel", "options": {
        "rel_k": 3, "rel_terms": "key,value"}}]
    assert config["training"]["max_steps"] == 6 and config["model"]["dropout"] == 0.2


def wait_for(predicate, timeout: float = 90.0) -> None:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError("timed out")
        time.sleep(0.05)


def test_sigkill_mid_run_then_resume(tiny_bpe, tmp_path):
    model = tmp_path / "m"
    proc = popen(["train", "-i", tiny_bpe, "-o", model, *overriding(TINY_MODEL, "--max-tokens",
                  "150"), "--save-every", "2", "--valid-every", "0", "--max-steps", "100000"])
    last = model / "checkpoints" / "last.pt"
    try:
        wait_for(lambda: last.exists() and load_checkpoint(last)["progress"]["step"] >= 4)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed_at = load_checkpoint(last)["progress"]["step"]
    target = killed_at + 3
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *overriding(TINY_MODEL, "--max-tokens",
                    "150"), "--resume", "--valid-every", "0", "--max-steps", target]) == 0
    state = load_checkpoint(last)
    assert state["progress"]["step"] == target
    starts = [m for m in metrics(model) if m["event"] == "start"]
    assert starts[-1]["step"] == killed_at


def test_sigkill_during_checkpoint_write_keeps_last_good(tiny_bpe, tmp_path):
    model = tmp_path / "m"
    ckpts = model / "checkpoints"
    proc = popen(["train", "-i", tiny_bpe, "-o", model, *overriding(TINY_MODEL, "--max-tokens",
                  "150"), "--save-every", "1", "--valid-every", "0", "--max-steps", "100000"],
                 env={"DEPNMT_CHECKPOINT_WRITE_DELAY": "1.0"})
    try:
        # wait until one checkpoint is complete and the next write is half-way
        wait_for(lambda: (ckpts / "last.pt").exists()
                 and any(p.name.startswith(".last.pt.") for p in ckpts.iterdir()))
        time.sleep(0.3)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    partial = [p for p in ckpts.iterdir() if p.name.startswith(".last.pt.")]
    assert partial, "the kill should have interrupted a write"
    state = load_checkpoint(ckpts / "last.pt")
    assert state["progress"]["step"] >= 1
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *overriding(TINY_MODEL, "--max-tokens",
                    "150"), "--resume", "--valid-every", "0",
                    "--max-steps", state["progress"]["step"] + 1]) == 0


def test_checkpoint_of_another_scheme_is_refused(tiny_model, tiny_bpe, tmp_path, capsys):
    model = tmp_path / "copy"
    import shutil
    shutil.copytree(tiny_model, model)
    status = run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--scheme", "noabs",
                      "--resume", "--max-steps", "20"])
    err = capsys.readouterr().err
    assert status == 2
    assert "scheme" in err and "last.pt" in err and "Traceback" not in err


def test_checkpoint_of_another_format_is_refused(tiny_model, tmp_path, capsys):
    state = load_checkpoint(tiny_model / "checkpoints" / "best.pt")
    state.pop("format_version")
    bad = tmp_path / "old.pt"
    torch.save({**state, "format_version": 0}, bad)
    status = run_cli(["translate", "-m", tiny_model, "-c", bad, "-i", bad])
    err = capsys.readouterr().err
    assert status == 2 and "format 0" in err and err.count("\n") == 1


def test_truncated_checkpoint_is_a_clear_error(tiny_model, tmp_path, capsys):
    data = (tiny_model / "checkpoints" / "best.pt").read_bytes()
    bad = tmp_path / "cut.pt"
    bad.write_bytes(data[: len(data) // 2])
    assert run_cli(["translate", "-m", tiny_model, "-c", bad]) == 2
    assert "not a readable depnmt checkpoint" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present")
def test_cuda_requested_but_absent(tiny_bpe, tmp_path, capsys):
    status = run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", "--device", "cuda"])
    err = capsys.readouterr().err
    assert status == 2 and "CUDA is not available" in err and "Traceback" not in err


def test_existing_model_dir_needs_resume(tiny_model, tiny_bpe, capsys):
    assert run_cli(["train", "-i", tiny_bpe, "-o", tiny_model]) == 2
    assert "--resume" in capsys.readouterr().err


def test_missing_model_dir_is_a_clear_error(tmp_path, capsys):
    assert run_cli(["translate", "-m", tmp_path / "nope"]) == 2
    assert "not a depnmt model directory" in capsys.readouterr().err


def test_translate_preparsed_conllu_input(tiny_model, tiny_bpe, tmp_path):
    """--input-format conllu: the trees' words are translated, one line per tree (empty ones
    too)."""
    from depnmt.stages.parse import Sentence, write_conllu
    lines = (tiny_bpe.parent / "prepare" / "test.en").read_text().splitlines()[:5]
    trees = [Sentence(l.split(), [i + 2 for i in range(len(l.split()) - 1)] + [0],
                      ["dep"] * (len(l.split()) - 1) + ["root"]) for l in lines]
    trees.insert(2, Sentence([], [], []))
    conllu = tmp_path / "in.conllu"
    write_conllu(conllu, trees)
    proc = run_subprocess(["translate", "-m", tiny_model, "--input-format", "conllu", "-i", conllu,
                           "--beam", "1"])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout.split("\n")
    assert len(out) - 1 == 6 and out[2] == ""
    direct = run_subprocess(["translate", "-m", tiny_model, "--beam", "1"],
                            input="\n".join(lines[:2]) + "\n")
    assert direct.stdout.split("\n")[:2] == out[:2]


def test_batch_sentences_sets_the_batches_per_epoch(tiny_bpe, tmp_path, capsys):
    """--batch-sentences 50 with a --max-tokens that never binds: 400 pairs in 8 batches."""
    model = tmp_path / "m"
    args = ["train", "-i", tiny_bpe, "-o", model, *overriding(TINY_MODEL, "--max-tokens", "100000"),
            "--batch-sentences", "50", "--max-steps", "1", "--valid-every", "1"]
    assert run_cli(args) == 0
    assert "400 pairs, 8 batches/epoch" in capsys.readouterr().err
    config = json.loads((model / "config.json").read_text())
    assert config["training"]["batch_sentences"] == 50


def test_translate_precision_sets_the_decoders_autocast(tiny_model, tiny_bpe, tmp_path):
    """--precision is train's: fp32 decodes without autocast, bf16 with bf16 autocast (emulated
    on CPUs without native bf16, so the same sentences come out, possibly other words), auto
    follows the CPU; fp16 on a CPU is a clear error, not a traceback."""
    import torch

    from depnmt.core.device import cpu_has_native_bf16
    from depnmt.decoding.translate import Translator
    assert Translator.from_model_dir(tiny_model, device="cpu", precision="fp32").amp is None
    assert Translator.from_model_dir(tiny_model, device="cpu",
                                     precision="bf16").amp == torch.bfloat16
    auto = Translator.from_model_dir(tiny_model, device="cpu", precision="auto").amp
    assert auto == (torch.bfloat16 if cpu_has_native_bf16() else None)
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    outs = {}
    for precision in ("fp32", "bf16"):
        done = run_subprocess(["translate", "-m", tiny_model, "-i", src, "--precision", precision])
        assert done.returncode == 0, done.stderr
        outs[precision] = done.stdout.splitlines()
    assert len(outs["bf16"]) == len(outs["fp32"]) == len(src.read_text().splitlines())
    bad = run_subprocess(["translate", "-m", tiny_model, "-i", src, "--precision", "fp16",
                          "--device", "cpu"])
    assert bad.returncode == 2 and "fp16 needs a CUDA GPU" in bad.stderr
    assert "Traceback" not in bad.stderr
