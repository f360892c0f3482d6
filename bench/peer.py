"""depnmt against OpenNMT-py 3.0.4 and CTranslate2 4.8.5 on the same data and model.

    python bench/peer.py                       # everything (hours on 2 CPU cores)
    python bench/peer.py --quick               # smoke run: tiny segments, 30-update decode models
    python bench/peer.py --phases train        # only the training-throughput segments
    python bench/peer.py --phases decode --decode-steps 2000
    python bench/peer.py --phases devloss      # after decode: dev loss at equal target tokens
    python bench/peer.py --report              # print the table from what is already measured

Phases (each resumable; re-running skips what is done, so a stopped run is continued by running
the same command again):

1. ``venv``: a separate virtual environment (``--venv``, default work/peer-venv) with torch
   2.13.0 installed first (the CPU wheel, pinned, as bin/install does), then OpenNMT-py 3.0.4
   with ``--no-deps`` (it pins ``ctranslate2<4``) and the runtime dependencies it imports
   (pyonmttok, configargparse, pyyaml, sacrebleu, rapidfuzz, numpy), then CTranslate2 4.8.5.
   depnmt is the one importable here (run from a worktree with PYTHONPATH=$PWD to measure it).
2. ``data``: ``depnmt prepare --corpus multi30k`` and ``depnmt bpe --merges 8000 --joint``
   (or ``--prepare-dir`` / ``--bpe-dir`` given), OpenNMT-py's vocabulary from the same BPE text.
3. ``train``: for each scheme (abs, rel = Shaw k=2 with the absolute PE), ``--rounds`` rounds of
   one fresh training segment of ``--segment-steps`` updates per toolkit, interleaved
   (round r runs depnmt then OpenNMT-py for even r, the other way round for odd r). Per segment:
   target tokens/s (mean of the toolkit's own logged windows of ``--log-every`` updates, the
   first window left out as warm-up), target tokens per batch, peak RSS (wait4), load average.
4. ``decode``: one model per toolkit trained for ``--decode-steps`` updates (abs; in chunks of
   ``--chunk-steps``, alternating, resumed), test_2016_flickr BLEU of each, then ``--rounds``
   interleaved rounds of beam-4 decoding of test_2016_flickr (sorted by source length, batches
   of ``--decode-batch`` sentences, max output length ``--max-length``) by depnmt (its default
   ``--precision auto``, and fp32), OpenNMT-py's translator and CTranslate2 float32 (converted
   with ct2-opennmt-py-converter): sentences/s.
5. ``devloss``: the dev loss (NLL per target token incl. EOS, teacher forcing, no label
   smoothing, fp32, the whole dev set) of both decode models at every chunk, and the target
   tokens each had trained on by then (depnmt: its batcher's batches; OpenNMT-py: its logged
   tokens per batch); depnmt's loss is interpolated at OpenNMT-py's token counts.

Results are JSON files under ``--work`` (default work/peer); the table (ratios depnmt /
OpenNMT-py) is printed at the end with the CPU flags and load averages. See docs/performance.md.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

TORCH, ONMT, CT2 = "torch==2.13.0", "OpenNMT-py==3.0.4", "ctranslate2==4.8.5"
ONMT_RUNTIME = ["pyonmttok>=1.35,<2", "configargparse", "pyyaml", "sacrebleu", "rapidfuzz", "numpy"]
SCHEMES = {"abs": ("abs", 0), "rel": ("abs+rel", 2)}   # depnmt's scheme, ONMT's k
TOOLKITS = ("depnmt", "onmt")
# depnmt's decoders: its default (translate --precision auto: bf16 autocast on CPUs with native
# bf16) and fp32 (what every machine gives; CTranslate2 runs float32)
DEPNMT_DECODERS = {"depnmt": "auto", "depnmt-fp32": "fp32"}
DECODERS = (*DEPNMT_DECODERS, "onmt", "ct2")
# OpenNMT-py 3.0.4 pickles its options into checkpoints; torch >= 2.6 loads weights only
ONMT_ENV = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1", "PYTHONWARNINGS": "ignore"}


@dataclass
class Settings:
    """What both toolkits are given (the same model, data and batch budget)."""

    layers: int = 3
    d_model: int = 256
    heads: int = 4
    d_ff: int = 1024
    dropout: float = 0.1
    label_smoothing: float = 0.1
    max_tokens: int = 4096
    lr: float = 7e-4          # depnmt's peak learning rate (Adam 0.9/0.98)
    warmup: int = 4000
    seed: int = 1


# -- pure parts (tested) --------------------------------------------------------------------
def noam_learning_rate(peak: float, d_model: int, warmup: int) -> float:
    """OpenNMT-py's ``learning_rate`` whose noam schedule
    ``lr · d^-0.5 · min(step^-0.5, step · warmup^-1.5)`` peaks at ``peak`` (at step = warmup),
    as depnmt's linear warm-up + inverse square root decay does."""
    return peak * d_model ** 0.5 * warmup ** 0.5


def onmt_config(s: Settings, scheme: str, bpe: Path, out: Path, steps: int,
                log_every: int, save_every: int, langs: tuple[str, str]) -> dict:
    """An OpenNMT-py 3.0.4 training config equivalent to depnmt's model."""
    src, tgt = langs
    return {
        "save_data": str(out / "data"), "src_vocab": str(out.parent / "vocab.txt"),
        "share_vocab": True, "src_vocab_size": 100000, "tgt_vocab_size": 100000,
        "data": {"corpus_1": {"path_src": str(bpe / f"train.{src}"),
                              "path_tgt": str(bpe / f"train.{tgt}")}},
        "save_model": str(out / "model"), "save_checkpoint_steps": save_every,
        "train_steps": steps, "valid_steps": 10 ** 9, "report_every": log_every, "seed": s.seed,
        "encoder_type": "transformer", "decoder_type": "transformer",
        "enc_layers": s.layers, "dec_layers": s.layers,
        "hidden_size": s.d_model, "word_vec_size": s.d_model, "transformer_ff": s.d_ff,
        "heads": s.heads, "dropout": [s.dropout], "attention_dropout": [s.dropout],
        "position_encoding": True, "max_relative_positions": SCHEMES[scheme][1],
        "share_embeddings": True, "share_decoder_embeddings": True,
        "label_smoothing": s.label_smoothing, "optim": "adam", "adam_beta1": 0.9,
        "adam_beta2": 0.98, "decay_method": "noam", "warmup_steps": s.warmup,
        "learning_rate": noam_learning_rate(s.lr, s.d_model, s.warmup), "max_grad_norm": 0,
        "batch_type": "tokens", "batch_size": s.max_tokens, "normalization": "tokens",
        "accum_count": [1], "param_init": 0.0, "param_init_glorot": True,
        "model_dtype": "fp32", "world_size": 1, "gpu_ranks": [],
    }


def depnmt_train_args(s: Settings, scheme: str, bpe: Path, out: Path, steps: int,
                      log_every: int) -> list[str]:
    """``depnmt train`` arguments for the same model as :func:`onmt_config`."""
    return ["train", "-i", str(bpe), "-o", str(out), "--scheme", SCHEMES[scheme][0],
            "--layers", str(s.layers), "--d-model", str(s.d_model), "--heads", str(s.heads),
            "--d-ff", str(s.d_ff), "--dropout", str(s.dropout),
            "--attention-dropout", str(s.dropout), "--share-all-embeddings",
            "--label-smoothing", str(s.label_smoothing), "--max-tokens", str(s.max_tokens),
            "--lr", str(s.lr), "--warmup", str(s.warmup), "--clip-norm", "0",
            "--max-steps", str(steps), "--log-every", str(log_every), "--seed", str(s.seed),
            "--device", "cpu", "--valid-max-sentences", "50"]


def interleaved(rounds: int, names: tuple[str, ...]) -> list[tuple[int, str]]:
    """(round, name) in run order: A B, B A, A B, ... so that a drifting load hits all alike."""
    out = []
    for r in range(rounds):
        out += [(r, n) for n in (names if r % 2 == 0 else names[::-1])]
    return out


ONMT_STEP = re.compile(r"Step\s+(\d+)(?:/\s*\d+)?;.*?bsz:\s*([\d.]+)/\s*([\d.]+)/\s*([\d.]+);"
                       r"\s*([\d.]+)/\s*([\d.]+) tok/s")


def parse_onmt_log(text: str) -> list[dict]:
    """OpenNMT-py's training report lines: step, mean src/tgt tokens per batch, tok/s."""
    return [{"step": int(m[1]), "src_per_batch": float(m[2]), "tgt_per_batch": float(m[3]),
             "src_tokens_per_s": float(m[5]), "tgt_tokens_per_s": float(m[6])}
            for m in ONMT_STEP.finditer(text)]


def parse_depnmt_metrics(text: str) -> list[dict]:
    """depnmt's metrics.jsonl training windows."""
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [r for r in rows if r.get("event") == "train"]


def window_rate(windows: list[dict]) -> float | None:
    """Mean target tokens/s over the windows after the first (warm-up)."""
    rates = [w["tgt_tokens_per_s"] for w in windows[1:]]
    return statistics.mean(rates) if rates else None


ONMT_GOLD = re.compile(r"GOLD SCORE:\s*(-?[\d.]+),.*?NB SENTENCES:\s*(\d+)")


def onmt_gold_nll(log_text: str) -> float:
    """Summed negative log-likelihood of the references from ``onmt_translate -tgt``'s report.

    OpenNMT-py 3.0.4 (``Translator._score_target``) sums the log-probabilities of every
    reference token and EOS (padding zeroed) and reports their mean per sentence as
    ``GOLD SCORE``; the sum is that mean times ``NB SENTENCES``."""
    m = ONMT_GOLD.search(log_text)
    if not m:
        raise click.ClickException("onmt_translate reported no GOLD SCORE")
    return -float(m[1]) * int(m[2])


def tokens_seen(windows: list[dict], step: int) -> float:
    """Target tokens trained on in ``step`` updates: ``step`` × the mean target tokens per batch
    of OpenNMT-py's report windows up to ``step`` (a run resumed between reports logs a short
    window, so the windows' own update counts are not summed)."""
    means = [w["tgt_per_batch"] for w in windows if w["step"] <= step]
    return step * statistics.mean(means)


def at_tokens(points: list[tuple[float, float]], tokens: float) -> float | None:
    """Linear interpolation of (tokens, value) points at ``tokens``; None outside their range."""
    points = sorted(points)
    for (t0, v0), (t1, v1) in zip(points, points[1:]):
        if t0 <= tokens <= t1:
            return v0 + (v1 - v0) * (tokens - t0) / (t1 - t0) if t1 > t0 else v0
    return None


def chunk_targets(steps: int, chunk: int) -> list[int]:
    """The update counts at which the decode models are saved: every ``chunk`` and ``steps``."""
    return [*range(chunk, steps, chunk), steps]


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}" if a and b else "–"


def fmt(x: float | None, unit: str = "") -> str:
    if x is None:
        return "–"
    return f"{x:,.0f}{unit}" if abs(x) >= 100 else f"{x:.2f}{unit}"


def table(rows: list[tuple[str, float | None, float | None]],
          names=("OpenNMT-py", "depnmt")) -> str:
    """A markdown table: figure | peer | depnmt | ratio (depnmt / peer)."""
    out = [f"| figure | {names[0]} | {names[1]} | ratio |", "|---|---|---|---|"]
    for name, peer, ours in rows:
        out.append(f"| {name} | {fmt(peer)} | {fmt(ours)} | **{ratio(ours, peer)}** |")
    return "\n".join(out)


def machine() -> dict:
    """CPU flags that matter for the speed of matrix multiplies, cores and the load average."""
    flags = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags |= {f for f in line.split(":", 1)[1].split()
                          if f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16")}
        model = next((ln.split(":", 1)[1].strip() for ln in
                      Path("/proc/cpuinfo").read_text().splitlines()
                      if ln.startswith("model name")), "?")
    except OSError:
        model = "?"
    return {"cpu": model, "cores": os.cpu_count(), "flags": sorted(flags), "load": loadavg()}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


# -- running things -------------------------------------------------------------------------
def say(msg: str) -> None:
    print(f"[peer {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def run(cmd: list[str], log: Path | None = None, env: dict | None = None,
        until=None) -> dict:
    """Run ``cmd`` to completion, or until ``until()`` is true (then it is terminated: the
    measured windows are logged, what follows — validation, saving — is not measured); returns
    wall time, peak RSS (MB, from wait4) and the load average before and after. Output goes
    to ``log``."""
    say(" ".join(cmd)[:200])
    fh = open(log, "w") if log else subprocess.DEVNULL
    load0, t0 = loadavg(), time.monotonic()
    proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    stopped, tree_peak = False, 0.0
    while until is not None and proc.poll() is None:
        tree_peak = max(tree_peak, tree_rss_mb(proc.pid))
        try:
            stopped = bool(until())
        except (OSError, ValueError):
            stopped = False
        if stopped:
            proc.terminate()
            break
        time.sleep(2)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    if log:
        fh.close()
    if proc.returncode != 0 and not stopped:
        tail = log.read_text()[-3000:] if log else ""
        raise click.ClickException(f"{cmd[0]} failed ({proc.returncode}):\n{tail}")
    return {"seconds": time.monotonic() - t0, "peak_rss_mb": usage.ru_maxrss / 1024,
            "peak_tree_rss_mb": tree_peak or None, "load_before": load0, "load_after": loadavg()}


def tree_rss_mb(pid: int) -> float:
    """Resident memory (MB) of ``pid`` and all its descendants now (e.g. OpenNMT-py's data
    loader workers, which ``wait4``'s per-process peak does not add up)."""
    parent, rss = {}, {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                parent[int(d.name)], rss[int(d.name)] = int(fields[1]), int(fields[21])
            except (OSError, IndexError, ValueError):
                continue
    tree, todo = set(), [pid]
    while todo:
        p = todo.pop()
        tree.add(p)
        todo += [c for c, pp in parent.items() if pp == p and c not in tree]
    return sum(rss.get(p, 0) for p in tree) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


class Peer:
    """Paths and runners for one benchmark folder."""

    def __init__(self, work: Path, venv: Path, settings: Settings, langs=("en", "de")):
        self.work, self.venv, self.s, self.langs = work, venv, settings, langs
        self.test_lines = 0                  # 0: all of test_2016_flickr
        self.work.mkdir(parents=True, exist_ok=True)
        self.prepare = work / "prepare"
        self.bpe = work / "bpe"

    def vbin(self, name: str) -> str:
        return str(self.venv / "bin" / name)

    def depnmt(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "depnmt.cli", *args]

    # venv
    def install(self) -> None:
        mark = self.venv / ".peer-installed"
        if mark.exists():
            return
        if not (self.venv / "bin" / "python").exists():
            run([sys.executable, "-m", "venv", str(self.venv)])
        pip = [self.vbin("python"), "-m", "pip", "install", "--quiet"]
        run(pip + [TORCH])                                  # CPU wheel first, pinned
        run(pip + ["--no-deps", ONMT])                       # it pins ctranslate2<4
        run(pip + [TORCH, CT2, *ONMT_RUNTIME])                # torch stays pinned
        run([self.vbin("python"), "-c", "import onmt.bin.train, ctranslate2, torch"],
            env=ONMT_ENV)
        mark.write_text(json.dumps({"torch": TORCH, "onmt": ONMT, "ct2": CT2}))

    # data
    def data(self, prepare_dir: Path | None, bpe_dir: Path | None) -> None:
        if bpe_dir:
            self.bpe = bpe_dir
        if prepare_dir:
            self.prepare = prepare_dir
        if not (self.prepare / "manifest.json").exists():
            run(self.depnmt("prepare", "--corpus", "multi30k", "--src-lang", self.langs[0],
                            "--tgt-lang", self.langs[1], "-o", str(self.prepare)),
                self.work / "prepare.log")
        if not (self.bpe / "manifest.json").exists():
            run(self.depnmt("bpe", "-i", str(self.prepare), "-o", str(self.bpe), "--merges",
                            "8000", "--joint"), self.work / "bpe.log")
        vocab = self.work / "onmt" / "vocab.txt"
        if not vocab.exists():
            cfg = self.write_onmt_config("abs", self.work / "onmt" / "vocab-build", 1, 1, 1)
            run([self.vbin("onmt_build_vocab"), "-config", str(cfg), "-n_sample", "-1"],
                self.work / "onmt" / "build_vocab.log", env=ONMT_ENV)

    def write_onmt_config(self, scheme: str, out: Path, steps: int, log_every: int,
                          save_every: int) -> Path:
        import yaml
        out.mkdir(parents=True, exist_ok=True)
        cfg = onmt_config(self.s, scheme, self.bpe, out, steps, log_every, save_every, self.langs)
        cfg["src_vocab"] = str(self.work / "onmt" / "vocab.txt")
        path = out / "config.yaml"
        path.write_text(yaml.safe_dump(cfg, sort_keys=False))
        return path

    # training segments
    def segment(self, scheme: str, toolkit: str, rnd: int, steps: int, log_every: int) -> dict:
        res = self.work / "train" / f"{scheme}-{toolkit}-{rnd}.json"
        if res.exists():
            return json.loads(res.read_text())
        out = self.work / "train" / f"{scheme}-{toolkit}-{rnd}"
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        if toolkit == "depnmt":
            metrics = out / "model" / "metrics.jsonl"

            def windows():
                return parse_depnmt_metrics(metrics.read_text()) if metrics.exists() else []
            stats = run(self.depnmt(*depnmt_train_args(self.s, scheme, self.bpe, out / "model",
                                                       steps, log_every)), out / "log.txt",
                        until=lambda: any(w["step"] >= steps for w in windows()))
        else:
            cfg = self.write_onmt_config(scheme, out, steps, log_every, 10 ** 9)

            def windows():
                return parse_onmt_log((out / "log.txt").read_text())
            stats = run([self.vbin("onmt_train"), "-config", str(cfg)], out / "log.txt",
                        env=ONMT_ENV, until=lambda: any(w["step"] >= steps for w in windows()))
        windows = windows()
        record = {"scheme": scheme, "toolkit": toolkit, "round": rnd, "steps": steps,
                  "log_every": log_every, "windows": windows,
                  "tgt_tokens_per_s": window_rate(windows), **stats}
        if toolkit == "onmt":
            record["tgt_per_batch"] = statistics.mean(w["tgt_per_batch"] for w in windows)
        shutil.rmtree(out, ignore_errors=True)             # checkpoints are not needed
        res.write_text(json.dumps(record, indent=1))
        say(f"{scheme} {toolkit} round {rnd}: {fmt(record['tgt_tokens_per_s'])} tgt tok/s, "
            f"peak RSS {record['peak_rss_mb']:.0f} MB, load {stats['load_after']}")
        return record

    def depnmt_batcher(self):
        """``(lengths, TokenBatcher)`` of depnmt's training data (source/target lengths with
        EOS, --max-tokens, --seed) as ``depnmt train`` batches it; the BPE files are read once."""
        if getattr(self, "_batcher", None) is None:
            from depnmt.data.batches import TokenBatcher
            lines = {lang: (self.bpe / f"train.{lang}").read_text().splitlines()
                     for lang in self.langs}
            lengths = [(len(a.split()) + 1, len(b.split()) + 1)
                       for a, b in zip(lines[self.langs[0]], lines[self.langs[1]])]
            self._batcher = lengths, TokenBatcher(lengths, self.s.max_tokens, self.s.seed)
        return self._batcher

    def depnmt_batch_fill(self) -> float:
        """Mean target tokens per depnmt batch of --max-tokens over one epoch (its batcher)."""
        res = self.work / "train" / "depnmt-batch-fill.json"
        if res.exists():
            return json.loads(res.read_text())["tgt_per_batch"]
        lengths, batcher = self.depnmt_batcher()
        batches = batcher.batches(1)
        fill = statistics.mean(sum(lengths[i][1] for i in b) for b in batches)
        res.parent.mkdir(parents=True, exist_ok=True)
        res.write_text(json.dumps({"tgt_per_batch": fill, "batches": len(batches)}))
        return fill

    # decoding: models of real quality, BLEU, interleaved beam-4 speed
    def decode_models(self, steps: int, chunk: int) -> None:
        """Train the abs model of each toolkit to ``steps`` updates, in alternating chunks."""
        d = self.work / "decode"
        for target in chunk_targets(steps, chunk):
            for toolkit in TOOLKITS:
                mark = d / f"{toolkit}-model-{target}.done"
                if mark.exists():
                    continue
                if toolkit == "depnmt":
                    args = depnmt_train_args(self.s, "abs", self.bpe, d / "depnmt-model", target,
                                             100)
                    resume = (d / "depnmt-model" / "checkpoints" / "last.pt").exists()
                    stats = run(self.depnmt(*args, *(["--resume"] if resume else [])),
                                d / f"depnmt-train-{target}.log")
                    ckpts = d / "depnmt-model" / "checkpoints"     # kept for the dev loss
                    shutil.copy2(ckpts / "last.pt", ckpts / f"chunk{target}.pt")
                else:
                    out = d / "onmt-model"
                    cfg = self.write_onmt_config("abs", out, target, 100, chunk)
                    done = sorted(out.glob("model_step_*.pt"),
                                  key=lambda p: int(p.stem.rsplit("_", 1)[1]))
                    cmd = [self.vbin("onmt_train"), "-config", str(cfg)]
                    if done:
                        cmd += ["-train_from", str(done[-1])]
                    stats = run(cmd, d / f"onmt-train-{target}.log", env=ONMT_ENV)
                mark.write_text(json.dumps(stats))

    def dev_losses(self, steps: int, chunk: int) -> list[dict]:
        """Dev NLL per target token (teacher forcing, no label smoothing, fp32, the whole dev
        set) of both toolkits' decode models at every chunk, with the target tokens each had
        trained on by then: the issue's "same dev loss after the same number of target tokens"."""
        d = self.work / "decode"
        res = d / "devloss.json"
        rows = json.loads(res.read_text()) if res.exists() else []
        done = {(r["toolkit"], r["step"]) for r in rows}
        src, tgt = (self.bpe / f"dev.{lang}" for lang in self.langs)
        n_tokens = sum(len(line.split()) + 1 for line in tgt.read_text().splitlines())
        for target in chunk_targets(steps, chunk):
            for toolkit in TOOLKITS:
                if (toolkit, target) in done:
                    continue
                log = d / f"devloss-{toolkit}-{target}.log"
                if toolkit == "depnmt":
                    ckpt = d / "depnmt-model" / "checkpoints" / f"chunk{target}.pt"
                    run([sys.executable, __file__, "devloss-depnmt", "--model-dir",
                         str(d / "depnmt-model"), "--checkpoint", str(ckpt), "--src", str(src),
                         "--tgt", str(tgt), "--out", str(log.with_suffix(".json"))], log)
                    nll = json.loads(log.with_suffix(".json").read_text())["nll_sum"]
                    seen = self.depnmt_tokens_seen(target)
                else:
                    run([self.vbin("onmt_translate"), "-model", str(self.onmt_checkpoint(target)),
                         "-src", str(src), "-tgt", str(tgt), "-output", os.devnull,
                         "-beam_size", "1", "-max_length", "1", "-batch_size", "64", "-gpu",
                         "-1"], log, env=ONMT_ENV)
                    nll = onmt_gold_nll(log.read_text())
                    windows = [w for t in chunk_targets(steps, chunk) if t <= target
                               for w in parse_onmt_log((d / f"onmt-train-{t}.log").read_text())]
                    seen = tokens_seen(windows, target)
                rows.append({"toolkit": toolkit, "step": target, "dev_nll": nll / n_tokens,
                             "dev_tokens": n_tokens, "tgt_tokens_seen": seen})
                res.write_text(json.dumps(rows, indent=1))
                say(f"dev loss {toolkit} @{target}: {nll / n_tokens:.4f} after {seen:,.0f} "
                    "target tokens")
        return rows

    def depnmt_tokens_seen(self, steps: int) -> int:
        """Target tokens (with EOS) in depnmt's first ``steps`` batches, epoch after epoch, as
        its TokenBatcher orders them for --seed (the batches training took)."""
        lengths, batcher = self.depnmt_batcher()
        seen, epoch = 0, 1
        while steps > 0:
            batches = batcher.batches(epoch)
            seen += sum(lengths[i][1] for batch in batches[:steps] for i in batch)
            steps -= len(batches)
            epoch += 1
        return seen

    def onmt_checkpoint(self, steps: int) -> Path:
        return self.work / "decode" / "onmt-model" / f"model_step_{steps}.pt"

    def sorted_test(self) -> tuple[Path, list[int]]:
        """test_2016_flickr's BPE source sorted by length (every toolkit gets the same batches)
        and the order (sorted position -> line)."""
        lines = (self.bpe / f"test.{self.langs[0]}").read_text().splitlines()
        lines = lines[:self.test_lines] if self.test_lines else lines
        order = sorted(range(len(lines)), key=lambda i: (len(lines[i].split()), i))
        path = self.work / "decode" / f"test.sorted.{self.langs[0]}"
        path.write_text("".join(lines[i] + "\n" for i in order))
        return path, order

    def decode_round(self, toolkit: str, rnd: int, steps: int, batch: int, max_length: int,
                     beam: int) -> dict:
        d = self.work / "decode"
        res = d / f"speed-{toolkit}-{rnd}.json"
        if res.exists():
            return json.loads(res.read_text())
        src, _ = self.sorted_test()
        hyp = d / f"hyp-{toolkit}-{rnd}.bpe"
        log = d / f"speed-{toolkit}-{rnd}.log"
        if toolkit in DEPNMT_DECODERS:
            stats = run([sys.executable, __file__, "decode-depnmt", "--model-dir",
                         str(d / "depnmt-model"), "--src", str(src), "--out", str(hyp),
                         "--batch", str(batch), "--beam", str(beam), "--max-length",
                         str(max_length), "--timing", str(log.with_suffix(".json")),
                         "--precision", DEPNMT_DECODERS[toolkit]], log)
            seconds = json.loads(log.with_suffix(".json").read_text())["seconds"]
        elif toolkit == "onmt":
            stats = run([self.vbin("onmt_translate"), "-model", str(self.onmt_checkpoint(steps)),
                         "-src", str(src), "-output", str(hyp), "-beam_size", str(beam),
                         "-batch_size", str(batch), "-batch_type", "sents", "-max_length",
                         str(max_length), "-length_penalty", "wu", "-alpha", "0.6",
                         "-report_time", "-gpu", "-1"], log, env=ONMT_ENV)
            seconds = float(re.search(r"Total translation time \(s\): ([\d.]+)",
                                      log.read_text())[1])
        else:
            ct2 = d / "ct2-model"
            if not (ct2 / "model.bin").exists():
                # the checkpoint is OpenNMT-py's own, written here: CTranslate2 4.8's converter
                # loads it weights-only unless told (it pickles an argparse.Namespace)
                run([self.vbin("ct2-opennmt-py-converter"), "--model_path",
                     str(self.onmt_checkpoint(steps)), "--output_dir", str(ct2), "--force",
                     "--unsafe_deserialization"],
                    d / "ct2-convert.log", env=ONMT_ENV)
            stats = run([self.vbin("python"), "-c", CT2_SCRIPT, str(ct2), str(src), str(hyp),
                         str(batch), str(beam), str(max_length), str(os.cpu_count() or 1)],
                        log, env=ONMT_ENV)
            seconds = float(log.read_text().split("SECONDS ")[1].split()[0])
        n = len(src.read_text().splitlines())
        record = {"toolkit": toolkit, "round": rnd, "sentences": n, "decode_seconds": seconds,
                  "sentences_per_s": n / seconds, "batch": batch, "beam": beam,
                  "max_length": max_length, **stats}
        res.write_text(json.dumps(record, indent=1))
        say(f"decode {toolkit} round {rnd}: {n / seconds:.1f} sentences/s, load "
            f"{stats['load_after']}")
        return record

    def bleu(self, toolkit: str) -> float:
        """test_2016_flickr BLEU (sacreBLEU, detokenized, against prepare's raw references)."""
        import sacrebleu

        from depnmt.core.subwords import merge_subwords
        from depnmt.stages.tokenize import make_tokenizer
        from depnmt.storage.modeldir import read_config
        detok = make_tokenizer(read_config(self.work / "decode" / "depnmt-model")
                               ["tokenizers"]["tgt"])
        _, order = self.sorted_test()
        hyps = (self.work / "decode" / f"hyp-{toolkit}-0.bpe").read_text().splitlines()
        out = [""] * len(order)
        for pos, line in zip(order, hyps):
            out[pos] = detok.detokenize(merge_subwords(line.split()))
        refs = (self.prepare / f"test.raw.{self.langs[1]}").read_text().splitlines()[:len(out)]
        return sacrebleu.corpus_bleu(out, [refs]).score


CT2_SCRIPT = """
import sys, time, ctranslate2
model, src, out, batch, beam, max_len, threads = sys.argv[1:8]
tr = ctranslate2.Translator(model, device="cpu", compute_type="float32", inter_threads=1,
                            intra_threads=int(threads))
lines = [l.split() for l in open(src, encoding="utf-8").read().splitlines()]
b = int(batch)
hyps = []
t0 = time.perf_counter()
for i in range(0, len(lines), b):
    res = tr.translate_batch(lines[i:i + b], beam_size=int(beam),
                             max_decoding_length=int(max_len), length_penalty=0.6)
    hyps += [" ".join(r.hypotheses[0]) for r in res]
dt = time.perf_counter() - t0
open(out, "w", encoding="utf-8").write("".join(h + "\\n" for h in hyps))
print("SECONDS", dt)
"""


def devloss_table(path: Path) -> str:
    """Dev loss of both decode models per chunk, and depnmt's interpolated at OpenNMT-py's
    target-token counts (its batches hold a few % more target tokens, so equal updates are not
    equal tokens)."""
    if not path.exists():
        return ""
    rows = json.loads(path.read_text())
    by = {t: {r["step"]: r for r in rows if r["toolkit"] == t} for t in TOOLKITS}
    ours = [(r["tgt_tokens_seen"], r["dev_nll"]) for r in by["depnmt"].values()]
    text = ("\n\n| updates | OpenNMT-py target tokens | OpenNMT-py dev NLL | depnmt target tokens "
            "| depnmt dev NLL | depnmt at OpenNMT-py's tokens | difference |\n"
            "|---|---|---|---|---|---|---|\n")
    for step in sorted(set(by["depnmt"]) | set(by["onmt"])):
        o, d = by["onmt"].get(step), by["depnmt"].get(step)
        same = at_tokens(ours, o["tgt_tokens_seen"]) if o else None
        cells = [str(step),
                 fmt(o["tgt_tokens_seen"]) if o else "–", f"{o['dev_nll']:.4f}" if o else "–",
                 fmt(d["tgt_tokens_seen"]) if d else "–", f"{d['dev_nll']:.4f}" if d else "–",
                 f"{same:.4f}" if same else "–",
                 f"{100 * (same / o['dev_nll'] - 1):+.1f}%" if same else "–"]
        text += "| " + " | ".join(cells) + " |\n"
    return text


def summarize(work: Path) -> tuple[str, dict]:
    """The issue's table from the JSON results under ``work``."""
    train = [json.loads(p.read_text()) for p in sorted((work / "train").glob("*-*-*.json"))
             if p.stem.split("-")[0] in SCHEMES]
    for r in train:     # the whole process tree (data loader workers included) when sampled
        r["rss_mb"] = r.get("peak_tree_rss_mb") or r["peak_rss_mb"]
    dec = [json.loads(p.read_text()) for p in sorted((work / "decode").glob("speed-*.json"))]

    def med(rows, key, **match):
        vals = [r[key] for r in rows if all(r.get(k) == v for k, v in match.items())
                and r.get(key) is not None]
        return statistics.median(vals) if vals else None

    def mx(rows, key, **match):
        vals = [r[key] for r in rows if all(r.get(k) == v for k, v in match.items())]
        return max(vals) if vals else None

    fill = work / "train" / "depnmt-batch-fill.json"
    rows = [("training, abs, target tok/s", med(train, "tgt_tokens_per_s", scheme="abs",
                                                 toolkit="onmt"),
             med(train, "tgt_tokens_per_s", scheme="abs", toolkit="depnmt")),
            ("training, Shaw rel (k = 2), target tok/s",
             med(train, "tgt_tokens_per_s", scheme="rel", toolkit="onmt"),
             med(train, "tgt_tokens_per_s", scheme="rel", toolkit="depnmt")),
            ("target tokens in a 4,096-token batch", med(train, "tgt_per_batch", toolkit="onmt"),
             json.loads(fill.read_text())["tgt_per_batch"] if fill.exists() else None),
            ("peak RSS in training (MB), abs", mx(train, "rss_mb", scheme="abs", toolkit="onmt"),
             mx(train, "rss_mb", scheme="abs", toolkit="depnmt")),
            ("beam-4 decoding, sentences/s", med(dec, "sentences_per_s", toolkit="onmt"),
             med(dec, "sentences_per_s", toolkit="depnmt"))]
    rows = [r for r in rows if r[1] is not None or r[2] is not None]    # phases not run: no row
    text = table(rows) if rows else ""
    bleu_file = work / "decode" / "bleu.json"
    bleus = json.loads(bleu_file.read_text()) if bleu_file.exists() else {}
    if dec:
        text += ("\n\n| decoder (beam 4) | sentences/s | depnmt / it | test_2016_flickr BLEU |\n"
                 "|---|---|---|---|\n")
        for name, label in (("depnmt", "depnmt (--precision auto)"),
                            ("depnmt-fp32", "depnmt --precision fp32"),
                            ("onmt", "OpenNMT-py translate"),
                            ("ct2", "CTranslate2 float32")):
            sps = med(dec, "sentences_per_s", toolkit=name)
            ours = med(dec, "sentences_per_s", toolkit="depnmt")
            text += f"| {label} | {fmt(sps)} | {ratio(ours, sps)} | {fmt(bleus.get(name))} |\n"
    text += devloss_table(work / "decode" / "devloss.json")
    if train:
        text += ("\n\n| segment (run order) | target tok/s per window | mean w/o first | "
                 "load before | load after |\n|---|---|---|---|---|\n")
        runs = {(n, rnd): i for i, (rnd, n) in enumerate(interleaved(1 + max(
            r["round"] for r in train), TOOLKITS))}
        for r in sorted(train, key=lambda r: (r["scheme"], runs[r["toolkit"], r["round"]])):
            wins = ", ".join(fmt(w["tgt_tokens_per_s"]) for w in r.get("windows", []))
            text += (f"| {r['scheme']} {r['toolkit']} round {r['round']} | {wins} | "
                     f"{fmt(r['tgt_tokens_per_s'])} | {r['load_before']} | {r['load_after']} |\n")
    loads = sorted({r["load_before"] for r in train + dec} | {r["load_after"] for r in train + dec},
                   key=lambda load: float(load.split()[0]))
    segs = {(r["scheme"], r["toolkit"]) for r in train}
    info = {"segments": len(train), "decode_rounds": len(dec), "kinds": sorted(segs),
            "loads": loads[:1] + loads[-1:], "bleu": bleus}
    return text, info


# -- CLI ------------------------------------------------------------------------------------
@click.group(invoke_without_command=True)
@click.option("--work", type=click.Path(path_type=Path), default=Path("work/peer"),
              show_default=True, help="results, logs and models (outside git)")
@click.option("--venv", type=click.Path(path_type=Path), default=Path("work/peer-venv"),
              show_default=True, help="virtual environment for OpenNMT-py and CTranslate2")
@click.option("--prepare-dir", type=click.Path(path_type=Path), help="reuse a prepare folder")
@click.option("--bpe-dir", type=click.Path(path_type=Path), help="reuse a bpe folder (joint)")
@click.option("--phases", default="venv,data,train,decode,devloss", show_default=True)
@click.option("--schemes", default="abs,rel", show_default=True)
@click.option("--rounds", type=int, default=3, show_default=True,
              help="interleaved rounds (training segments per toolkit and scheme; decodes)")
@click.option("--segment-steps", type=int, default=60, show_default=True,
              help="updates per training segment")
@click.option("--log-every", type=int, default=10, show_default=True,
              help="updates per throughput window (the first is warm-up, left out)")
@click.option("--decode-steps", type=int, default=1000, show_default=True,
              help="updates of the models that are decoded")
@click.option("--chunk-steps", type=int, default=250, show_default=True)
@click.option("--decode-batch", type=int, default=32, show_default=True,
              help="sentences per decoding batch")
@click.option("--max-length", type=int, default=100, show_default=True,
              help="maximum output length (tokens) of every decoder")
@click.option("--beam", type=int, default=4, show_default=True)
@click.option("--lr", type=float, default=1e-3, show_default=True, help="depnmt's peak lr")
@click.option("--warmup", type=int, default=400, show_default=True)
@click.option("--quick", is_flag=True, help="smoke run of the pipeline: a 1+1-layer d_model 64 "
              "model, 1 round of 10-update segments, 20-update decode models, 50 test "
              "sentences, max length 20")
@click.option("--report", "report_only", is_flag=True, help="only print the table")
@click.pass_context
def main(ctx, work, venv, prepare_dir, bpe_dir, phases, schemes, rounds, segment_steps,
         log_every, decode_steps, chunk_steps, decode_batch, max_length, beam, lr, warmup,
         quick, report_only):
    """depnmt vs OpenNMT-py 3.0.4 and CTranslate2 4.8.5 (see the module docstring)."""
    if ctx.invoked_subcommand:
        return
    settings = Settings(lr=lr, warmup=warmup)
    if quick:        # checks the pipeline, not the speed: a tiny model, 50 test sentences
        rounds, segment_steps, log_every, decode_steps, chunk_steps = 1, 10, 2, 20, 10
        max_length, settings = 20, Settings(layers=1, d_model=64, heads=2, d_ff=128, lr=lr,
                                            warmup=warmup)
    peer = Peer(work.resolve(), venv.resolve(), settings)
    peer.test_lines = 50 if quick else 0
    todo = set(phases.split(","))
    mach = machine()
    (peer.work / "machine.json").write_text(json.dumps(mach, indent=1))
    say(f"machine: {mach}")
    if not report_only:
        if "venv" in todo:
            peer.install()
        if todo & {"data", "train", "decode", "devloss"}:
            peer.data(prepare_dir, bpe_dir)
        if "train" in todo:
            peer.depnmt_batch_fill()
            for scheme in schemes.split(","):
                for rnd, toolkit in interleaved(rounds, TOOLKITS):
                    peer.segment(scheme, toolkit, rnd, segment_steps, log_every)
        if "decode" in todo:
            (peer.work / "decode").mkdir(exist_ok=True)
            peer.decode_models(decode_steps, chunk_steps)
            for rnd, toolkit in interleaved(rounds, DECODERS):
                peer.decode_round(toolkit, rnd, decode_steps, decode_batch, max_length, beam)
            if rounds:
                bleus = {t: round(peer.bleu(t), 2) for t in DECODERS}
                (peer.work / "decode" / "bleu.json").write_text(json.dumps(bleus))
        if "devloss" in todo:
            peer.dev_losses(decode_steps, chunk_steps)
    text, info = summarize(peer.work)
    mach["load_now"] = loadavg()
    report = (f"{text}\n\nmachine: {mach['cpu']}, {mach['cores']} cores, flags "
              f"{' '.join(mach['flags'])}; load average (1/5/15 min) from {info['loads']} "
              f"over {info['segments']} training segments and {info['decode_rounds']} decodes")
    (peer.work / "report.md").write_text(report + "\n")
    click.echo(report)


@main.command("decode-depnmt", hidden=True)
@click.option("--model-dir", type=click.Path(path_type=Path), required=True)
@click.option("--src", type=click.Path(path_type=Path), required=True)
@click.option("--out", type=click.Path(path_type=Path), required=True)
@click.option("--batch", type=int, required=True)
@click.option("--beam", type=int, required=True)
@click.option("--max-length", type=int, required=True)
@click.option("--timing", type=click.Path(path_type=Path), required=True)
@click.option("--precision", default="auto")
def decode_depnmt(model_dir, src, out, batch, beam, max_length, timing, precision):
    """Beam search over BPE source lines in fixed batches; timed like CTranslate2's loop, in
    ``translate --precision`` (autocast as ``Translator.translate_examples`` does)."""
    import torch

    from depnmt.core.device import autocast
    from depnmt.data.batches import Example, add_features, collate, encode_source
    from depnmt.decoding.search import search
    from depnmt.decoding.translate import Translator
    tr = Translator.from_model_dir(model_dir, model_dir / "checkpoints" / "last.pt", "cpu",
                                   precision, beam=beam, max_len_a=0.0, max_len_b=max_length)
    lines = [ln.split() for ln in src.read_text(encoding="utf-8").splitlines()]
    exs = [Example(i, encode_source(s, tr.src_vocab), [], s) for i, s in enumerate(lines)]
    add_features(exs, tr.schemes)
    hyps = []
    t0 = time.perf_counter()
    with torch.no_grad(), autocast(tr.device, tr.amp):
        for i in range(0, len(exs), batch):
            b = collate(exs[i:i + batch])
            hyps += search(tr.model, b.src, b.src_feats, tr.search_cfg)
    seconds = time.perf_counter() - t0
    out.write_text("".join(" ".join(tr.tgt_vocab.decode(h)) + "\n" for h in hyps),
                   encoding="utf-8")
    timing.write_text(json.dumps({"seconds": seconds}))


@main.command("devloss-depnmt", hidden=True)
@click.option("--model-dir", type=click.Path(path_type=Path), required=True)
@click.option("--checkpoint", type=click.Path(path_type=Path), required=True)
@click.option("--src", type=click.Path(path_type=Path), required=True)
@click.option("--tgt", type=click.Path(path_type=Path), required=True)
@click.option("--out", type=click.Path(path_type=Path), required=True)
def devloss_depnmt(model_dir, checkpoint, src, tgt, out):
    """Summed NLL of the dev references (teacher forcing, fp32, no label smoothing)."""
    import torch

    from depnmt.data.batches import add_features, collate, load_parallel
    from depnmt.decoding.translate import Translator
    from depnmt.model.transformer import label_smoothed_nll
    tr = Translator.from_model_dir(model_dir, checkpoint, "cpu")
    exs, _ = load_parallel(src, tgt, tr.src_vocab, tr.tgt_vocab)
    add_features(exs, tr.schemes)
    model, nll, tokens = tr.model.eval(), 0.0, 0
    with torch.no_grad():
        for i in range(0, len(exs), 64):
            b = collate(exs[i:i + 64])
            logits, _ = model(b.src, b.tgt_in, b.src_feats)
            nll += float(label_smoothed_nll(logits.float(), b.tgt_out, 0.0)[1])
            tokens += b.n_tokens
    out.write_text(json.dumps({"nll_sum": nll, "tokens": tokens}))


if __name__ == "__main__":
    main()
