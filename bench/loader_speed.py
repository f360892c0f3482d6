"""Training speed through depnmt's own data path: ``depnmt train`` itself (the binary data
cache, the data-loader workers that collate batches and compute tree features, pinned copies
to the device), on a synthetic corpus made from a small parsed one, for a few schemes.

What ``bench/gpu_check.py``'s ``loader`` section runs (it turns the measurements into MFU and
checks), and a script of its own::

    python bench/loader_speed.py --base BASE --work /tmp/loader --device cuda \\
        --schemes abs,abs+dep+rel,abs+gps --steps 60

``BASE`` holds ``prepare/`` and ``parse/`` folders of a small real corpus (``gpu_check``: its
shipped En→Ja data, unpacked). The corpus: ``--pairs`` synthetic pairs made as
``bench/scale.py`` makes them (1–3 real pairs a line, a long tail of rare word forms, the
real source trees joined), the base's dev and test sets, then ``prepare`` (the ``keep``
tokenizers: the base is tokenized), ``parse --backend conllu`` (the synthetic trees),
``bpe --merges MERGES --joint`` — each with ``--jobs auto``. Each scheme then trains for
``--steps`` updates (validation only at the end, 10 dev sentences) and its ``metrics.jsonl``
gives, over the records after the first (which include start-up and the first kernels):
source and target tokens/s and the share of the loop's time spent waiting for a batch
(``batch_wait_share``). While a scheme trains on CUDA, the GPU's busy fraction is sampled
every 0.1 s (NVML's "utilization": the share of the sample period in which a kernel ran) from
``nvidia-smi``; where it is missing the value is None.

Also the moments of the training sentences' subword lengths (mean S, T; mean S², T², S·T),
which an exact FLOP count of variable-length batches needs.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import click

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]

SCHEMES = ("abs", "abs+dep+rel", "abs+gps")
SRC, TGT = "en", "ja"


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "depnmt.cli", *map(str, args)]


def run(cmd: list, log: Path, timeout: float | None = None) -> None:
    """Run ``cmd`` (output to ``log``); a failure, or a run past ``timeout`` seconds (killed),
    raises with the log's last lines."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    with open(log, "w") as fh:                  # this checkout's depnmt, installed or not
        try:
            done = subprocess.run([str(c) for c in cmd], stdout=fh, stderr=subprocess.STDOUT,
                                  env={**os.environ, "DEPNMT_NO_PROGRESS": "1",
                                       "PYTHONPATH": path}, timeout=timeout)
            failed = f"failed ({done.returncode})" if done.returncode else None
        except subprocess.TimeoutExpired:
            failed = f"did not finish in {timeout:g} s (killed)"
    if failed:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-5:])
        raise RuntimeError(f"{' '.join(map(str, cmd[2:]))} {failed}:\n{tail}")


def make_corpus(base: Path, work: Path, pairs: int, merges: int) -> Path:
    """``work/{prepare,parse,bpe}`` of ``pairs`` synthetic pairs (module docstring); returns
    ``work``. Made once: a finished ``work/bpe`` is kept."""
    import scale
    if (work / "bpe" / "manifest.json").exists():
        return work
    raw = work / "raw"
    shutil.rmtree(raw, ignore_errors=True)
    scale.synthesize(scale.read_base(base / "prepare", base / "parse", SRC, TGT), pairs, raw)
    trees = work / "trees-in"
    trees.mkdir(parents=True, exist_ok=True)
    for split in ("train", "dev", "test"):
        name = f"{split}.{SRC}.conllu"
        shutil.copyfile(raw / "train.src.conllu" if split == "train" else base / "parse" / name,
                        trees / name)
    prepare = [a for split in ("dev", "test") for side, lang in (("src", SRC), ("tgt", TGT))
               for a in (f"--{split}-{side}", base / "prepare" / f"{split}.{lang}")]
    for stage in ("prepare", "parse", "bpe"):
        shutil.rmtree(work / stage, ignore_errors=True)
    run(cli("prepare", "--train-src", raw / "train.src", "--train-tgt", raw / "train.tgt",
            *prepare, "--src-lang", SRC, "--tgt-lang", TGT, "--tokenizer-src", "keep",
            "--tokenizer-tgt", "keep", "--min-len", "0", "--jobs", "auto",
            "-o", work / "prepare"), work / "prepare.log")
    run(cli("parse", "-i", work / "prepare", "-o", work / "parse", "--side", "src",
            "--backend", "conllu", "--conllu-dir", trees), work / "parse.log")
    run(cli("bpe", "-i", work / "prepare", "-o", work / "bpe", "--merges", merges, "--joint",
            "--jobs", "auto"), work / "bpe.log")
    return work


def length_moments(bpe: Path) -> dict:
    """Means over the training pairs of S, T, S², T² and S·T (subwords a side) and the
    vocabulary size of ``bpe``'s folder."""
    n = s1 = t1 = s2 = t2 = st = 0
    with open(bpe / f"train.{SRC}", encoding="utf-8") as fs, \
            open(bpe / f"train.{TGT}", encoding="utf-8") as ft:
        for src, tgt in zip(fs, ft):
            s, t = len(src.split()), len(tgt.split()) + 1      # + </s>, which is predicted
            n, s1, t1, s2, t2, st = n + 1, s1 + s, t1 + t, s2 + s * s, t2 + t * t, st + s * t
    with open(bpe / "vocab.tgt.txt", encoding="utf-8") as fh:
        vocab = sum(1 for _ in fh)
    return {"pairs": n, "S": s1 / n, "T": t1 / n, "S2": s2 / n, "T2": t2 / n, "ST": st / n,
            "vocab": vocab}


@contextmanager
def busy_samples(device: str) -> Iterator[list[float]]:
    """The GPU's utilization (0–1) sampled every 0.1 s by ``nvidia-smi`` while the block runs;
    empty on the CPU or without ``nvidia-smi``."""
    samples: list[float] = []
    if not device.startswith("cuda") or shutil.which("nvidia-smi") is None:
        yield samples
        return
    index = device.partition(":")[2] or os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    proc = subprocess.Popen(["nvidia-smi", "-i", index, "--query-gpu=utilization.gpu",
                             "--format=csv,noheader,nounits", "-lms", "100"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)

    def read() -> None:
        for line in proc.stdout:
            if line.strip().isdigit():
                samples.append(int(line) / 100)
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield samples
    finally:
        proc.terminate()
        proc.wait()
        reader.join(timeout=2)


def train(work: Path, scheme: str, device: str, arch: list[str], max_tokens: int, steps: int,
          workers: int, log_every: int, precision: str, extra: tuple[str, ...] = (),
          timeout: float | None = None) -> dict:
    """``depnmt train`` of ``scheme`` (and the flags ``extra``; killed past ``timeout``
    seconds) for ``steps`` updates from
    ``work``'s folders: the steady tokens/s and batch waits of its records (module docstring)
    and the busy samples; with ``--compile``, the compile counts of its last record and the
    graphs compiled during the steady records (:func:`compile_counts`)."""
    model = work / "models" / "-".join([scheme, *(f.strip("-") for f in extra)])
    shutil.rmtree(model, ignore_errors=True)
    model.parent.mkdir(parents=True, exist_ok=True)
    trees = ["-t", work / "parse"] if scheme != "abs" else []
    cmd = cli("train", "-i", work / "bpe", *trees, "-o", model, "--scheme", scheme, *arch,
              "--max-tokens", max_tokens, "--max-steps", steps, "--log-every", log_every,
              "--warmup", 10, "--valid-max-sentences", 10, "--device", device,
              "--precision", precision, "--workers", workers, *extra)
    started = time.monotonic()
    with busy_samples(device) as busy:
        run(cmd, work / f"train-{model.name}.log", timeout)
    records = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in records if r.get("event") == "train"]
    steady = train[1:] or train
    return {"scheme": scheme, "steps": steps, "records": len(train),
            "tgt_tok_s": statistics.median(r["tgt_tokens_per_s"] for r in steady),
            "src_tok_s": statistics.median(r["src_tokens_per_s"] for r in steady),
            "wait_share_max": max(r.get("batch_wait_share", 0.0) for r in steady),
            "wait_share_median": statistics.median(r.get("batch_wait_share", 0.0)
                                                   for r in steady),
            "busy": statistics.mean(busy[len(busy) // 4:]) if len(busy) >= 4 else None,
            "wall_s": round(time.monotonic() - started, 1), **compile_counts(train)}


def compile_counts(train: list[dict]) -> dict:
    """A compiled run's (``train --compile``) counts from its ``train`` records: graphs
    compiled, recompiles and graph breaks in all, and the graphs compiled during the steady
    records (after the first record, which includes the first compile); empty otherwise."""
    counted = [r for r in train if "compiled_graphs" in r]
    if not counted:
        return {}
    last = counted[-1]
    return {"compiled_graphs": last["compiled_graphs"], "recompiles": last["recompiles"],
            "graph_breaks": last["graph_breaks"],
            "steady_compiles": last["compiled_graphs"] - counted[0]["compiled_graphs"]}


@click.command(context_settings={"show_default": True, "help_option_names": ["-h", "--help"]})
@click.option("--base", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="folder with prepare/ and parse/ of a small parsed En→Ja corpus")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), required=True)
@click.option("--device", default="cuda")
@click.option("--schemes", default=",".join(SCHEMES))
@click.option("--pairs", default=40000, help="synthetic training pairs")
@click.option("--merges", default=8000, help="joint BPE merges")
@click.option("--steps", default=60, help="updates per scheme")
@click.option("--max-tokens", default=25000)
@click.option("--workers", default=-1, help="train --workers (-1: its default)")
@click.option("--arch", default="--layers 6 --d-model 512 --heads 8 --d-ff 2048")
@click.option("--precision", default="bf16")
def main(base, work, device, schemes, pairs, merges, steps, max_tokens, workers, arch,
         precision) -> None:
    """Train each scheme through the real data path; one JSON line a scheme, then the
    corpus's length moments."""
    make_corpus(base, work, pairs, merges)
    for scheme in schemes.split(","):
        click.echo(json.dumps(train(work, scheme, device, arch.split(), max_tokens, steps,
                                    workers, max(1, steps // 6), precision)))
    click.echo(json.dumps(length_moments(work / "bpe")))


if __name__ == "__main__":
    main()
