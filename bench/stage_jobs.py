"""How much faster are the data stages with ``--jobs N``? ``prepare``, ``bpe`` and ``parse``,
each run with ``--jobs 1`` and ``--jobs N`` alternately, on one corpus.

    python bench/stage_jobs.py --src train.en.gz --tgt train.de.gz --src-lang en --tgt-lang de \\
        --pairs 250000 --jobs 2 --rounds 2 --work /tmp/stage-jobs

The corpus: the first ``--pairs`` pairs of ``--src``/``--tgt`` (raw text, plain or .gz); when
they hold fewer, the rest is made by recombining real pairs (pair k joins two pairs drawn with a
fixed seed, source with source and target with target), so any size can be measured from a small
corpus. ``prepare`` holds out 1,000 dev and 1,000 test pairs (a tenth each of fewer than
10,000); ``bpe`` learns ``--merges`` joint
merges (learning takes one process whatever ``--jobs`` says); ``bpe-apply`` is ``bpe
--subwords-from`` a bpe folder of those merges made once beforehand (counting and segmenting,
nothing learned); ``parse`` runs the ``--parse``
flags (default: spaCy, the source side). Each round runs every stage with 1 job and with N,
in alternating order (round 1: 1 then N, round 2: N then 1, ...); ``bpe`` and ``parse`` read
the ``prepare`` folder of the first ``--jobs 1`` run (without ``prepare`` in ``--stages``, one
made first with ``--jobs N`` and not measured).

Per run: wall time, CPU time (user + system of the command and its worker processes, from
``getrusage(RUSAGE_CHILDREN)``) and the 1-minute load average before it. Every ``--jobs N``
output is compared with the ``--jobs 1`` output of the same stage, file by file (the manifests
without their date): a difference stops the script. Prints a markdown table with the median of
each, the speed-up (wall time of 1 job / of N jobs), the CPU flags that matter for the parsers'
kernels (avx2, avx512f, avx512_bf16, amx_bf16) and the cores this process may use. Pause other
work on the machine first; the load average is printed so that a busy machine shows.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")
STAGES = ("prepare", "bpe", "bpe-apply", "parse")


def read_text(path: Path) -> list[str]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", newline="\n") as fh:
        return [line.rstrip("\n") for line in fh]


def make_corpus(src: Path, tgt: Path, pairs: int, folder: Path) -> tuple[Path, Path]:
    """``folder/corpus.{src,tgt}``: ``pairs`` pairs, the real ones first, then recombined."""
    src_lines, tgt_lines = read_text(src), read_text(tgt)
    if len(src_lines) != len(tgt_lines):
        sys.exit(f"error: {src} has {len(src_lines)} lines but {tgt} has {len(tgt_lines)}")
    rng = random.Random(1)
    out_src, out_tgt = src_lines[:pairs], tgt_lines[:pairs]
    while len(out_src) < pairs:
        a, b = rng.randrange(len(src_lines)), rng.randrange(len(src_lines))
        out_src.append(f"{src_lines[a]} {src_lines[b]}")
        out_tgt.append(f"{tgt_lines[a]} {tgt_lines[b]}")
    folder.mkdir(parents=True, exist_ok=True)
    paths = folder / "corpus.src", folder / "corpus.tgt"
    for path, lines in zip(paths, (out_src, out_tgt)):
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return paths


def stage_args(stage: str, args: argparse.Namespace, corpus: tuple[Path, Path],
               prepared: Path) -> list[str]:
    """The ``depnmt STAGE`` arguments, without ``-o`` and ``--jobs``."""
    if stage == "prepare":
        held = str(min(1000, args.pairs // 10))
        return ["prepare", "--train-src", str(corpus[0]), "--train-tgt", str(corpus[1]),
                "--src-lang", args.src_lang, "--tgt-lang", args.tgt_lang,
                "--dev-size", held, "--test-size", held]
    if stage == "bpe":
        return ["bpe", "-i", str(prepared), "--merges", str(args.merges), "--joint"]
    if stage == "bpe-apply":
        return ["bpe", "-i", str(prepared), "--subwords-from", str(args.work / "bpe-codes")]
    return ["parse", "-i", str(prepared), *shlex.split(args.parse)]


def run_stage(argv: list[str], out: Path, jobs: int) -> dict:
    """Run ``depnmt ARGV -o OUT --jobs JOBS``; its wall and CPU seconds, the load before it."""
    shutil.rmtree(out, ignore_errors=True)
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "depnmt.cli", *argv, "-o", str(out),
                           "--jobs", str(jobs)], env={**os.environ, "DEPNMT_NO_PROGRESS": "1"},
                          capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        sys.exit(f"error: depnmt {' '.join(argv)} --jobs {jobs} failed:\n{proc.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall": wall, "cpu": cpu, "load": load}


def contents(folder: Path) -> dict[str, object]:
    """Every file's bytes; the manifest without its date."""
    found: dict[str, object] = {p.name: p.read_bytes() for p in sorted(folder.iterdir())}
    manifest = json.loads(found.pop("manifest.json"))  # type: ignore[arg-type]
    manifest.pop("created", None)
    return {**found, "manifest.json": manifest}


def measure(args: argparse.Namespace, corpus: tuple[Path, Path]) -> dict[str, dict[int, list]]:
    """``{stage: {jobs: [run, ...]}}`` over ``args.rounds`` alternating rounds."""
    work, prepared = args.work, args.work / "prepare-1"
    results: dict[str, dict[int, list]] = {s: {1: [], args.jobs: []} for s in args.stages}
    if "prepare" not in args.stages:            # made once, not measured
        run_stage(stage_args("prepare", args, corpus, prepared), prepared, args.jobs)
    if "bpe-apply" in args.stages:              # the codes it applies: made once, not measured
        if not prepared.exists():
            run_stage(stage_args("prepare", args, corpus, prepared), prepared, args.jobs)
        run_stage(stage_args("bpe", args, corpus, prepared), work / "bpe-codes", args.jobs)
    for r in range(args.rounds):
        for stage in args.stages:
            order = (1, args.jobs) if r % 2 == 0 else (args.jobs, 1)
            if stage != "prepare" and not prepared.exists():
                order = (1, args.jobs)          # the first prepare made the input
            argv = stage_args(stage, args, corpus, prepared)
            for jobs in order:
                out = work / f"{stage}-{jobs}"
                if stage == "prepare" and jobs == 1 and not prepared.exists():
                    out = prepared
                results[stage][jobs].append(run_stage(argv, out, jobs))
                print(f"round {r + 1} {stage} --jobs {jobs}: "
                      f"{results[stage][jobs][-1]['wall']:.1f} s", file=sys.stderr)
            one = prepared if stage == "prepare" else work / f"{stage}-1"
            if contents(one) != contents(work / f"{stage}-{args.jobs}"):
                sys.exit(f"error: {stage} --jobs {args.jobs} wrote other files than --jobs 1")
    return results


def machine() -> str:
    """CPU flags, usable cores and the load average, one line."""
    try:
        words = set(Path("/proc/cpuinfo").read_text().split())
    except OSError:
        words = set()
    flags = " ".join(f for f in FLAGS if f in words) or "none of " + ", ".join(FLAGS)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"CPU flags: {flags}; cores usable: {cores}; load average now: {load}"


def table(results: dict[str, dict[int, list]], jobs: int, pairs: int) -> str:
    rows = [f"{pairs} pairs; medians over {len(next(iter(results.values()))[1])} run(s) each",
            "", "| stage | jobs | wall s | CPU s | load before | speed-up |",
            "|---|---:|---:|---:|---:|---:|"]
    for stage, runs in results.items():
        walls = {j: statistics.median(r["wall"] for r in runs[j]) for j in runs}
        for j in runs:
            cpu = statistics.median(r["cpu"] for r in runs[j])
            load = statistics.median(r["load"] for r in runs[j])
            speedup = f"{walls[1] / walls[j]:.2f}×" if j != 1 else ""
            rows.append(f"| {stage} | {j} | {walls[j]:.1f} | {cpu:.1f} | {load:.2f} | "
                        f"{speedup} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--src", type=Path, required=True, help="raw source text (.gz or plain)")
    parser.add_argument("--tgt", type=Path, required=True, help="raw target text, line-aligned")
    parser.add_argument("--src-lang", default="en")
    parser.add_argument("--tgt-lang", default="de")
    parser.add_argument("--pairs", type=int, default=250000, help="corpus size (default 250000)")
    parser.add_argument("--jobs", type=int, default=2, help="N compared with 1 (default 2)")
    parser.add_argument("--rounds", type=int, default=1, help="rounds of every stage (default 1)")
    parser.add_argument("--stages", default=",".join(STAGES),
                        help="of prepare,bpe,bpe-apply,parse (default: all)")
    parser.add_argument("--merges", type=int, default=32000, help="bpe's merges (default 32000)")
    parser.add_argument("--parse", default="--backend spacy --side src",
                        help="parse's flags (default: '--backend spacy --side src')")
    parser.add_argument("--work", type=Path, default=Path("work/stage-jobs"),
                        help="scratch folder (default work/stage-jobs)")
    args = parser.parse_args(argv)
    args.stages = [s for s in args.stages.split(",") if s]
    if args.jobs < 2 or any(s not in STAGES for s in args.stages):
        parser.error(f"--jobs must be at least 2 and --stages a list of {', '.join(STAGES)}")
    shutil.rmtree(args.work / "prepare-1", ignore_errors=True)
    corpus = make_corpus(args.src, args.tgt, args.pairs, args.work)
    print(machine(), file=sys.stderr)
    results = measure(args, corpus)
    print(machine())
    print(table(results, args.jobs, args.pairs))


if __name__ == "__main__":
    main()
