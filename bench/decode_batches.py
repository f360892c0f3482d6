"""Decoding speed and memory against the batch bound (``translate --max-tokens``) and precision.

One process, one loaded model per precision. Every (precision, max-tokens) setting first makes
one untimed pass over the lines (CUDA kernels loaded, allocator warmed), then ``--rounds`` timed
passes, interleaved: round r runs every setting before round r + 1, in reverse order every other
round, so that the machine's load hits all of them. A pass is ``Translator.translate_lines`` over
all the lines (tokenization, BPE, beam search, detokenization). Printed: sentences/s of each
pass, the median, its ratio to ``--baseline``, the peak GPU memory of the setting's passes and a
checksum of its output (equal within a precision when batching does not change a translation).

    python bench/decode_batches.py -m MODEL -i test.raw.en -i dev.raw.en --device cuda
    python bench/decode_batches.py --random-base 400 --device cuda       # memory, base size

``--random-base N``: instead of a trained model, a Transformer-base (6+6 layers, d_model 512,
8 heads, d_ff 2048, a 32,000-subword joint vocabulary) with random weights searches N random
sources of 5-120 subwords: it seldom ends a hypothesis early, so the searches run to the length
limit (1.5 S + 10), the most memory a batch of those lengths can take; its speed is not a
translation speed.
"""

from __future__ import annotations

import hashlib
import random
import statistics
import sys
import time
from pathlib import Path

import click
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


class ModelPasses:
    """Passes of a trained model's :class:`~depnmt.decoding.translate.Translator` over raw lines."""

    def __init__(self, model_dir: Path, lines: list[str], device: str, precisions: list[str]):
        from depnmt.decoding.translate import Translator
        self.lines = lines
        self.translators = {p: Translator.from_model_dir(model_dir, device=device, precision=p)
                            for p in precisions}
        self.device = next(iter(self.translators.values())).device

    def run(self, precision: str, max_tokens: int) -> list[str]:
        translator = self.translators[precision]
        translator.max_tokens = max_tokens
        return list(translator.translate_lines(self.lines))


class RandomBasePasses:
    """Beam search (beam 4) of a random-weight Transformer-base over random sources."""

    def __init__(self, n: int, device: str, seed: int = 1, tiny: bool = False):
        """``tiny``: 1+1 layers, d_model 32, 100 subwords, sources of 5-12 (a test of the
        script)."""
        from depnmt.core.device import resolve_device
        from depnmt.core.vocab import EOS
        from depnmt.data.batches import Example
        from depnmt.model.transformer import ModelConfig, TransformerNMT
        torch.manual_seed(seed)
        rng = random.Random(seed)
        self.device = resolve_device(device)
        vocab, longest = (100, 12) if tiny else (32000, 120)
        size = (dict(d_model=32, n_heads=2, d_ff=64, encoder_layers=1, decoder_layers=1)
                if tiny else {})
        self.model = TransformerNMT(ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab,
                                                share_all_embeddings=True, **size))
        self.model.to(self.device).eval()
        self.lengths = [rng.randint(5, longest) for _ in range(n)]
        self.examples = [Example(i, [rng.randint(10, vocab - 1) for _ in range(n_src - 1)]
                                 + [EOS], [EOS]) for i, n_src in enumerate(self.lengths)]

    @torch.no_grad()
    def run(self, precision: str, max_tokens: int) -> list[str]:
        from depnmt.core.device import autocast, search_attention, train_precision
        from depnmt.data.batches import collate
        from depnmt.decoding.search import SearchConfig, search
        from depnmt.decoding.translate import length_batches
        amp = train_precision(self.device, precision)
        cfg = SearchConfig(beam=4)
        out = [""] * len(self.examples)
        for rows in length_batches(self.lengths, cfg.beam, max_tokens):
            batch = collate([self.examples[i] for i in rows], self.model.schemes.schemes)
            batch = batch.to(self.device)
            with autocast(self.device, amp), search_attention(self.device):
                hyps = search(self.model, batch.src, batch.src_feats, cfg)
            for i, ids in zip(rows, hyps):
                out[i] = " ".join(map(str, ids))
        return out


def timed(passes, device: torch.device, precision: str, max_tokens: int
          ) -> tuple[float, str, float]:
    """(sentences/s, output checksum, peak GPU memory in GiB; 0 off CUDA) of one pass."""
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
    start = time.perf_counter()
    out = passes.run(precision, max_tokens)
    if cuda:
        torch.cuda.synchronize(device)
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if cuda else 0.0
    return len(out) / seconds, hashlib.sha256("\n".join(out).encode()).hexdigest()[:12], peak


@click.command()
@click.option("-m", "--model", "model_dir", type=click.Path(path_type=Path, file_okay=False),
              help="a trained model folder (depnmt train)")
@click.option("-i", "--input", "inputs", multiple=True,
              type=click.Path(path_type=Path, dir_okay=False),
              help="raw source lines (repeatable: the files are joined)")
@click.option("--lines", type=int, default=2000, show_default=True,
              help="the first this many lines (translate reads 2,000 at a time)")
@click.option("--random-base", type=int, default=0,
              help="N > 0: a random-weight Transformer-base on N random sources instead of -m")
@click.option("--max-tokens", "max_tokens", default="4000,8000,16000,32000,64000,128000",
              show_default=True, help="the batch bounds, comma-separated")
@click.option("--precisions", default="fp32,bf16", show_default=True,
              help="translate --precision values, comma-separated")
@click.option("--baseline", default="fp32@8000", show_default=True,
              help="PRECISION@MAX_TOKENS the ratios divide by")
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--device", default="cuda", show_default=True)
@click.option("--tiny", is_flag=True, help="with --random-base: a tiny model (tests the script)")
def main(model_dir: Path | None, inputs: tuple[Path, ...], lines: int, random_base: int,
         max_tokens: str, precisions: str, baseline: str, rounds: int, device: str,
         tiny: bool) -> None:
    precision_list = [p for p in precisions.split(",") if p]
    if random_base > 0:
        passes = RandomBasePasses(random_base, device, tiny=tiny)
        what = f"random {'tiny model' if tiny else 'Transformer-base'}, {random_base} sources"
    else:
        if model_dir is None or not inputs:
            raise click.UsageError("give -m MODEL and -i LINES, or --random-base N")
        text = [line for path in inputs
                for line in path.read_text(encoding="utf-8").splitlines()][:lines]
        passes = ModelPasses(model_dir, text, device, precision_list)
        what = f"{model_dir}, {len(text)} lines"
    dev = passes.device
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "CPU"
    print(f"{name}, torch {torch.__version__}: {what}", flush=True)
    settings = [(p, mt) for p in precision_list for mt in parse_ints(max_tokens)]
    speeds: dict = {s: [] for s in settings}
    sums: dict = {s: set() for s in settings}
    peaks: dict = {s: 0.0 for s in settings}
    for r in range(rounds + 1):                      # round 0: the untimed warm-up passes
        for s in (settings if r % 2 == 0 else settings[::-1]):
            sps, checksum, peak = timed(passes, dev, *s)
            sums[s].add(checksum)
            peaks[s] = max(peaks[s], peak)
            if r:
                speeds[s].append(sps)
            print(f"{'warm-up' if r == 0 else f'round {r}'} {s[0]} {s[1]}: {sps:,.0f} "
                  "sentences/s", flush=True)
    base_p, _, base_mt = baseline.partition("@")
    base = speeds.get((base_p, int(base_mt or 0)))
    base_median = statistics.median(base) if base else None
    print(f"\n| precision | max-tokens | sentences/s | each round | × {baseline} "
          "| peak GiB | output |")
    print("|---|---:|---:|---|---:|---:|---|")
    for s in settings:
        med = statistics.median(speeds[s]) if speeds[s] else float("nan")
        ratio = f"{med / base_median:.2f}" if base_median else "-"
        print(f"| {s[0]} | {s[1]} | {med:,.0f} | {' '.join(f'{x:,.0f}' for x in speeds[s])} "
              f"| {ratio} | {f'{peaks[s]:.2f}' if dev.type == 'cuda' else '-'} "
              f"| {'/'.join(sorted(sums[s]))} |")
    load = Path("/proc/loadavg").read_text().split()[:3] if Path("/proc/loadavg").exists() else []
    print(f"\nsentences/s: median of {rounds} rounds; host load average {' '.join(load)}")


if __name__ == "__main__":
    main()
