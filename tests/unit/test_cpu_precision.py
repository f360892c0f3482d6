"""bf16 on CPUs without native bf16 (:func:`depnmt.core.device.cpu_bf16_missing`): the detection
honours torch's CPU level and oneDNN's ISA cap, ``auto`` says why it trains in fp32, and GPS's
path LSTM runs under bf16 autocast on an AVX2-only CPU, emulated here by
``ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2`` in a fresh process (torch and oneDNN read
them once, at start)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch

from depnmt.core import device
from depnmt.core.device import cpu_bf16_missing, cpu_has_native_bf16, onednn_max_isa, precision_note

AVX2_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
BF16_CPU = {"avx2", "avx512f", "avx512bw", "avx512_bf16"}


@pytest.mark.parametrize("flags, capability, isa, missing", [
    (BF16_CPU, "AVX512", "", None),
    ({"amx_bf16", "avx512f"}, "AVX512", "AVX512_CORE_AMX", None),
    (BF16_CPU, "AVX512", "AVX512_CORE_BF16", None),
    (BF16_CPU, "AVX512", "DEFAULT", None),
    (BF16_CPU, "AVX512", "NOT_AN_ISA", None),            # oneDNN ignores it: no cap
    ({"avx2", "avx512f", "avx512bw"}, "AVX512", "", "no avx512_bf16 or amx_bf16 flag"),
    ({"avx2"}, "AVX2", "", "no avx512_bf16 or amx_bf16 flag"),
    (BF16_CPU, "AVX2", "", "at level AVX2 (ATEN_CPU_CAPABILITY)"),
    (BF16_CPU, "DEFAULT", "", "at level DEFAULT (ATEN_CPU_CAPABILITY)"),
    (BF16_CPU, "AVX512", "AVX2", "oneDNN is capped at AVX2 (ONEDNN_MAX_CPU_ISA), below"),
    (BF16_CPU, "AVX512", "avx512_core", "capped at AVX512_CORE (ONEDNN"),     # any case
    (BF16_CPU, "AVX512", "AVX512_CORE_VNNI", "capped at AVX512_CORE_VNNI (ONEDNN"),
])
def test_native_bf16_needs_the_flag_an_avx512_level_and_no_onednn_cap(flags, capability, isa,
                                                                        missing):
    reason = cpu_bf16_missing(flags, capability, isa)
    assert reason is None if missing is None else missing in reason
    assert cpu_has_native_bf16(flags, capability, isa) is (missing is None)


def test_the_onednn_cap_is_read_from_either_variable():
    assert onednn_max_isa({}) == ""
    assert onednn_max_isa({"DNNL_MAX_CPU_ISA": "avx2"}) == "AVX2"
    assert onednn_max_isa({"ONEDNN_MAX_CPU_ISA": "avx512_core", "DNNL_MAX_CPU_ISA": "AVX2"}) \
        == "AVX512_CORE"
    assert onednn_max_isa({"ONEDNN_MAX_CPU_ISA": "", "DNNL_MAX_CPU_ISA": "SSE41"}) == "SSE41"


def test_auto_on_a_cpu_without_native_bf16_says_it_trains_in_fp32(monkeypatch):
    cpu = torch.device("cpu")
    monkeypatch.setattr(device, "cpu_bf16_missing", lambda: "this CPU has no AVX512-BF16")
    note = precision_note(cpu, "auto")
    assert note == ("--precision auto: this CPU has no AVX512-BF16, so training runs in fp32 "
                    "(slower than bf16 on a CPU with AVX512-BF16 or AMX)")
    for name in ("fp32", "bf16"):                         # asked for: nothing to explain
        assert precision_note(cpu, name) is None
    assert precision_note(torch.device("cuda"), "auto") is None
    monkeypatch.setattr(device, "cpu_bf16_missing", lambda: None)
    assert precision_note(cpu, "auto") is None


AVX2_CHECK = textwrap.dedent("""
    import torch
    from depnmt.core.device import autocast, cpu_has_native_bf16, precision_note, train_precision
    from depnmt.model.schemes.gps import PathEncoder

    cpu = torch.device("cpu")
    assert not cpu_has_native_bf16(), torch.backends.cpu.get_cpu_capability()
    assert train_precision(cpu, "auto") is None
    assert "training runs in fp32" in precision_note(cpu, "auto")
    torch.manual_seed(0)
    encoder = PathEncoder(9, 16, p=0.1)
    paths = torch.tensor([[2, 3, 4], [2, 5, 0], [0, 0, 0]])
    with autocast(cpu, torch.bfloat16):
        s = encoder(paths)
        assert s.dtype == torch.bfloat16, s.dtype
        (s.float() ** 2).sum().backward()
    assert torch.equal(s[2], torch.zeros(16, dtype=s.dtype))        # the empty path
    grads = [p.grad for p in encoder.lstm.parameters()]
    assert all(g is not None and g.dtype == torch.float32 and g.isfinite().all() for g in grads)
    assert s.float().abs().sum() > 0 and all(g.abs().sum() > 0 for g in grads)
    with torch.no_grad():
        plain = encoder.eval()(paths)
    with torch.no_grad(), autocast(cpu, torch.bfloat16):
        low = encoder(paths)
    assert (low.float() - plain).abs().max() < 0.02, (low.float() - plain).abs().max()
    print("ok")
""")


def test_gps_path_lstm_runs_in_bf16_autocast_on_an_avx2_cpu():
    """On an AVX2-only CPU oneDNN has no bf16 LSTM ("could not create a primitive descriptor"):
    the path encoder runs it in fp32 there, forward and backward, its output in bf16 and within
    bf16's rounding of fp32's; the detection says no native bf16, so ``auto`` is fp32."""
    done = subprocess.run([sys.executable, "-c", AVX2_CHECK], capture_output=True, text=True,
                          env={**os.environ, **AVX2_ENV, "OMP_NUM_THREADS": "1"}, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]
