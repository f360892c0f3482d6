"""``bench/profile_train.py`` (a training step's phases and kernel time by kind) and
``bench/gpu_ab.py`` (A/B of training paths) run at tiny size on the CPU: this checks the
scripts, not the speed; and the kinds a kernel name falls in."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.scripts import REPO, load_script


def run(script: str, *args: str) -> str:
    done = subprocess.run([sys.executable, str(REPO / "bench" / script), "--device", "cpu",
                           "--tiny", *args], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_profile_train_reports_every_phase_and_kinds_that_add_up():
    out = run("profile_train.py", "--schemes", "abs,rel", "--steps", "1", "--top", "3")
    assert re.findall(r"^### (\w+): [\d,]+ target tokens/s", out, re.M) == ["abs", "rel"]
    for section in out.split("### ")[1:]:
        phases = dict(re.findall(r"^\| (forward|loss|backward|optimizer) \| ([\d.]+) \|",
                                 section, re.M))
        assert set(phases) == {"forward", "loss", "backward", "optimizer"}
        kernels = float(re.search(r"kernels ([\d.]+) ms", section).group(1))
        kinds = [float(ms) for ms in re.findall(r"^\| [\w/ -]+ \| ([\d.]+) \| [\d.]+% \|",
                                                section, re.M)]
        assert kinds and abs(sum(kinds) - kernels) <= 0.01 * kernels + 0.05


def test_kernel_kinds():
    profile = load_script("profile_train")
    assert profile.kind_of("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == "matmul"
    assert profile.kind_of("cudnn_generated_fort_native_sdpa_sm90_flash_bprop") == "attention"
    assert profile.kind_of("void at::native::bfloat16_copy_kernel_cuda") == "cast/copy"
    assert profile.kind_of("cunn_SoftMaxBackward<4, float>") == "softmax"
    assert profile.kind_of("something_else") == "other"


def test_gpu_ab_prints_a_ratio_for_every_toggle():
    out = run("gpu_ab.py", "--steps", "1")
    rows = re.findall(r"^\| ([\w-]+) \| .+ \| ([\d,]+) \| ([\d,]+) \| ([\d.]+) \|$", out, re.M)
    assert [r[0] for r in rows] == ["fused-qkv", "cross-kv", "cross-entropy"]
    for _, a, b, ratio in rows:
        a, b = float(a.replace(",", "")), float(b.replace(",", ""))
        assert abs(b / a - float(ratio)) <= 0.01 * float(ratio) + 0.001
