"""Decoding speed of a model in depnmt (torch) and in its CTranslate2 export, interleaved A/B.

Both translate the same raw lines end to end (tokenizer, BPE, decoding, detokenizer: the same
depnmt code around the two decoders), with the same search settings, the same batches (sorted by
length, ``size × longest × beam ≤ 4,000`` tokens) and the same number of threads. The rounds
alternate A B, B A, … so that a change in the machine's load hits both alike; reported are the
median sentences/s of each and how many output lines are identical.

    python bench/ct2.py -m work/model --ct2 work/model-ct2 -i work/prepare/test.raw.en \\
        --lines 200 --beam 4 --rounds 4 --threads 2
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import click
import torch

from depnmt.decoding.ct2translate import CT2Translator
from depnmt.decoding.translate import Translator


def timed(translator, lines: list[str]) -> tuple[float, list[str]]:
    start = time.perf_counter()
    out = list(translator.translate_lines(lines))
    return time.perf_counter() - start, out


@click.command()
@click.option("-m", "--model-dir", type=click.Path(path_type=Path), required=True)
@click.option("--ct2", "ct2_dir", type=click.Path(path_type=Path), required=True)
@click.option("-i", "--input", "input_path", type=click.Path(path_type=Path), required=True)
@click.option("--lines", type=int, default=200, help="first N lines of the input")
@click.option("--beam", type=int, default=4)
@click.option("--rounds", type=int, default=4)
@click.option("--threads", type=int, default=2, help="torch threads = CTranslate2 intra_threads")
@click.option("--at-limit", type=click.Choice(["eos", "cut"]), default="cut", show_default=True,
              help="depnmt's beam search at the length limit (CTranslate2 always cuts)")
@click.option("--precision", default="auto", show_default=True,
              help="depnmt's decoding precision (translate --precision)")
@click.option("--save", type=click.Path(path_type=Path, file_okay=False),
              help="write each system's last output here (depnmt.txt, ct2.txt)")
def main(model_dir: Path, ct2_dir: Path, input_path: Path, lines: int, beam: int, rounds: int,
         threads: int, at_limit: str, precision: str, save: Path | None) -> None:
    torch.set_num_threads(threads)
    text = input_path.read_text(encoding="utf-8").splitlines()[:lines]
    systems = {"depnmt (torch)": Translator.from_model_dir(model_dir, device="cpu",
                                                           precision=precision, beam=beam,
                                                           at_limit=at_limit),
               "CTranslate2": CT2Translator.from_dir(ct2_dir, threads=threads, beam=beam)}
    for translator in systems.values():               # warm-up (lazy loading, allocators)
        list(translator.translate_lines(text[:8]))
    speed: dict[str, list[float]] = {name: [] for name in systems}
    outputs: dict[str, list[str]] = {}
    names = list(systems)
    for r in range(rounds):
        for name in (names if r % 2 == 0 else names[::-1]):
            seconds, outputs[name] = timed(systems[name], text)
            speed[name].append(len(text) / seconds)
            print(f"round {r + 1} {name}: {speed[name][-1]:.2f} sentences/s", flush=True)
    same = sum(a == b for a, b in zip(*outputs.values()))
    if save:
        save.mkdir(parents=True, exist_ok=True)
        for name, file in zip(names, ("depnmt.txt", "ct2.txt")):
            (save / file).write_text("".join(f"{line}\n" for line in outputs[name]),
                                     encoding="utf-8")
    medians = {name: statistics.median(v) for name, v in speed.items()}
    print(f"\n{len(text)} lines, beam {beam}, {threads} threads, {rounds} rounds (interleaved), "
          f"depnmt --at-limit {at_limit}")
    print("| system | sentences/s (median) | rounds |\n|---|---:|---|")
    for name, v in speed.items():
        print(f"| {name} | {medians[name]:.2f} | {', '.join(f'{x:.2f}' for x in v)} |")
    print(f"CTranslate2 / depnmt: {medians['CTranslate2'] / medians['depnmt (torch)']:.2f}×; "
          f"identical output lines: {same}/{len(text)}")


if __name__ == "__main__":
    main()
