"""Two gloo processes step with the gradient one process computes on the union of their
batches: the loss of an update is normalised by the target tokens of every rank's batches
together (:mod:`depnmt.training.step`), not each rank by its own and then averaged by DDP —
which, on batches of very unequal sizes (label smoothing on), would be far off. The weights
after Adam's first step barely show such a bug (its step is about lr × the gradient's sign);
the gradient itself does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from .test_distributed import free_port

PROBE = '''
import dataclasses, random, sys
import torch
from depnmt.data.batches import Example, collate
from depnmt.model.transformer import ModelConfig, TransformerNMT
from depnmt.training import distributed as dist
from depnmt.training.config import TrainOptions
from depnmt.training.step import Updater

out, freq = sys.argv[1], int(sys.argv[2])
rng = random.Random(5)
sizes = [(2, 3), (9, 12), (3, 4), (7, 14)] * freq          # very unequal token counts
batches = [collate([Example(i, [rng.randrange(4, 30) for _ in range(rng.randrange(2, L))] + [2],
                            [rng.randrange(4, 30) for _ in range(rng.randrange(1, L))])
                    for i in range(n)]) for n, L in sizes[:2 * freq]]
with dist.process_group("cpu"):
    torch.manual_seed(1)
    model = TransformerNMT(ModelConfig(30, 30, d_model=16, n_heads=2, d_ff=16,
                                       encoder_layers=1, decoder_layers=1, dropout=0.0))
    world = dist.world_size()
    options = dataclasses.replace(TrainOptions(), max_tokens=100, update_freq=freq * 2 // world,
                                  label_smoothing=0.1, lr=1e-3, warmup=4, clip_norm=0.0)
    updater = Updater(model, torch.device("cpu"), None, options)
    updater.use(dist.wrap(model, torch.device("cpu")))
    grads = {}

    def capture():
        grads.update({n: p.grad.clone() for n, p in model.named_parameters()})
        return Updater.optimizer_step(updater)

    updater.optimizer_step = capture
    updater.step([b for i, b in enumerate(batches) if i % world == dist.rank()])
    if dist.rank() == 0:
        torch.save(grads, out)
'''


def gradients(tmp_path, freq: int, nproc: int) -> dict:
    """The gradient of the probe's one update, with ``nproc`` gloo processes (1: plain)."""
    script, out = tmp_path / "probe.py", tmp_path / f"grads-{freq}-{nproc}.pt"
    script.write_text(PROBE, encoding="utf-8")
    launch = ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(nproc),
               "--master_addr", "127.0.0.1", "--master_port", str(free_port())]
              if nproc > 1 else [sys.executable])
    done = subprocess.run([*launch, str(script), str(out), str(freq)], capture_output=True,
                          text=True, timeout=300, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-2000:]
    return torch.load(out, weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("freq", [1, 2])
def test_two_ranks_step_with_the_gradient_of_the_union(tmp_path, freq):
    """Per parameter, the largest difference relative to its largest gradient; parameters
    whose gradient is zero but for rounding (the key projections' biases: a softmax ignores a
    constant added to every score) are left out."""
    one, two = gradients(tmp_path, freq, 1), gradients(tmp_path, freq, 2)
    assert one.keys() == two.keys() and one
    scale = max(float(g.abs().max()) for g in one.values())
    compared = [n for n, g in one.items() if float(g.abs().max()) > 1e-6 * scale]
    assert len(compared) > len(one) - 4
    worst = max(float((two[n] - one[n]).abs().max() / one[n].abs().max()) for n in compared)
    assert worst < 1e-5, worst
