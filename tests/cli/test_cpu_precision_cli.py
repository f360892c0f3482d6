"""bf16 on a CPU without native bf16, end to end: a GPS model trains, translates and rescores
with ``--precision bf16``, and ``--precision auto`` says in one line that it trains in fp32.
The CPU is made AVX2-only by ``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` (read by
torch and oneDNN at start: every command runs in a process of its own)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .conftest import TINY_MODEL, import_random_trees, run_subprocess

AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "OMP_NUM_THREADS": "1"}
FP32_NOTE = "so training runs in fp32 (slower than bf16 on a CPU with AVX512-BF16 or AMX)"


@pytest.fixture(scope="module")
def src_trees(tiny_bpe, tmp_path_factory) -> Path:
    """Random labelled source trees over the tiny corpus, imported with the conllu backend."""
    return import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given-avx2"), "parse-avx2",
                               ("en",), ["nsubj", "obj", "det", "obl"], seed=2)


def on_avx2(args: list) -> tuple[str, str]:
    """``depnmt ARGS`` on the emulated AVX2-only CPU: its stdout and stderr (it must succeed,
    without a traceback)."""
    done = run_subprocess(args, env=AVX2_ENV, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    return done.stdout, done.stderr


def test_gps_in_bf16_trains_translates_and_rescores_on_an_avx2_cpu(tiny_bpe, src_trees,
                                                                   tmp_path):
    """The path LSTM has no bf16 kernel in oneDNN there (it ended in a traceback); training
    (2 updates and a validation that translates the dev set), translate and rescore run."""
    model = tmp_path / "m"
    _, err = on_avx2(["train", "-i", tiny_bpe, "--trees", src_trees, "-o", model, *TINY_MODEL,
                      "--max-steps", "2", "--valid-every", "2", "--scheme", "abs+gps",
                      "--precision", "bf16"])
    assert "training abs+gps on cpu in bf16" in err and FP32_NOTE not in err
    test = src_trees / "test.en.conllu"
    out, _ = on_avx2(["translate", "-m", model, "-i", test, "--input-format", "conllu",
                      "--precision", "bf16"])
    assert len(out.splitlines()) == 30
    (tmp_path / "hyp.txt").write_text(out, encoding="utf-8")
    scores, _ = on_avx2(["rescore", "-m", model, "--src", test, "--src-format", "conllu",
                         "--tgt", tmp_path / "hyp.txt", "--precision", "bf16"])
    assert len(scores.splitlines()) == 30


def test_auto_says_once_that_it_trains_in_fp32_on_an_avx2_cpu(tiny_bpe, tmp_path):
    """One line says why (here: torch's CPU level, set to AVX2; on a real AVX2 CPU the missing
    flag)."""
    _, err = on_avx2(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                      "--max-steps", "1", "--valid-every", "0", "--precision", "auto"])
    assert "training abs on cpu in fp32" in err and err.count(FP32_NOTE) == 1
    assert ("--precision auto: torch runs its CPU kernels at level AVX2" in err
            or "--precision auto: this CPU has no AVX512-BF16" in err)
