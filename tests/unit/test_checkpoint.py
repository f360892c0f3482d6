"""Checkpoint files: the digest survives save/load and catches changed contents; a failed write
(file size limit, as on a full disk) keeps the previous checkpoint and leaves no temporary file."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.storage.checkpoint import DIGEST, content_digest, load_checkpoint, save_checkpoint


def state() -> dict:
    torch.manual_seed(0)
    return {"model": {"w": torch.randn(8, 4), "b": torch.randn(4).to(torch.bfloat16),
                      "step": torch.tensor(3.0)},
            "progress": {"step": 3, "best": None, "history": [{"dev_nll": 1.5, "best": True}]},
            "rng": {"python": (3, tuple(range(5)), None), "torch": torch.get_rng_state()}}


def test_digest_round_trip_and_any_change_is_caught(tmp_path):
    path = tmp_path / "c.pt"
    save_checkpoint(path, state())
    loaded = load_checkpoint(path)
    assert DIGEST not in loaded and torch.equal(loaded["model"]["w"], state()["model"]["w"])
    saved = torch.load(path, weights_only=True)
    digest = saved.pop(DIGEST)
    assert content_digest(saved) == digest
    for change in (lambda s: s["model"]["w"].view(-1)[5].add_(1e-6),
                   lambda s: s["progress"]["history"][0].update(dev_nll=1.5000001),
                   lambda s: s["rng"].update(python=(3, (0, 1, 2, 3, 5), None)),
                   lambda s: s["progress"].update(step=3.0)):      # 3.0 is not 3
        changed = torch.load(path, weights_only=True)
        change(changed)
        torch.save(changed, path)
        with pytest.raises(DepnmtError, match="corrupted checkpoint"):
            load_checkpoint(path)


def test_failed_write_keeps_the_previous_checkpoint(tmp_path):
    """A file size limit (EFBIG, like ENOSPC on a full disk) during the write: one error naming
    the file, the previous checkpoint intact, no temporary file."""
    path = tmp_path / "last.pt"
    save_checkpoint(path, state())
    before = path.read_bytes()
    script = textwrap.dedent(f"""
        import resource, signal, sys, torch
        from pathlib import Path
        from depnmt.storage.checkpoint import save_checkpoint
        from depnmt.core.errors import DepnmtError
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)    # EFBIG instead of being killed
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        try:
            save_checkpoint(Path({str(path)!r}), {{"model": {{"w": torch.zeros(100_000)}}}})
        except DepnmtError as exc:
            print(exc)
            sys.exit(2)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout.startswith(f"{path}: cannot write: File too large")
    assert path.read_bytes() == before and load_checkpoint(path)["progress"]["step"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["last.pt"]
