"""What packing the weights for oneDNN (:mod:`depnmt.model.packed`) gives a CPU search.

Two parts, each interleaved (A B A B ...) so that a change of the machine's load hits both:

* layers: every linear shape of the model (``in -> out``) at some row counts (a decoding step
  multiplies ``n·K`` rows), ``nn.Linear`` against :class:`~depnmt.model.packed.PackedLinear`
  in the precision's arithmetic (bf16 autocast for ``auto`` on CPUs with native bf16), median
  microseconds per call;
* decoding: ``translate_lines`` of the same raw lines by the model as ``depnmt translate``
  loads it (packed) and with packing switched off (``DEPNMT_PACKED_WEIGHTS=0``: ``F.linear``
  everywhere), each in its own process per round, sentences/s and how many outputs are the
  same.

    python bench/packed.py -m work/multi30k-en-de/model -i work/multi30k-en-de/prepare/test.raw.en
    \\
        --precision auto --lines 1000 --rounds 5
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

ROWS = (4, 64, 256, 1024)


def layer_table(model, amp, rows: tuple[int, ...], rounds: int) -> list[str]:
    """Markdown rows: per linear shape and row count, µs of nn.Linear, of PackedLinear, ratio."""
    import torch
    from torch import nn

    from depnmt.model.packed import PackedLinear
    shapes = sorted({(m.in_features, m.out_features, m.bias is not None)
                     for m in model.modules() if isinstance(m, nn.Linear)})
    out = ["| in → out | rows | nn.Linear µs | packed µs | speed-up |",
           "|---|---:|---:|---:|---:|"]
    for d_in, d_out, bias in shapes:
        plain = nn.Linear(d_in, d_out, bias=bias).eval()
        packed = PackedLinear(plain)
        for n in rows:
            x = torch.randn(n, 1, d_in)
            times = {"plain": [], "packed": []}
            with torch.no_grad(), torch.autocast("cpu", amp or torch.bfloat16,
                                                 enabled=amp is not None):
                for _ in range(rounds):
                    for name, layer in (("plain", plain), ("packed", packed)):
                        times[name].append(per_call(layer, x))
            a, b = statistics.median(times["plain"]), statistics.median(times["packed"])
            out.append(f"| {d_in} → {d_out} | {n} | {a:.1f} | {b:.1f} | {a / b:.2f} |")
    return out


def per_call(layer, x, calls: int = 50) -> float:
    """Microseconds per call of ``layer(x)`` (after a warm-up)."""
    for _ in range(5):
        layer(x)
    start = time.perf_counter()
    for _ in range(calls):
        layer(x)
    return (time.perf_counter() - start) / calls * 1e6


def worker(model_dir: Path, precision: str, lines: list[str], out: Path) -> None:
    """Load the model as ``depnmt translate`` does, warm up, time one pass; write the result."""
    from depnmt.decoding.translate import Translator
    tr = Translator.from_model_dir(model_dir, None, "cpu", precision)
    list(tr.translate_lines(lines[:8]))
    start = time.perf_counter()
    output = [str(o) for o in tr.translate_lines(lines)]
    out.write_text(json.dumps({"seconds": time.perf_counter() - start, "output": output}),
                   encoding="utf-8")


def timed_pass(args: list[str], packed: bool, threads: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "DEPNMT_NO_PROGRESS": "1",
           "DEPNMT_PACKED_WEIGHTS": "1" if packed else "0"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        done = subprocess.run([sys.executable, __file__, *args, "--worker-out", str(out)],
                              capture_output=True, text=True, env=env)
        if done.returncode:
            raise click.ClickException(done.stderr.strip())
        return json.loads(out.read_text(encoding="utf-8"))


@click.command()
@click.option("-m", "--model", "model_dir", type=click.Path(path_type=Path, file_okay=False),
              required=True)
@click.option("-i", "--input", "input_path", type=click.Path(path_type=Path, dir_okay=False),
              required=True, help="raw source lines")
@click.option("--precision", default="auto", show_default=True)
@click.option("--lines", type=int, default=1000, show_default=True)
@click.option("--rounds", type=int, default=5, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True)
@click.option("--worker-out", type=click.Path(path_type=Path), hidden=True)
def main(model_dir, input_path, precision, lines, rounds, threads, worker_out):
    src = input_path.read_text(encoding="utf-8").splitlines()[:lines]
    if worker_out:
        return worker(model_dir, precision, src, worker_out)
    import torch

    from depnmt.core.device import cpu_flags, train_precision
    from depnmt.model.transformer import ModelConfig, TransformerNMT
    from depnmt.storage.modeldir import read_config
    torch.set_num_threads(threads)
    amp = train_precision(torch.device("cpu"), precision)
    model = TransformerNMT(ModelConfig.from_dict(read_config(model_dir)["model"]))
    click.echo(f"precision {precision} ({amp or 'fp32'}), {threads} threads, CPU flags: "
               f"{' '.join(sorted(f for f in cpu_flags() if 'avx' in f or 'amx' in f))}")
    for row in layer_table(model, amp, ROWS, rounds):
        click.echo(row)
    args = ["-m", str(model_dir), "-i", str(input_path), "--precision", precision,
            "--lines", str(len(src))]
    speeds, outputs = {True: [], False: []}, {}
    for r in range(rounds):
        for packed in ((True, False) if r % 2 == 0 else (False, True)):
            result = timed_pass(args, packed, threads)
            speeds[packed].append(len(src) / result["seconds"])
            outputs.setdefault(packed, result["output"])
    ratios = [a / b for a, b in zip(speeds[True], speeds[False])]
    same = sum(a == b for a, b in zip(outputs[True], outputs[False]))
    click.echo(f"\n{len(src)} lines, {rounds} rounds; load average "
               f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    click.echo("| weights | sentences/s (median) | each round |\n|---|---:|---|")
    for packed in (False, True):
        click.echo(f"| {'packed' if packed else 'F.linear'} | "
                   f"{statistics.median(speeds[packed]):.1f} | "
                   f"{' '.join(f'{s:.1f}' for s in speeds[packed])} |")
    click.echo(f"packed / F.linear: {statistics.median(ratios):.2f} (rounds "
               f"{' '.join(f'{x:.2f}' for x in ratios)}); outputs the same: "
               f"{same}/{len(src)}")


if __name__ == "__main__":
    main()
