"""Speed and memory of every positional scheme, as ratios to ``abs``.

Every scheme trains on the same synthetic batches (random tokens, random dependency trees with
random labels on both sides, a share of words split into two BPE pieces, every source exactly
``--src-len`` ids incl. EOS). A step is what ``depnmt train`` does: forward, label-smoothed loss
plus the schemes' auxiliary losses (DBSA's parse losses, Eq. 18), backward, Adam.
All models live side by side and every batch is trained by every scheme in turn, so a change
in the load of a shared machine hits all schemes alike. Reported per scheme (medians over all
timed steps):

* training tokens/s — target tokens of forward + backward + Adam step;
* peak memory — CUDA: ``max_memory_allocated`` over one step (parameters, gradients, Adam
  states and activations); CPU: the peak of live tensor bytes that the PyTorch profiler's
  memory timeline sees during one step (activations, temporaries, gradients; parameters and
  Adam states as far as the step touches them);
* decoding sentences/s — incremental greedy decoding of ``--decode-len`` steps (fixed, so an
  untrained model's early EOS cannot favour a scheme), one batch of sources.

``--precision fp32,bf16`` trains every scheme once per precision (``depnmt train
--precision``: the same autocast), interleaved too, named ``SCHEME/PRECISION``; the ratios are
to the first run (abs in the first precision), so one run gives the A/B ratio of the precisions.

    python bench/schemes.py                  # CPU, or CUDA when present
    python bench/schemes.py --device cpu --threads 1 --rounds 3 --steps 4
    python bench/schemes.py --schemes abs,gps,gps@all,pascal,structural,dep+rel
    python bench/schemes.py --schemes abs,rel --precision fp32,bf16 --no-memory
"""

from __future__ import annotations

import json
import platform
import random
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import click
import torch

from depnmt.core.device import PRECISIONS, autocast, resolve_device, train_precision
from depnmt.core.trees import random_heads
from depnmt.core.vocab import BOS, EOS
from depnmt.data.batches import Batch, Example, add_features, collate
from depnmt.model.schemes import Scheme
from depnmt.model.schemes.names import resolve
from depnmt.model.schemes.registry import build_schemes, learn_options, scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT, label_smoothed_nll
from depnmt.stages.parse import Sentence
from depnmt.training.step import adam

# Name in the table -> the system trained (its `depnmt train --scheme` name; the papers' systems
# keep the absolute PE) and the scheme options it is trained with (the flags' defaults
# otherwise; DBSA's parse heads sit in the middle layer of the 3 + 3 default, as the paper's
# 4th of 6).
SYSTEMS: dict[str, tuple[str, dict]] = {
    "abs": ("abs", {}), "rel": ("abs+rel", {}), "rel-key": ("abs+rel", {"rel_terms": "key"}),
    "dep": ("abs+dep", {}), "dep+rel": ("abs+dep+rel", {}),
    "deplabel": ("abs+deplabel", {}), "deplabel+rel": ("abs+deplabel+rel", {}),
    "dbsa-enc": ("abs+dbsa-enc", {"dbsa_enc_layer": 2}),
    "lisa": ("abs+dbsa-enc", {"dbsa_enc_layer": 1, "dbsa_scorer": "deep"}),
    "dbsa-dec": ("abs+dbsa-dec", {"dbsa_dec_layer": 2}),
    "dbsa-enc+dec": ("abs+dbsa-enc+dbsa-dec", {"dbsa_enc_layer": 2, "dbsa_dec_layer": 2}),
    "gps": ("abs+gps", {"gps_layer": "1"}),
    "gps@all": ("abs+gps", {"gps_layer": "all"}),
    "pascal": ("abs+pascal", {}), "structural": ("abs+structural", {}),
    "treedist": ("abs+treedist", {}),
    "factors": ("abs+factors", {}),
    "factors-concat": ("abs+factors", {"factor_combine": "concat", "factor_dim": 4}),
}
ISSUE3 = "abs,rel,dep,dep+rel,deplabel,deplabel+rel"
LABELS = ("nsubj", "obj", "det", "amod", "obl", "case", "nmod", "advmod", "cc", "conj", "punct",
          "compound", "mark", "aux")


@dataclass
class Setup:
    """What every scheme is run with."""

    device: torch.device
    d_model: int
    heads: int
    d_ff: int
    layers: int
    vocab: int
    src_len: int
    tgt_len: int
    batch_size: int
    n_batches: int
    decode_len: int
    treebank: list[Sentence] = field(default_factory=list)   # real trees instead of random ones
    corpus: list[list[Example]] = field(default_factory=list)  # real batches (--data)

    def model(self, name: str, examples: list[Example], seed: int = 1) -> TransformerNMT:
        """The system ``name`` with its tree features added to ``examples`` (options a scheme
        learns from the data, e.g. GPS's label vocabulary, learned first, as in training)."""
        spec, overrides = SYSTEMS[name]
        names = resolve(spec)
        schemes = learn_options(scheme_entries(names, overrides), examples)
        torch.manual_seed(seed)
        cfg = ModelConfig(self.vocab, self.vocab, d_model=self.d_model, n_heads=self.heads,
                          d_ff=self.d_ff, encoder_layers=self.layers, decoder_layers=self.layers,
                          schemes=schemes)
        model = TransformerNMT(cfg).to(self.device)
        for ex in examples:
            ex.feats, ex.tgt_feats = {}, {}
        add_features(examples, model.schemes.schemes)
        return model


def synthetic_side(length: int, index: int, rng: random.Random) -> tuple[list[str], Sentence]:
    """``length`` subwords, a third of the words split in two pieces, and a random labelled
    tree over the words."""
    subwords: list[str] = []
    while len(subwords) < length:
        split = rng.random() < 1 / 3 and len(subwords) < length - 1
        subwords += [f"a{index}@@", "b"] if split else ["w"]
    words = [w for w in subwords if not w.endswith("@@")]
    heads = random_heads(len(words), rng)
    labels = ["root" if h == 0 else rng.choice(LABELS) for h in heads]
    return subwords, Sentence(words, heads, labels)


def treebank_side(length: int, index: int, rng: random.Random, treebank: list[Sentence]
                  ) -> tuple[list[str], Sentence]:
    """``length`` subwords over real trees: treebank sentences (consecutive ones that fit, from a
    random one) joined into one line as ``depnmt parse`` joins them (later roots →
    ``parataxis`` of the first, ``sent_ids`` kept: GPS masks pairs across them), words split
    into two pieces until the line has exactly ``length`` subwords."""
    from depnmt.stages.parse.projection import join_roots
    start = rng.randrange(len(treebank))
    words: list[str] = []
    heads: list[int] = []
    labels: list[str] = []
    sent_ids: list[int] = []
    k = misses = 0
    while 2 * len(words) < length:      # a word splits into at most two pieces
        sent = treebank[(start + k) % len(treebank)]
        if len(words) + len(sent) > length:           # does not fit: try the next one
            k, misses = k + 1, misses + 1
            if misses > len(treebank):
                raise click.UsageError(f"--trees: no sentence of the treebank has at most "
                                       f"{length - len(words)} words (line length {length})")
            continue
        misses = 0
        heads += [h + len(words) if h else 0 for h in sent.heads]
        words += sent.words
        labels += [d.split(":")[0] for d in sent.deprels]
        sent_ids += [k] * len(sent)
        k += 1
    tree = join_roots(Sentence(words, heads, labels, None, sent_ids))
    split = set(rng.sample(range(len(words)), length - len(words)))
    subwords = [p for i in range(len(words))
                for p in ((f"a{index}@@", "b") if i in split else ("w",))]
    return subwords, tree


def synthetic_example(index: int, setup: Setup, rng: random.Random) -> Example:
    """``src_len − 1`` source subwords (+ EOS), ``tgt_len − 1`` target subwords, both with trees
    (random ones, or ``setup.treebank``'s)."""
    if setup.treebank:
        src_subwords, src_tree = treebank_side(setup.src_len - 1, index, rng, setup.treebank)
        tgt_subwords, tgt_tree = treebank_side(setup.tgt_len - 1, index, rng, setup.treebank)
    else:
        src_subwords, src_tree = synthetic_side(setup.src_len - 1, index, rng)
        tgt_subwords, tgt_tree = synthetic_side(setup.tgt_len - 1, index, rng)
    src = [rng.randrange(4, setup.vocab) for _ in src_subwords] + [EOS]
    tgt = [rng.randrange(4, setup.vocab) for _ in tgt_subwords]
    return Example(index, src, tgt, src_subwords, src_tree, tgt_subwords=tgt_subwords,
                   tgt_tree=tgt_tree)


def corpus_batches(data_dir: Path, trees_dir: Path | None, max_tokens: int, n_batches: int,
                   max_len: int = 250) -> tuple[list[list[Example]], int]:
    """The first ``n_batches`` batches of a real training epoch (``depnmt train``'s batcher,
    seed 1, epoch 1) of a ``depnmt bpe`` folder, with the source trees of a ``depnmt parse``
    folder, and the vocabulary size (the larger side's)."""
    from depnmt.core.manifest import load_manifest
    from depnmt.data.batches import TokenBatcher, attach_trees, example_lengths, load_parallel
    from depnmt.storage.modeldir import load_vocabs
    bpe = load_manifest(data_dir, "bpe", verify=False)
    src_vocab, tgt_vocab = load_vocabs(data_dir)
    examples, _ = load_parallel(data_dir / f"train.{bpe['src_lang']}",
                                data_dir / f"train.{bpe['tgt_lang']}", src_vocab, tgt_vocab,
                                max_len, drop_long=True)
    order = TokenBatcher(example_lengths(examples), max_tokens, seed=1).batches(1)[:n_batches]
    batches = [[examples[i] for i in idx] for idx in order]
    if trees_dir is not None:
        attach_trees([ex for b in batches for ex in b],
                     trees_dir / f"train.{bpe['src_lang']}.conllu", "src")
    return batches, max(len(src_vocab), len(tgt_vocab))


def check_corpus_trees(names: list[str], parsed_dir: Path | None) -> None:
    """With ``--data`` only source trees exist (``--parsed``): a usage error for schemes that
    need target trees, or source trees when ``--parsed`` is missing."""
    for name in names:
        spec, overrides = SYSTEMS[name]
        for scheme in build_schemes(scheme_entries(resolve(spec), overrides)):
            if scheme.needs_target_trees:
                raise click.UsageError(f"{name} needs target trees, which --data does not give "
                                       f"(leave it out, or use synthetic batches)")
            if parsed_dir is None and (scheme.needs_source_trees
                                       or scheme.trains_on_source_trees):
                raise click.UsageError(f"{name} needs source trees: add --parsed PARSE_DIR")


def make_examples(setup: Setup, seed: int = 7) -> list[Example]:
    """The same sentences for every scheme (the real batches' sentences with ``--data``)."""
    if setup.corpus:
        return [ex for batch in setup.corpus for ex in batch]
    rng = random.Random(seed)
    return [synthetic_example(i, setup, rng) for i in range(setup.batch_size * setup.n_batches)]


def make_batches(setup: Setup, examples: list[Example],
                 schemes: Sequence[Scheme] | None = None) -> list[Batch]:
    """The batches on the device, collated as training does with the model's ``schemes``
    (their batch features computed on the host)."""
    if setup.corpus:
        return [collate(batch, schemes).to(setup.device) for batch in setup.corpus]
    return [collate(examples[i:i + setup.batch_size], schemes).to(setup.device)
            for i in range(0, len(examples), setup.batch_size)]


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_step(model: TransformerNMT, optimizer: torch.optim.Optimizer, batch: Batch,
               dtype: torch.dtype | None = None) -> None:
    with autocast(batch.src.device, dtype):         # as depnmt.training.step does (None = fp32)
        logits, extras = model(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)
    loss, _ = label_smoothed_nll(logits, batch.tgt_out, 0.1)
    for aux in extras.losses.values():
        loss = loss + aux.weight * aux.value * batch.n_tokens      # as depnmt.training.step does
    (loss / batch.n_tokens).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def timed(step, device: torch.device, clock: str = "wall") -> float:
    """Seconds taken by ``step()``: wall-clock, or CPU seconds of this process (``cpu``: on a
    CPU shared with other jobs, time spent waiting for a core is not counted)."""
    now = CLOCKS[clock]
    sync(device)
    start = now()
    step()
    sync(device)
    return now() - start


def peak_bytes(model, optimizer, batch: Batch, device: torch.device,
               dtype: torch.dtype | None = None) -> int:
    """Peak memory of one training step (see the module docstring)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        train_step(model, optimizer, batch, dtype)
        sync(device)
        return torch.cuda.max_memory_allocated(device)
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import MemoryProfileTimeline
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True,
                 with_stack=True) as prof:
        train_step(model, optimizer, batch, dtype)
    _, sizes = MemoryProfileTimeline(prof._memory_profile())._coalesce_timeline(device)
    return max(sum(s) for s in sizes)


@torch.no_grad()
def decode(model: TransformerNMT, batch: Batch, steps: int) -> None:
    """Incremental greedy decoding of exactly ``steps`` steps (no early stop at EOS)."""
    model.eval()
    memory, src_mask = model.encode(batch.src, batch.src_feats)
    state = model.start_state(memory, src_mask)
    token = torch.full((batch.src.shape[0], 1), BOS, dtype=torch.long, device=batch.src.device)
    for _ in range(steps):
        token = model.decode(token, state, incremental=True)[:, -1:].argmax(-1)
    model.train()


@dataclass
class Run:
    """One scheme in one precision: its model, optimizer and batches, and what was measured."""

    scheme: str
    precision: str
    dtype: torch.dtype | None
    model: TransformerNMT
    optimizer: torch.optim.Optimizer
    batches: list[Batch]
    train: list[float] = field(default_factory=list)     # tokens/s of each timed step
    decode: list[float] = field(default_factory=list)    # sentences/s of each decoding run
    peak: int = 0


def new_run(setup: Setup, name: str, precision: str = "fp32") -> Run:
    examples = make_examples(setup)
    model = setup.model(name, examples)
    optimizer = adam(model.parameters(), 1e-4, setup.device)    # depnmt train's Adam
    dtype = train_precision(setup.device, precision)
    return Run(name, precision, dtype, model, optimizer,
               make_batches(setup, examples, model.schemes.schemes))


def measure(setup: Setup, runs: dict[str, Run], rounds: int, memory: bool = True,
            clock: str = "wall") -> None:
    """Interleaved: every batch is trained by every scheme in turn, so load changes on a shared
    machine hit all schemes alike; then decoding, then one profiled step for memory."""
    for run in runs.values():
        train_step(run.model, run.optimizer, run.batches[0], run.dtype)   # warm-up, untimed
    for _ in range(rounds):
        for i in range(setup.n_batches):
            for run in runs.values():
                batch = run.batches[i]
                seconds = timed(lambda: train_step(run.model, run.optimizer, batch, run.dtype),
                                setup.device, clock)
                run.train.append(batch.n_tokens / seconds)
        for run in runs.values():
            batch = run.batches[0]
            seconds = timed(lambda: decode(run.model, batch, setup.decode_len), setup.device,
                            clock)
            run.decode.append(batch.src.shape[0] / seconds)
    for run in runs.values():
        if memory:
            run.peak = peak_bytes(run.model, run.optimizer, run.batches[0], setup.device,
                                  run.dtype)


def summary(runs: dict[str, Run]) -> list[dict]:
    """Medians and ratios to the first run (abs in the first precision)."""
    base = next(iter(runs.values()))
    base_train, base_dec = statistics.median(base.train), statistics.median(base.decode)
    rows = []
    for name, r in runs.items():
        train, dec = statistics.median(r.train), statistics.median(r.decode)
        rows.append({"scheme": name, "system": system_name(r.scheme), "precision": r.precision,
                     "train_tok_s": round(train),
                     "train_ratio": round(train / base_train, 3),
                     "peak_mb": round(r.peak / 2 ** 20, 1) if base.peak else None,
                     "peak_ratio": round(r.peak / base.peak, 3) if base.peak else None,
                     "decode_sent_s": round(dec, 2), "decode_ratio": round(dec / base_dec, 3)})
    return rows


def system_name(name: str) -> str:
    spec, overrides = SYSTEMS[name]
    return spec + "".join(f" {k}={v}" for k, v in overrides.items())


def markdown(rows: list[dict]) -> str:
    def num(value, fmt: str = "") -> str:
        return "-" if value is None else format(value, fmt)

    out = ["| scheme | system | precision | train tok/s | × abs | peak MB | × abs | decode sent/s "
           "| × abs |", "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    out += [f"| {r['scheme']} | {r['system']} | {r['precision']} | {r['train_tok_s']} | "
            f"{r['train_ratio']:.2f} | "
            f"{num(r['peak_mb'])} | {num(r['peak_ratio'], '.2f')} | {r['decode_sent_s']} | "
            f"{r['decode_ratio']:.2f} |" for r in rows]
    return "\n".join(out)


@click.command(context_settings={"show_default": True})
@click.option("--device", default="auto", help="auto (CUDA when present), cpu or cuda")
@click.option("--schemes", default=ISSUE3,
              help=f"comma-separated, abs first; from: {', '.join(SYSTEMS)}")
@click.option("--d-model", default=256)
@click.option("--heads", default=4)
@click.option("--d-ff", default=1024)
@click.option("--layers", default=3, help="encoder and decoder layers")
@click.option("--vocab", default=8000)
@click.option("--src-len", default=100, help="source ids per sentence, incl. EOS")
@click.option("--tgt-len", default=100, help="target tokens per sentence, incl. EOS")
@click.option("--batch-size", default=40, help="sentences per batch (40 × 100 = 4000 tokens)")
@click.option("--steps", default=4, help="batches (timed training steps) per scheme and round")
@click.option("--rounds", default=3, help="passes over the batches (medians over all steps)")
@click.option("--decode-len", default=50, help="greedy decoding steps")
@click.option("--threads", default=0, help="torch CPU threads (0 = torch's default)")
@click.option("--trees", "trees_path", type=click.Path(exists=True, dir_okay=False),
              default=None, help="a CoNLL-U treebank (e.g. ../shared/data/ud/en_ewt-ud-test."
              "conllu): real trees and labels, consecutive sentences joined per line, instead "
              "of random trees with uniformly random labels (which make almost every GPS root "
              "path distinct: its worst case)")
@click.option("--data", "data_dir", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=None, help="a `depnmt bpe` folder: train on the first --steps batches of "
              "its training data as `depnmt train` batches them (--max-tokens; seed 1, epoch "
              "1) instead of synthetic ones (--vocab, --src-len, --tgt-len, --batch-size and "
              "--trees are then ignored)")
@click.option("--parsed", "parsed_dir", type=click.Path(exists=True, file_okay=False,
              path_type=Path), default=None, help="with --data: the `depnmt parse` folder of "
              "its source trees (needed by tree schemes)")
@click.option("--max-tokens", default=4096, help="with --data: padded tokens per batch")
@click.option("--precision", "precisions", default="fp32", help="comma-separated training "
              "precisions (auto, fp32, bf16, fp16; as `depnmt train --precision`): every scheme "
              "runs in each, interleaved, named SCHEME/PRECISION when there are several")
@click.option("--clock", type=click.Choice(list(CLOCKS)), default="wall", help="wall: elapsed "
              "time; cpu: CPU seconds of this process (on a loaded machine, with --threads 1, "
              "time spent waiting for a core is not counted)")
@click.option("--memory/--no-memory", default=True, help="measure peak memory (one profiled "
              "step per scheme; slow on CPU)")
@click.option("--markdown/--json", "as_markdown", default=True, help="output format")
def main(device: str, schemes: str, d_model: int, heads: int, d_ff: int, layers: int, vocab: int,
         src_len: int, tgt_len: int, batch_size: int, steps: int, rounds: int, decode_len: int,
         threads: int, trees_path: str | None, data_dir: Path | None, parsed_dir: Path | None,
         max_tokens: int, precisions: str, clock: str, memory: bool, as_markdown: bool) -> None:
    """Train each scheme on the same batches and compare it with abs."""
    if threads:
        torch.set_num_threads(threads)
    names = [n.strip() for n in schemes.split(",")]
    unknown = [n for n in names if n not in SYSTEMS]
    if unknown or names[0] != "abs":
        raise click.BadParameter(f"unknown {unknown}" if unknown else "abs must come first",
                                 param_hint="--schemes")
    from depnmt.stages.parse import read_conllu
    treebank = [t for t in read_conllu(trees_path) if len(t)] if trees_path else []
    corpus: list[list[Example]] = []
    if data_dir is not None:
        check_corpus_trees(names, parsed_dir)
        corpus, vocab = corpus_batches(data_dir, parsed_dir, max_tokens, steps)
        trees_path = f"{parsed_dir or 'none'} (real batches of {data_dir})"
    setup = Setup(resolve_device(device), d_model, heads, d_ff, layers, vocab, src_len, tgt_len,
                  batch_size, len(corpus) or steps, decode_len, treebank, corpus)
    kinds = [k.strip() for k in precisions.split(",")]
    if not set(kinds) <= set(PRECISIONS):
        raise click.BadParameter(f"{kinds} not in {PRECISIONS}", param_hint="--precision")
    runs = {name + (f"/{kind}" if len(kinds) > 1 else ""): new_run(setup, name, kind)
            for name in names for kind in kinds}
    measure(setup, runs, rounds, memory, clock)
    rows = summary(runs)
    machine = (f"{platform.processor() or platform.machine()}, torch {torch.__version__}, "
               f"{setup.device}, {torch.get_num_threads()} threads, {clock} clock, "
               f"trees: {trees_path or 'random'}")
    if as_markdown:
        print(f"<!-- {machine} -->\n{markdown(rows)}")
    else:
        print(json.dumps({"machine": machine, "rows": rows}))


if __name__ == "__main__":
    main()
