"""Where a training step's time goes: phases timed with device events, and the device's
kernel time by kind, for the systems of ``bench/schemes.py`` on the same batches.

For each system (Transformer-base by default, bf16 autocast, the speed section's batches of
``bench/gpu_check.py``): the median over ``--steps`` steps of the forward pass, the loss, the
backward pass and the optimizer step (CUDA events, or wall clock on the CPU) and the whole
step; then one profiled step (``torch.profiler``) whose device kernels are summed by kind
(matrix multiplies, attention kernels, casts and copies, layer norm, softmax, dropout,
reductions, the optimizer, other element-wise work) with the share of the step's wall time the
device was busy, and the longest kernels.

    python bench/profile_train.py --device cuda                  # abs and abs+rel, base size
    python bench/profile_train.py --device cuda --schemes abs,dep+rel,gps --top 15
    python bench/profile_train.py --device cpu --tiny            # a small model on the CPU
"""

from __future__ import annotations

import re
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

import click  # noqa: E402
import schemes as bench  # noqa: E402
import torch  # noqa: E402

from depnmt.core.device import autocast, resolve_device  # noqa: E402
from depnmt.model.transformer import label_smoothed_nll  # noqa: E402

# kernel kinds by a pattern of the kernel's name (first match wins)
KINDS = (("attention", r"flash|fmha|sdpa|attention"),
         ("matmul", r"gemm|cutlass|xmma|nvjet|cublas|sm90_|sm80_|matmul|addmm|\bmm\b|bmm"),
         ("optimizer", r"adam|multi_tensor"),
         ("layer norm", r"layer_norm|layernorm"),
         ("softmax", r"softmax"),
         ("dropout", r"dropout|bernoulli"),
         ("cast/copy", r"copy|convert|_to_copy|cat_|CatArray"),
         ("reduction", r"reduce"),
         ("gather/scatter", r"gather|scatter|index"),
         ("element-wise", r"elementwise|vectorized|unrolled"))
PHASES = ("forward", "loss", "backward", "optimizer")


def kind_of(name: str) -> str:
    return next((kind for kind, pattern in KINDS if re.search(pattern, name, re.I)), "other")


class Clock:
    """Marks between the phases of a step: CUDA events on a GPU, wall clock on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.marks: list = []

    def mark(self) -> None:
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


def phased_step(run: bench.Run, batch, clock: Clock) -> None:
    """One training step as ``bench/schemes.py``'s ``train_step``, with a mark between phases."""
    clock.mark()
    with autocast(batch.src.device, run.dtype):
        logits, extras = run.model(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)
    clock.mark()
    loss, _ = label_smoothed_nll(logits, batch.tgt_out, 0.1)
    for aux in extras.losses.values():
        loss = loss + aux.weight * aux.value * batch.n_tokens
    clock.mark()
    (loss / batch.n_tokens).backward()
    clock.mark()
    run.optimizer.step()
    run.optimizer.zero_grad(set_to_none=True)
    clock.mark()


def phase_times(run: bench.Run, steps: int) -> dict[str, float]:
    """Median seconds of each phase and of the step over ``steps`` steps (after one)."""
    batch = run.batches[0]
    bench.train_step(run.model, run.optimizer, batch, run.dtype)
    times: dict[str, list[float]] = defaultdict(list)
    for _ in range(steps):
        clock = Clock(batch.src.device)
        phased_step(run, batch, clock)
        parts = clock.seconds()
        for phase, seconds in zip(PHASES, parts):
            times[phase].append(seconds)
        times["step"].append(sum(parts))
    return {phase: statistics.median(values) for phase, values in times.items()}


def kernel_times(run: bench.Run) -> tuple[dict[str, float], list[tuple[str, float]], float]:
    """Device seconds by kind and by kernel over one profiled step, and its wall seconds."""
    from torch.profiler import ProfilerActivity, profile
    batch = run.batches[0]
    cuda = batch.src.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    bench.sync(batch.src.device)
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        bench.train_step(run.model, run.optimizer, batch, run.dtype)
        bench.sync(batch.src.device)
        wall = time.perf_counter() - start
    by_kind: dict[str, float] = defaultdict(float)
    by_kernel: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        if cuda:
            seconds = getattr(event, "self_device_time_total",
                              getattr(event, "self_cuda_time_total", 0)) / 1e6
            if not seconds or event.key.startswith(("aten::", "autograd::", "Optimizer.")):
                continue
        else:       # the CPU: top-level aten ops' own time
            if not event.key.startswith("aten::"):
                continue
            seconds = event.self_cpu_time_total / 1e6
        by_kind[kind_of(event.key)] += seconds
        by_kernel[event.key] += seconds
    top = sorted(by_kernel.items(), key=lambda kv: -kv[1])
    return dict(by_kind), top, wall


def report(name: str, phases: dict[str, float], kinds: dict[str, float],
           top: list[tuple[str, float]], wall: float, tokens: int, n_top: int) -> str:
    busy = sum(kinds.values())
    lines = [f"### {name}: {tokens / phases['step']:,.0f} target tokens/s, step "
             f"{phases['step'] * 1e3:.1f} ms", "",
             "| phase | ms |", "|---|---:|"]
    lines += [f"| {phase} | {phases[phase] * 1e3:.1f} |" for phase in PHASES]
    lines += ["", f"Profiled step: {wall * 1e3:.1f} ms wall, kernels {busy * 1e3:.1f} ms "
              f"(device busy {busy / wall:.0%} of the step)", "",
              "| kind | ms | share of kernel time |", "|---|---:|---:|"]
    lines += [f"| {kind} | {seconds * 1e3:.2f} | {seconds / busy:.1%} |"
              for kind, seconds in sorted(kinds.items(), key=lambda kv: -kv[1])]
    lines += ["", "| longest kernels | ms |", "|---|---:|"]
    lines += [f"| `{key[:110]}` | {seconds * 1e3:.2f} |" for key, seconds in top[:n_top]]
    return "\n".join(lines) + "\n"


@click.command(context_settings={"show_default": True, "help_option_names": ["-h", "--help"]})
@click.option("--device", default="auto", help="cuda, cuda:N, cpu or auto")
@click.option("--schemes", default="abs,rel", help="systems of bench/schemes.py, comma-separated")
@click.option("--precision", default="bf16", help="fp32, bf16 or fp16 (autocast)")
@click.option("--steps", type=click.IntRange(min=1), default=10, help="timed steps per system")
@click.option("--top", type=click.IntRange(min=0), default=10, help="longest kernels listed")
@click.option("--batch-size", type=click.IntRange(min=1), default=250,
              help="sentences per batch (of 100 + 100 tokens at base size)")
@click.option("--tiny", is_flag=True, help="a 2+2-layer d_model 32 model and 16 sentences")
def main(device: str, schemes: str, precision: str, steps: int, top: int, batch_size: int,
         tiny: bool) -> None:
    """Profile one training step of each system (see the module docstring)."""
    dev = resolve_device(device)
    if tiny:
        setup = bench.Setup(dev, 32, 4, 64, 2, 1000, 16, 16, 16, 1, 2)
    else:
        setup = bench.Setup(dev, 512, 8, 2048, 6, 32000, 100, 100, batch_size, 1, 2)
    print(f"<!-- {dev}, torch {torch.__version__}"
          + (f", {torch.cuda.get_device_name(dev)}" if dev.type == "cuda" else "") + " -->")
    for name in (n.strip() for n in schemes.split(",")):
        run = bench.new_run(setup, name, precision)
        phases = phase_times(run, steps)
        kinds, kernels, wall = kernel_times(run)
        print(report(name, phases, kinds, kernels, wall, run.batches[0].n_tokens, top))
        del run
        if dev.type == "cuda":
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
