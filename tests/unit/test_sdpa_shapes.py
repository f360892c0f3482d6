"""``bench/sdpa_shapes.py`` (training on batches of varied shapes with and without cuDNN's
attention) runs at tiny size on the CPU: this checks the script, not the speed."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import torch

from tests.scripts import REPO, load_script


def test_varied_batches_have_their_own_shapes_within_the_token_budget():
    bench = load_script("sdpa_shapes")
    import schemes
    setup = schemes.Setup(torch.device("cpu"), 32, 4, 64, 1, 60, 13, 13, 2, 1, 1)
    batches = bench.varied_batches(setup, 6, 64, 12)
    shapes = {(len(b), len(b[0].src), len(b[0].tgt)) for b in batches}
    assert len(shapes) > 3
    for batch in batches:
        src, tgt = len(batch[0].src), len(batch[0].tgt) + 1   # lengths with EOS (and BOS)
        assert {len(ex.src) for ex in batch} == {src} and 8 <= src <= 12 and 8 <= tgt <= 12
        assert len(batch) == max(1, 64 // max(src, tgt))


@pytest.mark.slow
def test_tiny_cpu_run_prints_both_settings():
    done = subprocess.run([sys.executable, str(REPO / "bench" / "sdpa_shapes.py"), "--device",
                           "cpu", "--tiny"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = re.findall(r"^\| (default|no-cudnn) \| ([\d,]+) \| ([\d,]+) \|", done.stdout, re.M)
    assert [r[0] for r in rows] == ["default", "no-cudnn"]
    assert all(float(x.replace(",", "")) > 0 for r in rows for x in r[1:])
