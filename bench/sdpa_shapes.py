"""Training on batches of varied shapes, with and without cuDNN's attention kernel.

A real training batch has its own sentence count and lengths, so the attention's shapes change
from batch to batch; cuDNN's fused attention (which torch picks for bf16 on recent GPUs) builds
an execution plan for every new shape. ``translate`` therefore leaves cuDNN out of its search
(``depnmt.core.device.search_attention``: a fresh bf16 search on an H200 ran 12-15x faster without
it). This measures whether training pays the same: the abs Transformer (``bench/schemes.py``'s
training step: forward, label-smoothed loss, backward, Adam) in bf16 over ``--batches`` synthetic
batches of random lengths (source and target 8-``--max-len`` subwords, as many sentences as fit
``--max-tokens``), twice, in a fresh process per setting (so no plan is cached from before):

* ``default`` — torch's choice of attention kernel (cuDNN included);
* ``no-cudnn`` — the search's backends (``depnmt.core.device.SEARCH_SDPA_BACKENDS``).

The first pass over the batches meets every shape new, the second has seen them all; printed
per setting and round: target tokens/s of each pass. Settings alternate within a round (A, B;
then B, A). On a CPU the two settings run the same kernels (a check that the script works).

    python bench/sdpa_shapes.py --device cuda                 # Transformer-base, 60 batches
    python bench/sdpa_shapes.py --device cpu --tiny           # seconds
"""

from __future__ import annotations

import contextlib
import json
import random
import statistics
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import click
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import schemes as bench  # noqa: E402

from depnmt.core.device import SEARCH_SDPA_BACKENDS, search_attention  # noqa: E402

SETTINGS = ("default", "no-cudnn")
BASE = dict(d_model=512, heads=8, d_ff=2048, layers=6, vocab=32000)
TINY = dict(d_model=32, heads=4, d_ff=64, layers=2, vocab=60)


def varied_batches(setup: bench.Setup, n: int, max_tokens: int, max_len: int,
                   seed: int = 3) -> list[list]:
    """``n`` batches of synthetic examples (``bench/schemes.py``), each of its own random source
    and target length (8..``max_len``) and as many sentences as ``max_tokens`` allows."""
    rng = random.Random(seed)
    batches, index = [], 0
    for _ in range(n):
        src_len, tgt_len = rng.randint(8, max_len), rng.randint(8, max_len)
        size = max(1, max_tokens // max(src_len, tgt_len))
        shaped = replace(setup, src_len=src_len, tgt_len=tgt_len)
        batches.append([bench.synthetic_example(index + i, shaped, rng) for i in range(size)])
        index += size
    return batches


def kernels(setting: str, device: torch.device):
    """The attention kernels of ``setting``: torch's default, or the search's."""
    return search_attention(device) if setting == "no-cudnn" else contextlib.nullcontext()


def worker(setting: str, device: str, tiny: bool, n: int, max_tokens: int,
           max_len: int) -> dict:
    """Build the abs model in bf16, one untimed step on a batch of a shape not in the list,
    then two timed passes over the varied batches: target tokens/s of each."""
    dims = TINY if tiny else BASE
    setup = bench.Setup(torch.device(device), dims["d_model"], dims["heads"], dims["d_ff"],
                        dims["layers"], dims["vocab"], src_len=max_len + 1,
                        tgt_len=max_len + 1, batch_size=2, n_batches=1, decode_len=1)
    setup.corpus = [bench.make_examples(setup)] + varied_batches(setup, n, max_tokens, max_len)
    run = bench.new_run(setup, "abs", "bf16")
    warm, batches = run.batches[0], run.batches[1:]
    out = {"setting": setting}
    with kernels(setting, setup.device):
        bench.train_step(run.model, run.optimizer, warm, run.dtype)
        for name in ("first", "second"):
            bench.sync(setup.device)
            start = time.perf_counter()
            for batch in batches:
                bench.train_step(run.model, run.optimizer, batch, run.dtype)
            bench.sync(setup.device)
            seconds = time.perf_counter() - start
            out[name] = sum(b.n_tokens for b in batches) / seconds
    return out


@click.command()
@click.option("--device", default="cuda" if torch.cuda.is_available() else "cpu",
              show_default=True)
@click.option("--tiny", is_flag=True, help="a 2+2-layer d_model 32 model, 4 batches, 1 round")
@click.option("--batches", "n", default=60, show_default=True)
@click.option("--max-tokens", default=8000, show_default=True,
              help="target or source tokens a batch (the larger side)")
@click.option("--max-len", default=80, show_default=True)
@click.option("--rounds", default=2, show_default=True)
@click.option("--worker", "setting", type=click.Choice(SETTINGS), hidden=True)
def main(device, tiny, n, max_tokens, max_len, rounds, setting):
    if tiny:
        n, max_tokens, max_len, rounds = 4, 64, 12, 1
    if setting:
        click.echo(json.dumps(worker(setting, device, tiny, n, max_tokens, max_len)))
        return
    results = {s: [] for s in SETTINGS}
    for r in range(rounds):
        for s in SETTINGS if r % 2 == 0 else SETTINGS[::-1]:
            args = [sys.executable, __file__, "--worker", s, "--device", device, "--batches",
                    str(n), "--max-tokens", str(max_tokens), "--max-len", str(max_len)]
            done = subprocess.run(args + (["--tiny"] if tiny else []), capture_output=True,
                                  text=True)
            if done.returncode:
                raise click.ClickException(f"{s}: {done.stderr.strip()[-2000:]}")
            results[s].append(json.loads(done.stdout.strip().splitlines()[-1]))
            click.echo(f"round {r + 1} {s}: {results[s][-1]['first']:,.0f} / "
                       f"{results[s][-1]['second']:,.0f} tgt tok/s", err=True)
    name = torch.cuda.get_device_name(device) if device.startswith("cuda") else "cpu"
    click.echo(f"abs, bf16, {n} batches of random shapes (lengths 8-{max_len}, {max_tokens} "
               f"tokens), {rounds} rounds, {name}, torch {torch.__version__}; no-cudnn: "
               f"{', '.join(SEARCH_SDPA_BACKENDS)}")
    click.echo("| setting | first pass tgt tok/s | second pass tgt tok/s | each round (first / "
               "second) |\n|---|---:|---:|---|")
    for s, rows in results.items():
        click.echo(f"| {s} | {statistics.median(x['first'] for x in rows):,.0f} | "
                   f"{statistics.median(x['second'] for x in rows):,.0f} | "
                   + "; ".join(f"{x['first']:,.0f} / {x['second']:,.0f}" for x in rows) + " |")


if __name__ == "__main__":
    main()
