"""A/B of training paths on the same model and batch, interleaved step by step: what each
choice is worth on the device it is measured on.

* ``fused-qkv`` — a self-attention's W^Q, W^K, W^V in one matrix multiply
  (:meth:`~depnmt.model.attention.MultiHeadAttention.project_self`) against three;
* ``cross-kv`` — every decoder layer's cross-attention W^K, W^V in one matrix multiply
  (:meth:`~depnmt.model.transformer.TransformerNMT.cross_kv`) against two a layer;
* ``cross-entropy`` — the label-smoothed loss by ``F.cross_entropy(label_smoothing=ε,
  ignore_index=PAD)`` (a candidate, the same loss) against depnmt's ``log_softmax`` form.

Each row: target tokens/s of A and of B (medians over ``--steps`` steps each, alternated after a
warm-up step of each) and B / A, abs at Transformer-base on the speed section's batch of
``bench/gpu_check.py`` by default (bf16 autocast).

    python bench/gpu_ab.py --device cuda
    python bench/gpu_ab.py --device cpu --tiny --steps 2
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import click  # noqa: E402
import schemes as bench  # noqa: E402
import torch  # noqa: E402

from depnmt.core.device import resolve_device  # noqa: E402
from depnmt.core.vocab import PAD  # noqa: E402
from depnmt.model.attention import MultiHeadAttention  # noqa: E402
from depnmt.model.transformer import TransformerNMT  # noqa: E402


def three_projections(self, x):
    return (self.split_heads(self.q_proj(x)), self.split_heads(self.k_proj(x)),
            self.split_heads(self.v_proj(x)))


def per_layer_cross_kv(self, memory):
    return [layer.cross_attn.project_kv(memory) for layer in self.decoder]


def cross_entropy_loss(logits, target, epsilon):
    """The label-smoothed loss and NLL by ``F.cross_entropy`` (fp32 logits, PAD ignored)."""
    flat, gold = logits.float().flatten(0, 1), target.flatten()
    loss = torch.nn.functional.cross_entropy(flat, gold, ignore_index=PAD, reduction="sum",
                                             label_smoothing=epsilon)
    with torch.no_grad():
        nll = torch.nn.functional.cross_entropy(flat, gold, ignore_index=PAD, reduction="sum")
    return loss, nll


# name -> (system, (object, attribute) to patch, value in A, value in B, what A and B are)
TOGGLES = {
    "fused-qkv": ("abs", (MultiHeadAttention, "project_self"), three_projections,
                  MultiHeadAttention.project_self, "3 projections", "1 stacked"),
    "cross-kv": ("abs", (TransformerNMT, "cross_kv"), per_layer_cross_kv,
                 TransformerNMT.cross_kv, "2 a layer", "1 for all layers"),
    "cross-entropy": ("abs", (bench, "label_smoothed_nll"), bench.label_smoothed_nll,
                      cross_entropy_loss, "log_softmax form", "F.cross_entropy"),
}


def ab(setup: bench.Setup, name: str, steps: int) -> dict:
    system, (module, attr), a, b, what_a, what_b = TOGGLES[name]
    original = getattr(module, attr)
    run = bench.new_run(setup, system, "bf16")
    batch = run.batches[0]
    times: dict[str, list[float]] = {"A": [], "B": []}
    try:
        for side, value in (("A", a), ("B", b)):                 # warm-up, untimed
            setattr(module, attr, value)
            bench.train_step(run.model, run.optimizer, batch, run.dtype)
        for _ in range(steps):
            for side, value in (("A", a), ("B", b)):
                setattr(module, attr, value)
                seconds = bench.timed(lambda: bench.train_step(run.model, run.optimizer, batch,
                                                               run.dtype), setup.device)
                times[side].append(batch.n_tokens / seconds)
    finally:
        setattr(module, attr, original)
    tok_a, tok_b = statistics.median(times["A"]), statistics.median(times["B"])
    return {"name": name, "A": what_a, "B": what_b, "a": tok_a, "b": tok_b, "ratio": tok_b / tok_a}


@click.command(context_settings={"show_default": True, "help_option_names": ["-h", "--help"]})
@click.option("--device", default="auto", help="cuda, cuda:N, cpu or auto")
@click.option("--only", default=",".join(TOGGLES), help="toggles, comma-separated")
@click.option("--steps", type=click.IntRange(min=1), default=8, help="timed steps of A and B")
@click.option("--tiny", is_flag=True, help="a 2+2-layer d_model 32 model and 16 sentences")
def main(device: str, only: str, steps: int, tiny: bool) -> None:
    """A/B of the paths picked by device (see the module docstring)."""
    dev = resolve_device(device)
    setup = (bench.Setup(dev, 32, 4, 64, 2, 1000, 16, 16, 16, 1, 2) if tiny else
             bench.Setup(dev, 512, 8, 2048, 6, 32000, 100, 100, 250, 1, 2))
    print(f"<!-- {dev}, torch {torch.__version__}"
          + (f", {torch.cuda.get_device_name(dev)}" if dev.type == "cuda" else "") + " -->")
    print("| toggle | A | B | A tok/s | B tok/s | B / A |\n|---|---|---|---:|---:|---:|")
    for name in (n.strip() for n in only.split(",")):
        row = ab(setup, name, steps)
        print(f"| {row['name']} | {row['A']} | {row['B']} | {row['a']:,.0f} | {row['b']:,.0f} "
              f"| {row['ratio']:.3f} |", flush=True)
        if dev.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
