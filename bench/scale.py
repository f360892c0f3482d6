"""Cost at scale: every data stage and ``train`` (up to its first updates) at several corpus
sizes, on a synthetic WMT-like corpus, with the cost per million pairs fitted over the sizes
and extrapolated to WMT16 En-De (4.5 M pairs) and ASPEC Ja-En (3.0 M).

The synthetic corpus (no download): the pairs of a small real corpus that has been prepared
and parsed (``--base-prepare``/``--base-parse``, e.g. Multi30k after ``depnmt prepare`` and
``depnmt parse --side src``) recombined, each synthetic line 1–3 real pairs (0.3/0.4/0.3:
twice a caption, ~25 words a side, near WMT16's ~22 words and ~27 subwords a line), and a
long tail of word forms: each alphabetic token becomes a rare form (the word with a
Zipf-distributed number, s = 1.1) with probability 0.03, so the vocabulary keeps growing with N
as a real corpus's does. The source trees are the real trees of the recombined sentences,
joined as ``depnmt parse`` joins a line of several sentences (the first root stays the root,
the others attach to it as ``parataxis``, ``SentIdx`` numbers the sentences). Sentence
lengths, tree shapes and labels are therefore real; what is synthetic is which sentences
share a line and the rare forms. That is realistic enough for time and memory, which
depend on lengths, counts and vocabulary sizes, not on meaning.

Per size N (a folder WORK/N): the corpus is written, then timed, each a separate process
under ``/usr/bin/time`` (wall, CPU = user + system of the process and its children, peak
RSS of the largest process): ``prepare`` (tokenizer keep: the text is already tokenized;
``--moses`` also times a Moses-tokenizing prepare), ``parse --backend conllu`` (importing
the trees), optionally ``parse --backend spacy`` (``--spacy-max``: only up to that N),
``bpe --merges 32000 --joint``, the training-data cache build (:mod:`depnmt.data.cache`,
all cores) and, for each scheme, ``train`` (1+1 layers, d_model 64, ``--max-steps 3``) from its
start to its first update, read from ``metrics.jsonl`` (``--log-every 1``), with its peak
RSS. Results: ``WORK/scale.jsonl`` (one record a measurement) and a markdown table.

    python bench/scale.py --work /tmp/scale --base-prepare P --base-parse T \\
        --sizes 50000,250000,1000000 --jobs 2
    python bench/scale.py --work /tmp/scale --table       # the table of what is measured

``--stages`` times some stages only (the others still run, untimed, where a timed one needs
their output); a stage run with ``--jobs N`` > 1 is recorded as, e.g., ``bpe --jobs 2``, so
that one folder can hold both. A row is measured once per size: delete its records from
``scale.jsonl`` to measure it again.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np

SCHEMES = ("abs", "abs+dep+rel", "abs+gps", "abs+dbsa-enc")
STAGES = ("prepare", "parse", "bpe", "cache", "train")
TARGETS = {"WMT16 En-De": 4.5e6, "ASPEC Ja-En": 3.0e6}
RARE, ZIPF = 0.03, 1.1
MODEL = ["--layers", "1", "--d-model", "64", "--heads", "2", "--d-ff", "128",
         "--max-tokens", "4096", "--warmup", "10"]


# -- the synthetic corpus ----------------------------------------------------------------------

def read_base(prepare: Path, parse: Path, src: str, tgt: str):
    from depnmt.core.conllu import read_conllu
    from depnmt.core.textio import read_lines
    return (read_lines(prepare / f"train.{src}"), read_lines(prepare / f"train.{tgt}"),
            list(read_conllu(parse / f"train.{src}.conllu")))


def rare(token: str, rng: random.Random, zipf: np.ndarray, k: int) -> str:
    return f"{token}{zipf[k]}" if token.isalpha() and rng.random() < RARE else token


def conllu_block(trees, forms: list[str]) -> str:
    """The trees of one synthetic line joined as one tree (module docstring)."""
    rows, offset, root = [], 0, 0
    for k, tree in enumerate(trees):
        for i, (head, rel) in enumerate(zip(tree.heads, tree.deprels)):
            if head == 0 and k == 0:
                root, h = offset + i + 1, 0
            elif head == 0:
                h, rel = root, "parataxis"
            else:
                h = head + offset
            upos = tree.upos[i] if tree.upos else "_"
            rows.append(f"{offset + i + 1}\t{forms[offset + i]}\t_\t{upos}\t_\t_\t{h}\t{rel}\t_\t"
                        f"SentIdx={k}")
        offset += len(tree.words)
    return f"# text = {' '.join(forms)}\n" + "\n".join(rows) + "\n\n"


def synthesize(base, n: int, out: Path, seed: int = 1) -> None:
    """``n`` synthetic training pairs (module docstring) into ``out/train.*`` (text, trees)."""
    src_lines, tgt_lines, trees = base
    rng = random.Random(seed)
    zipf = np.random.default_rng(seed).zipf(ZIPF, size=4 * n + 16) % 10_000_000
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "train.src", "w") as fs, open(out / "train.tgt", "w") as ft, \
            open(out / "train.src.conllu", "w") as fc:
        for j in range(n):
            picks = [rng.randrange(len(src_lines)) for _ in range(rng.choices((1, 2, 3),
                                                                              (3, 4, 3))[0])]
            src = [rare(t, rng, zipf, 2 * j) for p in picks for t in src_lines[p].split()]
            tgt = [rare(t, rng, zipf, 2 * j + 1) for p in picks for t in tgt_lines[p].split()]
            fs.write(" ".join(src) + "\n")
            ft.write(" ".join(tgt) + "\n")
            fc.write(conllu_block([trees[p] for p in picks], src))


# -- measuring ----------------------------------------------------------------------------------

def timed(cmd: list[str], log: Path, env: dict | None = None) -> dict:
    """Run ``cmd`` under /usr/bin/time: wall and CPU seconds, peak RSS (MB)."""
    stats = log.with_suffix(".time")
    full = ["/usr/bin/time", "-o", str(stats), "-f", "%e %U %S %M", *cmd]
    with open(log, "w") as fh:
        rc = subprocess.run(full, stdout=fh, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})}).returncode
    if rc:
        raise click.ClickException(f"{' '.join(cmd)} failed ({rc}): see {log}")
    wall, user, sys_, rss = stats.read_text().split()[-4:]
    return {"wall_s": float(wall), "cpu_s": float(user) + float(sys_),
            "peak_rss_mb": round(int(rss) / 1024, 1)}


def first_update(cmd: list[str], log: Path, metrics: Path) -> dict:
    """``train`` timed, with the seconds from its launch to its first logged update."""
    started = time.monotonic()
    proc = subprocess.Popen(["/usr/bin/time", "-o", str(log.with_suffix(".time")), "-f",
                             "%e %U %S %M", *cmd], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT)
    first = None
    while proc.poll() is None:
        if first is None and metrics.exists() and '"event": "train"' in metrics.read_text():
            first = time.monotonic() - started
        time.sleep(0.05)
    if proc.returncode:
        raise click.ClickException(f"{' '.join(cmd)} failed: see {log}")
    if first is None:
        first = time.monotonic() - started
    wall, user, sys_, rss = log.with_suffix(".time").read_text().split()[-4:]
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    waits = [r.get("batch_wait_share") for r in records if r.get("event") == "train"]
    return {"first_update_s": round(first, 2), "wall_s": float(wall),
            "cpu_s": float(user) + float(sys_), "peak_rss_mb": round(int(rss) / 1024, 1),
            "batch_wait_share": waits}


def machine() -> dict:
    flags = set()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    return {"cpu_flags": sorted(flags & {"avx2", "avx512f", "avx512_bf16", "amx_bf16"}),
            "cores": len(os.sched_getaffinity(0)), "load": os.getloadavg()[0]}


def record(work: Path, **fields) -> None:
    fields.update(machine())
    with open(work / "scale.jsonl", "a") as fh:
        fh.write(json.dumps(fields) + "\n")
    click.echo(json.dumps(fields))


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "depnmt.cli", *map(str, args)]


def measure_size(n: int, work: Path, base, base_dirs, langs, opts) -> None:
    src, tgt = langs
    folder = work / str(n)
    raw = folder / "raw"
    if not (raw / "train.src.conllu").exists():
        t = time.monotonic()
        synthesize(base, n, raw)
        record(work, n=n, what="synthesize", wall_s=round(time.monotonic() - t, 1))
    base_prepare, base_parse = base_dirs
    for split in ("dev", "test"):                 # real dev/test, with their trees
        (raw / f"{split}.{src}.conllu").write_bytes((base_parse / f"{split}.{src}.conllu"
                                                     ).read_bytes())
    prepare = ["prepare", "--train-src", raw / "train.src", "--train-tgt", raw / "train.tgt",
               "--dev-src", base_prepare / f"dev.{src}", "--dev-tgt", base_prepare / f"dev.{tgt}",
               "--test-src", base_prepare / f"test.{src}",
               "--test-tgt", base_prepare / f"test.{tgt}", "--src-lang", src, "--tgt-lang", tgt,
               "--min-len", "0"]
    jobs = ["--jobs", str(opts["jobs"])] if opts["stage_jobs"] else []
    suffix = f" --jobs {opts['jobs']}" if jobs and opts["jobs"] > 1 else ""

    def stage(key: str, what: str, cmd: list, out: Path) -> None:
        """Time ``cmd`` if ``key`` is among ``--stages``; else run it untimed if ``out``
        (its output folder) is missing."""
        if key in opts["stages"]:
            run_stage(work, n, what, cmd, folder)
        elif not (out / "manifest.json").exists():
            timed([str(c) for c in cmd], folder / f"untimed-{key}.log")

    stage("prepare", "prepare (keep)" + suffix,
          cli(*prepare, "--tokenizer-src", "keep", "--tokenizer-tgt", "keep", *jobs,
              "-o", folder / "prepare"), folder / "prepare")
    if opts["moses"] and "prepare" in opts["stages"]:
        run_stage(work, n, "prepare (moses)" + suffix, cli(*prepare, *jobs, "-o",
                                                           folder / "prepare-moses"), folder)
    trees = folder / "trees-in"
    trees.mkdir(exist_ok=True)
    for split in ("train", "dev", "test"):
        name = f"{split}.{src}.conllu"
        (trees / name).unlink(missing_ok=True)
        os.link(raw / ("train.src.conllu" if split == "train" else name), trees / name)
    if "train" in opts["stages"] or "cache" in opts["stages"] or "parse" in opts["stages"]:
        stage("parse", "parse (conllu)", cli("parse", "-i", folder / "prepare", "-o",
                                             folder / "parse", "--side", "src", "--backend",
                                             "conllu", "--conllu-dir", trees), folder / "parse")
    if n <= opts["spacy_max"] and "parse" in opts["stages"]:
        run_stage(work, n, "parse (spacy)" + suffix,
                  cli("parse", "-i", folder / "prepare", "-o", folder / "parse-spacy",
                      "--side", "src", "--backend", "spacy", *jobs), folder)
    stage("bpe", "bpe" + suffix, cli("bpe", "-i", folder / "prepare", "-o", folder / "bpe",
                                     "--merges", "32000", "--joint", *jobs), folder / "bpe")
    if "cache" in opts["stages"]:
        run_stage(work, n, "cache build", [sys.executable, __file__, "build-cache", "--bpe",
                                           folder / "bpe", "--trees", folder / "parse"], folder)
    if "train" not in opts["stages"]:
        return
    for scheme in opts["schemes"]:
        model = folder / "models" / scheme
        if (model / "checkpoints" / "last.pt").exists():
            continue
        cmd = cli("train", "-i", folder / "bpe", "-t", folder / "parse", "-o", model,
                  "--scheme", scheme, *MODEL, *scheme_flags(scheme), "--max-steps", "3",
                  "--log-every", "1",
                  "--valid-max-sentences", "10", "--device", "cpu",
                  *(["--workers", str(opts["workers"])] if opts["workers"] >= 0 else []))
        model.parent.mkdir(parents=True, exist_ok=True)
        result = first_update(cmd, folder / f"train-{scheme}.log", model / "metrics.jsonl")
        record(work, n=n, what=f"train {scheme}", **result)


def scheme_flags(scheme: str) -> list[str]:
    """DBSA's parse head sits in a layer the 1-layer model has."""
    return ["--dbsa-enc-layer", "1"] if "dbsa-enc" in scheme else []


def run_stage(work: Path, n: int, what: str, cmd: list, folder: Path) -> None:
    log = folder / f"{what.split()[0]}-{what.replace(' ', '_').strip('()')}.log"
    done = [json.loads(line) for line in (work / "scale.jsonl").read_text().splitlines()] \
        if (work / "scale.jsonl").exists() else []
    if any(r.get("n") == n and r.get("what") == what for r in done):
        return
    record(work, n=n, what=what, **timed([str(c) for c in cmd], log))


def measure_wait(n: int, work: Path, schemes: list[str], steps: int, workers: int) -> None:
    """The loop's wait for batches (``batch_wait_share`` of the records after the first,
    which includes starting the workers) over ``steps`` updates at size ``n``: one process,
    and two under a gloo ``torchrun`` (each with ``workers`` workers)."""
    folder = work / str(n)
    for scheme in schemes:
        for procs in (1, 2):
            model = folder / "wait" / f"{scheme}-{procs}p"
            if model.exists():
                continue
            train = ["train", "-i", folder / "bpe", "-t", folder / "parse", "-o", model,
                     "--scheme", scheme, *MODEL, *scheme_flags(scheme), "--max-steps", steps,
                     "--log-every", "10",
                     "--valid-every", "0", "--valid-max-sentences", "10", "--device", "cpu",
                     "--workers", workers]
            launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2",
                      "--master_addr", "127.0.0.1", "--master_port", "29533", "-m",
                      "depnmt.cli"] if procs == 2 else [sys.executable, "-m", "depnmt.cli"]
            env = {"OMP_NUM_THREADS": "1"} if procs == 2 else {}
            timed([*launch, *map(str, train)], folder / f"wait-{scheme}-{procs}p.log", env)
            shares = [r["batch_wait_share"] for r in map(json.loads, (model / "metrics.jsonl")
                                                          .read_text().splitlines())
                      if r["event"] == "train"]
            record(work, n=n, what=f"wait {scheme} {procs}p", workers=workers, steps=steps,
                   batch_wait_share=shares, steady_wait_share=max(shares[1:], default=None))


# -- the table ---------------------------------------------------------------------------------

def fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least-squares ``value = a + b·N``: returns (a, b per million pairs)."""
    xs = np.array([p[0] for p in points], float)
    ys = np.array([p[1] for p in points], float)
    if len(xs) < 2:
        return float("nan"), float("nan")
    b, a = np.polyfit(xs, ys, 1)
    return float(a), float(b) * 1e6


def table(work: Path) -> str:
    rows = [json.loads(line) for line in (work / "scale.jsonl").read_text().splitlines()]
    waits = [r for r in rows if r["what"].startswith("wait ")]
    rows = [r for r in rows if r["what"] != "synthesize" and r not in waits]
    sizes = sorted({r["n"] for r in rows})
    whats = list(dict.fromkeys(r["what"] for r in rows))
    head = " | ".join(f"{n:,}" for n in sizes)
    lines = [f"| what | measure | {head} | per 1 M pairs (fit) | " +
             " | ".join(TARGETS) + " |",
             "|---|---|" + "---|" * len(sizes) + "---|" + "---|" * len(TARGETS)]
    for what in whats:
        for key, unit in (("wall_s", "wall s"), ("cpu_s", "CPU s"), ("first_update_s",
                                                                     "s to 1st update"),
                          ("peak_rss_mb", "peak RSS MB")):
            points = [(r["n"], r[key]) for r in rows if r["what"] == what and key in r
                      and not (key in ("wall_s", "cpu_s") and "first_update_s" in r)]
            if not points:
                continue
            by_n = dict(points)
            a, b = fit(points)
            cells = " | ".join(f"{by_n[n]:,.1f}" if n in by_n else "" for n in sizes)
            extra = " | ".join("" if b != b else f"{a + b * t / 1e6:,.0f}"
                               for t in TARGETS.values())
            slope = "" if b != b else f"{b:,.1f}"
            lines.append(f"| {what} | {unit} | {cells} | {slope} | {extra} |")
    loads = sorted(r["load"] for r in rows)
    flags = rows[0]["cpu_flags"] if rows else []
    if waits:
        lines += ["", "| the loop's wait for batches | pairs | workers a process | updates | "
                  "share of the time, steady (max after the first record) |",
                  "|---|---|---|---|---|"]
        lines += [f"| {r['what'][5:]} | {r['n']:,} | {r['workers']} | {r['steps']} | "
                  f"{100 * r['steady_wait_share']:.1f} % |" for r in waits]
    lines.append(f"\n{rows[0]['cores'] if rows else '?'} cores, CPU flags {' '.join(flags)}, "
                 f"load average {loads[0]:.2f}–{loads[-1]:.2f} during the runs.")
    return "\n".join(lines)


@click.group(invoke_without_command=True)
@click.option("--work", type=click.Path(path_type=Path), required=False)
@click.option("--base-prepare", type=click.Path(path_type=Path, exists=True))
@click.option("--base-parse", type=click.Path(path_type=Path, exists=True))
@click.option("--sizes", default="50000,250000,1000000")
@click.option("--schemes", default=",".join(SCHEMES))
@click.option("--stages", default=",".join(STAGES),
              help=f"the stages to time, of {','.join(STAGES)} (default: all)")
@click.option("--jobs", type=int, default=len(os.sched_getaffinity(0)))
@click.option("--stage-jobs/--no-stage-jobs", default=True,
              help="pass --jobs to prepare, parse and bpe")
@click.option("--workers", type=int, default=-1, help="train --workers (-1: its default)")
@click.option("--spacy-max", type=int, default=50000)
@click.option("--moses/--no-moses", default=False)
@click.option("--wait-steps", type=int, default=0,
              help="also measure the loop's wait for batches over this many updates at the "
                   "largest size, in one process and under a 2-process torchrun")
@click.option("--table", "show_table", is_flag=True)
@click.pass_context
def main(ctx, work, base_prepare, base_parse, sizes, schemes, stages, jobs, stage_jobs,
         workers, spacy_max, moses, wait_steps, show_table):
    if ctx.invoked_subcommand:
        return
    work.mkdir(parents=True, exist_ok=True)
    if show_table:
        click.echo(table(work))
        return
    unknown = set(stages.split(",")) - set(STAGES)
    if unknown:
        raise click.BadParameter(f"{', '.join(sorted(unknown))}: not one of {', '.join(STAGES)}",
                                 param_hint="--stages")
    manifest = json.loads((base_prepare / "manifest.json").read_text())
    langs = (manifest["src_lang"], manifest["tgt_lang"])
    base = read_base(base_prepare, base_parse, *langs)
    opts = {"jobs": jobs, "stage_jobs": stage_jobs, "workers": workers, "spacy_max": spacy_max,
            "moses": moses, "schemes": schemes.split(","), "stages": stages.split(",")}
    ns = [int(s) for s in sizes.split(",")]
    for n in ns:
        measure_size(n, work, base, (base_prepare, base_parse), langs, opts)
    if wait_steps:
        measure_wait(max(ns), work, [s for s in opts["schemes"] if s != "abs"], wait_steps,
                     max(workers, 1))
    click.echo(table(work))


@main.command("build-cache")
@click.option("--bpe", type=click.Path(path_type=Path), required=True)
@click.option("--trees", type=click.Path(path_type=Path), required=True)
def build_cache(bpe, trees):
    """Build the training-data cache of a bpe folder (text of both sides, source trees)."""
    from depnmt.core.vocab import Vocab
    from depnmt.data.cache import open_corpus
    m = json.loads((bpe / "manifest.json").read_text())
    langs = {"src": m["src_lang"], "tgt": m["tgt_lang"]}
    vocabs = {side: Vocab.load(bpe / f"vocab.{side}.txt") for side in langs}
    open_corpus(bpe, "train", langs, vocabs, {"src": trees / f"train.{langs['src']}.conllu"},
                None)


if __name__ == "__main__":
    main()
