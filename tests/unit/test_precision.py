"""Training precision (``--precision``): the choice per device and CPU, and a bf16 run whose loss
tracks fp32's; the CPU dropout mask (:mod:`depnmt.model.dropout`)."""

from __future__ import annotations

import os

import pytest
import torch
from test_bench import load_bench  # tests/unit is on sys.path (it has no __init__.py)

from depnmt.core.device import (autocast, cpu_flags, cpu_has_native_bf16, precision_name,
                                train_precision)
from depnmt.core.errors import DepnmtError
from depnmt.model.dropout import LEVELS, Dropout, dropout
from depnmt.model.transformer import label_smoothed_nll

CPU = torch.device("cpu")


def test_fp32_everywhere_and_auto_follows_the_cpu(tmp_path):
    assert train_precision(CPU, "fp32", native_bf16=True) is None
    assert train_precision(CPU, "auto", native_bf16=True) is torch.bfloat16
    assert train_precision(CPU, "auto", native_bf16=False) is None    # AVX2 / AVX-512 w/o bf16
    assert train_precision(CPU, "bf16", native_bf16=False) is torch.bfloat16   # asked for: emulated
    with pytest.raises(DepnmtError, match="fp16 needs a CUDA GPU"):
        train_precision(CPU, "fp16")
    with pytest.raises(DepnmtError, match="unknown precision"):
        train_precision(CPU, "int8")
    assert [precision_name(d) for d in (None, torch.bfloat16, torch.float16)] == \
        ["fp32", "bf16", "fp16"]


def test_native_bf16_is_read_from_the_cpu_flags(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx2 avx512f\n\nprocessor\t: 1\n"
                    "flags\t\t: fpu sse avx2 avx512f avx512_bf16\n")
    assert cpu_flags(info) == {"fpu", "sse", "avx2", "avx512f", "avx512_bf16"}
    assert cpu_flags(tmp_path / "absent") == set()                    # not Linux: fp32
    avx512 = {"capability": "AVX512", "onednn_isa": ""}   # torch and oneDNN: test_cpu_precision
    assert cpu_has_native_bf16({"avx2", "avx512f", "avx512_bf16"}, **avx512)
    assert cpu_has_native_bf16({"amx_bf16"}, **avx512)
    assert not cpu_has_native_bf16({"avx2", "avx512f", "avx512bw"}, **avx512)
    assert cpu_has_native_bf16(**avx512) == bool({"avx512_bf16", "amx_bf16"} & cpu_flags())


@pytest.mark.parametrize("capability, expected", [((7, 0), torch.float16), ((7, 5), torch.float16),
                                                  ((8, 0), torch.bfloat16),
                                                  ((9, 0), torch.bfloat16)])
def test_auto_takes_bf16_from_ampere_on_and_asks_the_chosen_gpu(monkeypatch, capability,
                                                                 expected):
    """``is_bf16_supported`` says yes on a V100/T4 (bf16 emulated, slow): the rule reads the
    compute capability of the training device instead."""
    asked = []

    def get_capability(device=None):
        asked.append(device)
        return capability

    monkeypatch.setattr(torch.cuda, "get_device_capability", get_capability)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "a GPU")
    gpu = torch.device("cuda:1")
    assert train_precision(gpu, "auto") is expected
    assert [torch.device(d).index for d in asked] == [1]
    assert train_precision(gpu, "fp16") is torch.float16
    assert train_precision(gpu, "fp32") is None


def test_explicit_bf16_before_ampere_warns_or_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (7, 5))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Tesla T4")
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    gpu = torch.device("cuda:0")
    assert train_precision(gpu, "bf16") is torch.bfloat16
    err = capsys.readouterr().err
    assert "Tesla T4" in err and "emulated" in err and "7.5" in err
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)
    with pytest.raises(DepnmtError, match="does not support bfloat16"):
        train_precision(gpu, "bf16")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 6))
    assert train_precision(gpu, "bf16") is torch.bfloat16      # native: no question asked
    assert capsys.readouterr().err == ""


def train_losses(dtype: torch.dtype | None, steps: int = 40) -> list[float]:
    """Per-token training losses of a tiny abs model on fixed random batches (same seed and
    dropout masks for every dtype)."""
    bench = load_bench()
    setup = bench.Setup(CPU, 64, 4, 128, 2, 60, 12, 12, 16, 4, 3)
    run = bench.new_run(setup, "abs")
    for group in run.optimizer.param_groups:
        group["lr"] = 3e-3
    torch.manual_seed(5)
    out = []
    for step in range(steps):
        batch = run.batches[step % len(run.batches)]
        with autocast(CPU, dtype):
            logits = run.model(batch.src, batch.tgt_in, batch.src_feats)[0]
        assert logits.dtype == (dtype or torch.float32)
        loss, _ = label_smoothed_nll(logits, batch.tgt_out, 0.1)
        assert loss.dtype == torch.float32                          # loss in fp32
        (loss / batch.n_tokens).backward()
        run.optimizer.step()
        run.optimizer.zero_grad()
        out.append(float(loss.detach()) / batch.n_tokens)
    state = run.optimizer.state_dict()["state"]
    assert all(p.dtype == torch.float32 for p in run.model.parameters())
    assert all(s["exp_avg"].dtype == s["exp_avg_sq"].dtype == torch.float32 for s in state.values())
    return out


def test_bf16_training_loss_tracks_fp32():
    """bf16 keeps 8 significant bits (relative rounding ≤ 2^-9 ≈ 0.2% per operation); the
    losses of 40 Adam steps, whose trajectories drift apart as rounding compounds, stay within
    1.6% of fp32's here (mean 0.2%). Bounds: mean 1%, max 5%, and bf16 learns as much."""
    fp32, bf16 = train_losses(None), train_losses(torch.bfloat16)
    rel = [abs(a - b) / a for a, b in zip(fp32, bf16)]
    assert 0 < sum(rel) / len(rel) < 0.01 and max(rel) < 0.05       # > 0: bf16 really ran
    assert bf16[-1] < fp32[0] - 0.5 and abs(bf16[-1] - fp32[-1]) / fp32[-1] < 0.05


@pytest.mark.skipif(not cpu_has_native_bf16(), reason="this CPU has no native bf16 matrix "
                    "multiplies (no avx512_bf16/amx_bf16 flag): auto trains in fp32 here")
def test_auto_is_bf16_on_this_cpu():
    assert train_precision(CPU, "auto") is torch.bfloat16


# -- dropout ----------------------------------------------------------------------------------

def test_dropout_rate_scale_and_gradient():
    torch.manual_seed(0)
    x = torch.ones(256, 1024, requires_grad=True)
    y = dropout(x, 0.1)
    kept = y != 0
    p = round(0.1 * LEVELS) / LEVELS
    assert abs(1 - kept.float().mean().item() - 0.1) < 0.003        # 262,144 draws: σ ≈ 0.0006
    assert torch.allclose(y[kept], torch.full_like(y[kept], 1 / (1 - p)))
    y.sum().backward()
    assert torch.equal(x.grad, y.detach())                          # d out / d x = mask / (1 − p')
    rows = (y != 0).float().mean(dim=1)
    assert rows.std() < 0.02                                        # masks differ across the tensor
    assert dropout(x, 0.1, training=False) is x and dropout(x, 0.0) is x


def test_dropout_masks_follow_the_torch_rng_state():
    """Exact resumption restores ``torch.get_rng_state()``; the masks must come from it."""
    x = torch.randn(7, 33, dtype=torch.bfloat16)
    torch.manual_seed(3)
    state = torch.get_rng_state()
    a, b = dropout(x, 0.3), dropout(x, 0.3)
    torch.set_rng_state(state)
    assert torch.equal(dropout(x, 0.3), a) and not torch.equal(a, b)
    assert a.dtype == torch.bfloat16 and a.shape == x.shape
    module = Dropout(0.3)
    assert module.eval()(x) is x and "p=0.3" in repr(module)
    with pytest.raises(ValueError):
        Dropout(1.5)


def test_resume_keeps_the_saved_precision_and_older_models_stay_fp32(tmp_path):
    import json

    from depnmt.training.config import inherit_saved
    params = {"train_precision": "auto", "train_max_steps": 9}
    # config.json files before --precision existed were config_format 1 (a flat options bag)
    model = {"src_vocab_size": 10, "tgt_vocab_size": 10, "d_model": 512, "n_heads": 8,
             "d_ff": 2048, "encoder_layers": 6, "decoder_layers": 6, "dropout": 0.1,
             "attention_dropout": 0.0, "tie_decoder_embeddings": True,
             "share_all_embeddings": False, "scheme": ["abs"], "scheme_options": {"rel_k": 2}}
    for saved, given, expected in (({"amp": True}, set(), "fp32"),       # before --precision
                                   ({"amp": True, "precision": "bf16"}, set(), "bf16"),
                                   ({"amp": True, "precision": "bf16"}, {"train_precision"}, "auto")):
        (tmp_path / "config.json").write_text(json.dumps({
            "config_format": 1, "model": model, "tokenizers": {"src": {}, "tgt": {}},
            "parser": {"src": None}, "training": saved}))
        assert inherit_saved(params, given, tmp_path)["train_precision"] == expected


def test_onednn_cache_is_bounded_unless_the_user_set_it(monkeypatch):
    from depnmt.core.device import ONEDNN_CACHE_CAPACITY, ONEDNN_CACHE_VAR, bound_onednn_cache
    monkeypatch.delenv(ONEDNN_CACHE_VAR, raising=False)
    bound_onednn_cache()
    assert os.environ[ONEDNN_CACHE_VAR] == str(ONEDNN_CACHE_CAPACITY) == "64"
    monkeypatch.setenv(ONEDNN_CACHE_VAR, "8")
    bound_onednn_cache()
    assert os.environ[ONEDNN_CACHE_VAR] == "8"


def test_train_bounds_the_onednn_cache_before_it_builds_a_model(monkeypatch, tmp_path):
    """`depnmt train` sets the variable before any model exists (here: it fails on a data
    folder without a bpe manifest, after having set it)."""
    from depnmt.cli import main
    from depnmt.core.device import ONEDNN_CACHE_VAR
    monkeypatch.delenv(ONEDNN_CACHE_VAR, raising=False)
    with pytest.raises(SystemExit):
        (tmp_path / "data").mkdir()
        main(["train", "-i", str(tmp_path / "data"), "-o", str(tmp_path / "m")])
    assert os.environ.get(ONEDNN_CACHE_VAR) == "64"


@pytest.mark.parametrize("old_torch", [False, True])
def test_autocast_dtype_reads_the_cpu_autocast_on_every_torch(old_torch, monkeypatch):
    """``device.autocast_dtype`` (the decoder's fused QKV weights follow it) on torch >= 2.4 and,
    with the per-device functions hidden, the way torch 2.3 answers."""
    import warnings

    from depnmt.core import device
    from depnmt.core.device import autocast_dtype
    if old_torch:
        monkeypatch.setattr(device, "PER_DEVICE_AUTOCAST", False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)   # torch >= 2.4: the old calls
        assert autocast_dtype("cpu") is None
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert autocast_dtype("cpu") == torch.bfloat16
            assert autocast_dtype("cuda") is None
        assert autocast_dtype("cpu") is None
