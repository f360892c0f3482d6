"""How long does learning BPE merges take: subword-nmt's ``learn_bpe`` against depnmt's port
(:mod:`depnmt.stages.bpelearn`), on the token counts ``depnmt bpe --joint`` learns from.

    python bench/bpe_learn.py --text work/prepare/train.en --text work/prepare/train.de \\
        --merges 32000 --rounds 2

The counts: every token of the ``--text`` files (tokenized, as ``prepare`` writes them),
escaped and filtered as ``depnmt bpe`` does (:func:`depnmt.stages.bpe.count_tokens`,
:func:`depnmt.stages.bpe.learn_codes`). Each round learns with both, in alternating order (round 1:
subword-nmt first, round 2: depnmt first, ...), each in this one process (wall and CPU time of
the call), and checks that the two codes are identical (a difference stops the script). Prints
a markdown table with the median of each and the speed-up, and one JSON line with the CPU flags,
the cores and the load average before each call. Pause other work on the machine first.
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import machine  # noqa: E402  (bench/scale.py: CPU flags, cores, load)

from depnmt.stages import bpelearn
from depnmt.stages.bpe import count_tokens  # noqa: E402


def subword_nmt(counts: dict[str, int], merges: int) -> str:
    from subword_nmt import learn_bpe
    learn_bpe.tqdm = lambda iterable, *a, **k: iterable
    out = io.StringIO()
    learn_bpe.learn_bpe([f"{tok} {n}" for tok, n in counts.items()], out, merges,
                        min_frequency=2, is_dict=True)
    return out.getvalue()


def depnmt_port(counts: dict[str, int], merges: int) -> str:
    return bpelearn.codes_text(bpelearn.learn_merges(counts, merges, 2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", type=Path, action="append", required=True)
    parser.add_argument("--merges", type=int, default=32000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    counts: Counter = Counter()
    for path in args.text:
        counts += count_tokens(path)
    usable = {tok: n for tok, n in counts.items() if "\r" not in tok}
    learners = {"subword-nmt": subword_nmt, "depnmt": depnmt_port}
    times: dict[str, list[tuple[float, float, float]]] = {name: [] for name in learners}
    codes: dict[str, str] = {}
    for r in range(args.rounds):
        for name in (list(learners) if r % 2 == 0 else list(reversed(learners))):
            load = machine()["load"]
            wall, cpu = time.perf_counter(), time.process_time()
            text = learners[name](usable, args.merges)
            times[name].append((time.perf_counter() - wall, time.process_time() - cpu, load))
            if codes.setdefault(name, text) != text or len(set(codes.values())) > 1:
                sys.exit(f"error: the codes differ ({name}, round {r + 1})")
    wall = {name: statistics.median(t[0] for t in ts) for name, ts in times.items()}
    cpu = {name: statistics.median(t[1] for t in ts) for name, ts in times.items()}
    print(f"{len(usable):,} token types, {sum(usable.values()):,} tokens, {args.merges} merges, "
          f"{args.rounds} rounds (identical codes)\n")
    print("| learner | wall s (median) | CPU s | speed-up |\n|---|---:|---:|---:|")
    for name in learners:
        print(f"| {name} | {wall[name]:.1f} | {cpu[name]:.1f} | "
              f"{wall['subword-nmt'] / wall[name]:.2f}× |")
    print(json.dumps({"types": len(usable), "tokens": sum(usable.values()),
                      "merges": args.merges, "times": times, **machine()}))


if __name__ == "__main__":
    main()
