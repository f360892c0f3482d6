"""``bench/gpu_check.py``: the GPU check runs on the CPU at tiny size, every registered scheme
in its table, and its FLOP count matches the model it describes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.scripts import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "gpu_check.py"


def load_check():
    """``bench/gpu_check.py`` as a module (a script, not part of the package)."""
    return load_script("gpu_check")


@pytest.mark.slow
def test_tiny_cpu_run_passes_with_every_scheme(tmp_path):
    """The whole check at tiny size on the CPU, without the tokenizer and parser packages the
    GPU image lacks: exit status 0, one parity, train and translate row per registered
    scheme, every section present, the markdown and JSON written."""
    from depnmt.model.schemes.registry import SCHEMES, load_builtin_schemes
    load_builtin_schemes()
    out = tmp_path / "check.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--out",
                           str(out), "--block-imports", "sacremoses,spacy,stanza"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "check.md.json").read_text())["rows"]
    assert {r["section"] for r in rows} == {"parity", "train", "ddp", "translate", "speed",
                                            "loader"}
    assert not [r for r in rows if r["status"] == "FAIL"]
    for section in ("parity", "train", "translate"):
        checked = {r["check"].split()[0] for r in rows if r["section"] == section}
        assert set(SCHEMES) <= checked, (section, set(SCHEMES) - checked)
    table = out.read_text()
    assert table == done.stdout.strip() + "\n"
    assert "| train | abs fp32, 2 updates | loss" in table and "resumed 1→2" in table
    assert "| translate | default --max-tokens on cpu | 8000 | PASS |" in table


def test_speed_rows_pass_on_an_avx2_only_cpu(tmp_path):
    """Every speed system trains in bf16 on a CPU without AVX-512 (emulated: torch and oneDNN
    capped at AVX2), GPS too: oneDNN has no bf16 LSTM there and its row failed."""
    check = load_check()
    env = {**os.environ, "ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--tiny", "--only",
                           "speed", "--out", str(tmp_path / "check.md")], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "check.md.json").read_text())["rows"]
    assert [r["check"].split(";")[0].split(" (")[0] for r in rows] == [
        *check.SPEED_SYSTEMS, *(f"{name}/explicit" for name in check.EXPLICIT_RUNS)]
    assert not [r for r in rows if r["status"] == "FAIL"]


def test_unknown_section_is_a_usage_error():
    done = subprocess.run([sys.executable, str(SCRIPT), "--device", "cpu", "--only", "speeed"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "speeed" in done.stderr


def test_flop_count_covers_every_weight_of_the_model():
    """N_src + N_tgt are exactly the weights of the model's linear layers (the tied output
    projection included), so 6 · N · tokens counts every weight multiply."""
    from depnmt.model.schemes.registry import scheme_entries
    from depnmt.model.transformer import ModelConfig, TransformerNMT
    check = load_check()
    s = dict(d_model=16, heads=2, d_ff=24, layers=3, vocab=120, src_len=7, tgt_len=7)
    cfg = ModelConfig(s["vocab"], s["vocab"], d_model=16, n_heads=2, d_ff=24, encoder_layers=3,
                      decoder_layers=3, schemes=scheme_entries(["abs"], {}))
    model = TransformerNMT(cfg)
    weights = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    assert sum(check.matmul_params(s)) == weights
    attention = 12 * 16 * 3 * 3 * 7 * 7
    assert check.train_flops(s, 5) == 5 * (6 * 7 * weights + attention)


def test_peak_by_device_name(monkeypatch):
    check = load_check()
    cuda = torch.device("cuda", 0)
    for name, peak in (("NVIDIA H100 80GB HBM3", 989.0), ("NVIDIA H100 PCIe", 756.0),
                       ("NVIDIA H200", 989.0), ("NVIDIA A100-SXM4-80GB", 312.0),
                       ("Tesla T4", None)):
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device, n=name: n)
        assert check.peak_tflops(cuda, None) == peak, name
    assert check.peak_tflops(cuda, 123.0) == 123.0
    assert check.peak_tflops(torch.device("cpu"), None) is None


def test_shipped_data_unpacks_into_verified_stage_folders(tmp_path):
    """The manifests point at where the data is unpacked and their line counts hold."""
    from depnmt.core.manifest import load_manifest
    check = load_check()
    data = check.unpack(tmp_path / "data")
    bpe = load_manifest(data / "bpe", "bpe")
    assert Path(bpe["prepare_dir"]) == data / "prepare"
    load_manifest(data / "parse", "parse")
    load_manifest(data / "prepare", "prepare")
    assert sum(f.stat().st_size for f in check.DATA.rglob("*") if f.is_file()) < 300_000


def test_published_torch_range_is_the_tested_range():
    """pyproject's torch range runs from the version CI installs in its second environment
    (.ci/run reads the `torch>=` bound) to the minor version bin/install pins, no further."""
    import re

    from packaging.specifiers import SpecifierSet
    from packaging.version import Version
    pyproject = (REPO / "pyproject.toml").read_text()
    spec = SpecifierSet(re.search(r'"torch([^"]+)"', pyproject).group(1))
    pinned = Version(re.search(r'"torch==([^"]+)"', (REPO / "bin" / "install").read_text())
                     .group(1))
    lowest = [s for s in spec if s.operator == ">="]
    assert len(lowest) == 1 and 'torch==$lowest' in (REPO / ".ci" / "run").read_text()
    assert pinned in spec and Version(lowest[0].version) in spec
    next_minor = Version(f"{pinned.major}.{pinned.minor + 1}")
    assert next_minor not in spec, f"{spec} allows torch {next_minor}, which nothing tests"


def test_each_scheme_is_chosen_by_todays_name(monkeypatch):
    """The check trains every registered scheme alone with `--scheme NAME`: today's name of
    that one component (``noabs+dep``), which means it without a deprecation warning."""
    from depnmt.model.schemes import names, registry
    check = load_check()
    warned = []
    monkeypatch.setattr(names, "deprecation", lambda old, new: warned.append(old))
    registry.load_builtin_schemes()
    for name in registry.SCHEMES:
        spelled = check.scheme_flags(name, 2)[1]
        assert names.parse_name(spelled).components == [name], spelled
    assert not warned


def test_gradient_error_floors_gradients_that_are_zero_but_for_rounding():
    """A key projection's bias has a gradient of ~1e-9 of the whole (zero in exact arithmetic):
    two devices' rounding noise there is no error (a GPU's first run failed every scheme on
    the plain relative error, 2.4), while a 1 % error in a real gradient still fails."""
    check = load_check()
    torch.manual_seed(0)
    ref = {"w": torch.randn(64, 64), "k_proj.bias": torch.randn(64) * 1e-9,
           "small": torch.randn(8) * 1e-2}
    noise = {"w": ref["w"] * (1 + 1e-7), "k_proj.bias": torch.randn(64) * 1e-9,
             "small": ref["small"].clone()}
    errors = check.gradient_errors(ref, noise)
    assert max(errors.values()) < check.GRAD_TOL
    assert torch.dist(noise["k_proj.bias"], ref["k_proj.bias"]) / ref["k_proj.bias"].norm() > 0.5
    wrong = {**noise, "small": ref["small"] * 1.01}
    assert check.gradient_errors(ref, wrong)["small"] > check.GRAD_TOL
    assert "missing" not in check.gradient_errors(ref, {**noise, "missing": None})


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (Linux /proc)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_a_hung_torchrun_is_killed_with_its_workers_and_its_stderr_kept(tmp_path):
    """A run past its time limit: the launcher and the worker it started killed — the worker in
    a session of its own, holding the launcher's stderr, as torchrun's workers do (a worker
    left alive would keep the check waiting for the end of its output) —, what it wrote to
    stderr kept in the log and returned (the row names the last lines), no exception."""
    import os
    check = load_check()
    launcher = ("import subprocess, sys, time\n"
                "w = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'],\n"
                "                     start_new_session=True)\n"
                "print('worker', w.pid, file=sys.stderr, flush=True)\n"
                "print('waiting for rendezvous', file=sys.stderr, flush=True)\n"
                "time.sleep(120)\n")
    log = tmp_path / "ddp.log"
    started = time.monotonic()
    status, err = check.run_logged([sys.executable, "-c", launcher], dict(os.environ), log, 3)
    assert time.monotonic() - started < 60              # not the worker's 120 s
    assert status is None and "waiting for rendezvous" in log.read_text()
    assert check.last_lines(err).endswith("waiting for rendezvous")
    worker = int(err.split()[1])
    for _ in range(50):                                 # killed: gone, or a zombie until reaped
        if not running(worker):
            break
        time.sleep(0.1)
    assert not running(worker)
    status, err = check.run_logged([sys.executable, "-c", "import sys; sys.exit(3)"],
                                   dict(os.environ), log, 30)
    assert status == 3


def test_missing_wheels_are_named_with_how_to_bring_them(monkeypatch):
    """On a GPU machine without internet, the train/ddp/translate checks need pure-Python wheels
    brought along: every missing one is named in the usage error (depnmt's commands import
    rich-click, which such a machine lacked)."""
    import importlib.util

    import click

    bench = load_check()
    assert set(bench.CHECK_WHEELS) == {"subword_nmt", "tqdm", "rich_click"}
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("rich_click", "tqdm") else real(name, *a))
    with pytest.raises(click.UsageError) as err:
        bench.require_wheels()
    message = err.value.message
    assert "tqdm, rich-click>=1.9" in message and "subword-nmt" not in message.split(":")[0]
    assert "pip download --no-deps 'tqdm' 'rich-click>=1.9'" in message
    monkeypatch.setattr(importlib.util, "find_spec", real)
    bench.require_wheels()                                  # all present here: no error


def test_loader_flops_are_the_speed_sections_for_equal_lengths():
    """With every sentence S + T long, the real loader's FLOPs a second are the pre-collated
    count of a batch times batches a second."""
    check = load_check()
    s = dict(d_model=512, heads=8, d_ff=2048, layers=6, vocab=32000, src_len=30, tgt_len=40)
    lengths = {"S": 30, "T": 40, "S2": 900, "T2": 1600, "ST": 1200, "vocab": 32000}
    run = {"src_tok_s": 3 * 250 * 30, "tgt_tok_s": 3 * 250 * 40}        # 3 batches a second
    assert check.loader_flops_per_s(s, lengths, run) == pytest.approx(
        3 * check.train_flops(s, 250), rel=1e-12)


def test_loader_rows_check_the_wait_and_mfu_on_cuda(monkeypatch, tmp_path):
    """On CUDA the loader rows are checks: the loop's wait ≤ 5 % and abs's MFU goal (faked
    measurements: 30 % MFU for abs; abs+dep+rel waits 8 % of its time)."""
    check = load_check()
    speed = load_script("loader_speed")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    plan = check.Plan(torch.device("cuda"), tmp_path)
    lengths = {"pairs": 10, "S": 27, "T": 28, "S2": 800, "T2": 850, "ST": 820, "vocab": 8000}
    s = plan.speed
    abs_tok = 0.30 * 989e12 / check.loader_flops_per_s(
        s, lengths, {"src_tok_s": 27 / 28, "tgt_tok_s": 1.0})
    runs = {"abs": dict(tgt_tok_s=abs_tok, src_tok_s=abs_tok * 27 / 28, wait_share_max=0.01,
                        wait_share_median=0.01, busy=0.97),
            "abs+dep+rel": dict(tgt_tok_s=0.9 * abs_tok, src_tok_s=0.9 * abs_tok * 27 / 28,
                                wait_share_max=0.08, wait_share_median=0.06, busy=0.9)}
    monkeypatch.setattr(speed, "make_corpus", lambda base, work, pairs, merges: work)
    monkeypatch.setattr(speed, "length_moments", lambda bpe: lengths)
    monkeypatch.setattr(speed, "train", lambda work, scheme, *a: runs[scheme])
    plan.loader = {**plan.loader, "schemes": ("abs", "abs+dep+rel")}
    monkeypatch.setitem(sys.modules, "loader_speed", speed)
    check.check_loader(plan, tmp_path)
    rows = [(r.check.split(";")[0], r.value, r.status) for r in plan.rows]
    assert rows[0][1].startswith(f"{abs_tok:,.0f} tok/s, MFU 30.0%, GPU busy 97%, 1.00× abs")
    assert rows[0][2] == "PASS" and "vocab 8000" in rows[0][0]
    assert rows[1] == ("abs: the loop's wait for batches", "1.0% (median 1.0%)", "PASS")
    assert rows[2][1].endswith("0.90× abs") and rows[2][2] == "INFO"
    assert rows[3] == ("abs+dep+rel: the loop's wait for batches", "8.0% (median 6.0%)", "FAIL")


def test_busy_samples_read_nvidia_smi(tmp_path, monkeypatch):
    """The GPU's utilization as nvidia-smi prints it (a stand-in on PATH), as fractions."""
    speed = load_script("loader_speed")
    fake = tmp_path / "nvidia-smi"
    fake.write_text("#!/bin/sh\nfor u in 95 97 100; do echo $u; done\nsleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    with speed.busy_samples("cuda:0") as busy:
        time.sleep(1.0)
    assert busy == [0.95, 0.97, 1.0]
    with speed.busy_samples("cpu") as busy:
        pass
    assert busy == []


def test_the_prepared_run_writes_its_files_and_passes_the_exit_status_on(tmp_path):
    """``bench/gpu_check.sh``: the table, JSON, log and GPU description in the folder given,
    and the check's exit status (2 for a usage error)."""
    script = REPO / "bench" / "gpu_check.sh"
    done = subprocess.run(["bash", str(script), str(tmp_path / "out"), "--device", "cpu",
                           "--tiny", "--only", "speed"], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:]
    assert {p.name for p in (tmp_path / "out").iterdir()} == {
        "gpu-check.md", "gpu-check.md.json", "gpu-check.log", "gpu.csv"}
    assert "rows, 0 failed" in (tmp_path / "out" / "gpu-check.md").read_text()
    bad = subprocess.run(["bash", str(script), str(tmp_path / "bad"), "--device", "cpu",
                          "--only", "speeed"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "speeed" in (tmp_path / "bad" / "gpu-check.log").read_text()


def test_compiled_loader_rows_count_the_compiles_and_check_them_on_cuda(monkeypatch, tmp_path):
    """The `train --compile dynamic` loader rows (faked measurements): tokens/s as ratios to
    the uncompiled abs and the same scheme, the compile counts, and on CUDA a failure when
    the measured updates kept compiling (abs+rel: 3 graphs after the warm-up)."""
    check = load_check()
    speed = load_script("loader_speed")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    plan = check.Plan(torch.device("cuda"), tmp_path)
    lengths = {"pairs": 10, "S": 27, "T": 28, "S2": 800, "T2": 850, "ST": 820, "vocab": 8000}
    eager = dict(tgt_tok_s=1000.0, src_tok_s=900.0, wait_share_max=0.01,
                 wait_share_median=0.01, busy=0.9)
    counts = {"abs": dict(compiled_graphs=2, recompiles=0, graph_breaks=0, steady_compiles=0),
              "abs+rel": dict(compiled_graphs=5, recompiles=3, graph_breaks=1,
                              steady_compiles=3)}

    def train(work, scheme, *args, timeout=None):
        compiled = args[-1] == ("--compile", "dynamic")
        assert timeout == (check.COMPILED_TIMEOUT_S if compiled else None)
        tok_s = {"abs": 1000.0, "abs+rel": 800.0}[scheme] * (1.5 if compiled else 1.0)
        return {**eager, "tgt_tok_s": tok_s, **(counts[scheme] if compiled else {})}
    monkeypatch.setattr(speed, "make_corpus", lambda base, work, pairs, merges: work)
    monkeypatch.setattr(speed, "length_moments", lambda bpe: lengths)
    monkeypatch.setattr(speed, "train", train)
    plan.loader = {**plan.loader, "schemes": ("abs", "abs+rel"), "compiled": ("abs", "abs+rel")}
    monkeypatch.setitem(sys.modules, "loader_speed", speed)
    check.check_loader(plan, tmp_path)
    rows = [(r.check, r.value, r.status) for r in plan.rows if "--compile" in r.check]
    assert [r[0] for r in rows] == [
        f"{s} --compile dynamic (inductor; 60 updates, the first 10 a warm-up)"
        for s in ("abs", "abs+rel")]
    assert rows[0][1].endswith("1.50× abs, 2 graphs compiled (0 in the measured updates), "
                               "0 recompiles, 0 graph breaks") and rows[0][2] == "PASS"
    assert "1.20× abs, 1.50× abs+rel, 5 graphs compiled (3 in the measured updates)" in \
        rows[1][1] and rows[1][2] == "FAIL"


def test_a_loader_run_past_its_timeout_is_killed_and_fails_with_its_log(tmp_path):
    """The compiled row's run has a time limit (its compile time on a GPU is unknown, and the
    check's GPU time is short): past it the run is killed and the row fails with the log."""
    speed = load_script("loader_speed")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"did not finish in 0.5 s \(killed\):\nstarted"):
        speed.run([sys.executable, "-c", "import time; print('started', flush=True); "
                   "time.sleep(30)"], tmp_path / "log", timeout=0.5)
    assert time.monotonic() - started < 10
