"""Where depnmt's beam search spends its time: torch.profiler over the decoding of BPE source
lines in fixed batches (as ``bench/peer.py``'s decode rounds), operators by self CPU time.

    python bench/profile_decode.py -m MODEL_DIR --src test.sorted.en --every 3 --precision auto
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import torch


@click.command()
@click.option("-m", "--model-dir", type=click.Path(path_type=Path, file_okay=False), required=True)
@click.option("--checkpoint", default="last", show_default=True, help="name in checkpoints/")
@click.option("--src", type=click.Path(path_type=Path, dir_okay=False), required=True,
              help="BPE source lines (e.g. peer.py's test.sorted.en)")
@click.option("--every", type=int, default=1, show_default=True, help="take every Nth line")
@click.option("--batch", type=int, default=32, show_default=True)
@click.option("--beam", type=int, default=4, show_default=True)
@click.option("--max-length", type=int, default=100, show_default=True)
@click.option("--precision", default="auto", show_default=True)
@click.option("--rows", type=int, default=18, show_default=True)
def main(model_dir, checkpoint, src, every, batch, beam, max_length, precision, rows):
    from torch.profiler import ProfilerActivity, profile

    from depnmt.core.device import autocast
    from depnmt.data.batches import Example, add_features, collate, encode_source
    from depnmt.decoding.search import search
    from depnmt.decoding.translate import Translator
    tr = Translator.from_model_dir(model_dir, model_dir / "checkpoints" / f"{checkpoint}.pt",
                                   "cpu", precision, beam=beam, max_len_a=0.0,
                                   max_len_b=max_length)
    lines = [ln.split() for ln in src.read_text(encoding="utf-8").splitlines()][::every]
    exs = [Example(i, encode_source(s, tr.src_vocab), [], s) for i, s in enumerate(lines)]
    add_features(exs, tr.schemes)

    def decode():
        with torch.no_grad(), autocast(tr.device, tr.amp):
            for i in range(0, len(exs), batch):
                b = collate(exs[i:i + batch])
                search(tr.model, b.src, b.src_feats, tr.search_cfg)

    decode()                                            # warm-up: allocators, oneDNN kernels
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        decode()
        seconds = time.perf_counter() - start
    click.echo(f"{len(exs)} sentences, {len(exs) / seconds:.1f} sentences/s under the profiler, "
               f"{torch.get_num_threads()} threads, precision {precision}")
    click.echo(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows))


if __name__ == "__main__":
    main()
