"""Decoding speed and BLEU of depnmt against CTranslate2 on the same model, interleaved.

One command: depnmt's own beam search (``--precision fp32``, ``auto`` and ``auto`` with
``--quantize int8``) and the model's CTranslate2 export (``float32`` and ``int8``; made with
``depnmt export`` unless ``--ct2`` names one) translate the same raw lines with the same
search (CTranslate2's rules: ``--length-penalty power --at-limit cut``, under which the outputs
are the same), batches and threads, each decoder in its own process (in one process with
torch, CTranslate2 ran at about half its speed). Reported,
each the median over ``--rounds`` rounds that alternate the systems (A B C D, B C D A, ...), so
that a change of the machine's load hits every system alike; a ratio to CTranslate2 is the
median over rounds of the two systems' speed ratio in the same round. Scheme ratios are
bracketed: each round runs abs, scheme 1, abs, scheme 2, abs, ..., and a scheme's ratio for
the round is the mean time of the abs runs just before and after it over its own time (the
median over rounds is reported):

* start-up: the wall time of ``depnmt translate < /dev/null`` (a fresh process: imports, model
  load; ``--ct2`` for the exports);
* steady state: sentences/s of ``translate_lines`` in one process once the model is loaded
  and warm (tokenizer, BPE, search, detokenizer: the same depnmt code around both decoders);
* BLEU of the outputs against ``--ref`` (sacrebleu, 13a);
* each ``--scheme-model`` (a tree scheme's model folder): decoding speed of pre-parsed input
  (features computed before timing) as a ratio to the abs model's in the same rounds;
* each ``--scheme`` NAME with ``--trees`` (the input's CoNLL-U, e.g. ``parse``'s
  ``test.en.conllu``): the abs model's weights grafted into a model of scheme NAME (its own
  parameters zero, DBSA's parse heads set to compute the heads they replace;
  :func:`grafted_model`), decoding the trees' words, as a ratio to the abs model decoding the
  same words. The work per step is the trained scheme's (same shapes, same code). Where the
  grafted parameters add nothing (relative tables, biases, embeddings, imitating parse heads)
  the outputs are the abs model's, so both decode the same steps; where they do not (PASCAL's
  scaled head, ``structural``'s depth encoding) they differ, which is why each row also gives
  the mean output length against abs and the share of lines whose output is abs's.

The load average and the CPU's vector flags are printed with the numbers. ``--device cuda``
runs depnmt's systems on the GPU (fp32 and auto; int8 is CPU-only) and CTranslate2's only
where its CUDA build sees the GPU (else their rows are left out and the ratio column reads
"-"); ``--max-tokens`` is the batch bound (``translate --max-tokens``) of every system, the
exports' and the grafts' included.

    python bench/decode.py -m work/multi30k-en-de/model -i work/multi30k-en-de/prepare/test.raw.en
    \\
        -r work/multi30k-en-de/prepare/test.raw.de --threads 2 --rounds 3
    python bench/decode.py -m work/multi30k-en-de/model -i work/multi30k-en-de/prepare/test.raw.en \
        --trees work/multi30k-en-de/parse/test.en.conllu --scheme abs+rel --scheme abs+dbsa-enc \
        --scheme-option dbsa_enc_layer=2
    python bench/decode.py -m MODEL -i SRC --tiny       # a few lines, one round (a smoke test)
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import click

FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8")


def cpu_flags() -> str:
    """The vector flags of /proc/cpuinfo that decide the kernels (bf16, int8)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    line = next((l for l in text.splitlines() if l.startswith("flags")), "")
    have = set(line.split())
    return " ".join(f for f in FLAGS if f in have) or "none of " + " ".join(FLAGS)


def device_name(device: str) -> str:
    """``cpu``, or the GPU's name and torch's CUDA version."""
    if device == "cpu":
        return "cpu"
    import torch
    name = torch.cuda.get_device_name(torch.device(device))
    return f"{device} ({name}, CUDA {torch.version.cuda})"


def startup_seconds(args: list[str], threads: int) -> float:
    """Wall time of ``depnmt translate ARGS < /dev/null`` in a fresh process."""
    return process_seconds(["-m", "depnmt.cli", "translate", *args], threads)


TORCH_IMPORT = ["-c", "import torch"]       # the floor of any start-up with torch


def process_seconds(args: list[str], threads: int) -> float:
    """Wall time of ``python ARGS < /dev/null`` in a fresh process."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "DEPNMT_NO_PROGRESS": "1"}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *args], stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, env=env)
    seconds = time.perf_counter() - start
    if done.returncode:
        raise click.ClickException(f"python {' '.join(args)}: {done.stderr.strip()}")
    return seconds


def bleu(hyps: list[str], refs: list[str] | None) -> str:
    if refs is None:
        return "-"
    import sacrebleu
    return f"{sacrebleu.corpus_bleu(hyps, [refs]).score:.2f}"


class System:
    """One decoder under test: how to start it (``translate`` flags) and, once loaded, a
    function that translates the lines (timed in steady state)."""

    def __init__(self, name: str, startup_args: list[str], load):
        self.name, self.startup_args, self.load = name, startup_args, load
        self.startups: list[float] = []
        self.speeds: list[float] = []
        self.ratios: list[float] = []      # to a base system, bracketed (run_bracketed)
        self.output: list[str] | None = None


def depnmt_system(model: Path, precision: str, search: dict, quantize: str = "none",
                  device: str = "cpu", max_tokens: int = 8000) -> System:
    def load():
        from depnmt.decoding.translate import Translator
        tr = Translator.from_model_dir(model, None, device, precision, quantize=quantize,
                                       max_tokens=max_tokens, **search)
        return lambda lines: list(tr.translate_lines(lines))
    int8 = quantize != "none"
    return System(f"depnmt {quantize}" if int8 else f"depnmt {precision}",
                  ["-m", str(model), "--precision", precision, "--device", device]
                  + (["--quantize", quantize] if int8 else []), load)


def ct2_system(export: Path, compute_type: str, search: dict, threads: int,
               device: str = "cpu", max_tokens: int = 8000) -> System:
    def load():
        from depnmt.decoding.ct2translate import CT2Translator
        tr = CT2Translator.from_dir(export, device, threads, compute_type=compute_type,
                                    max_tokens=max_tokens, **search)
        return lambda lines: list(tr.translate_lines(lines))
    return System(f"CTranslate2 {compute_type}", ["--ct2", str(export), "--device", device,
                                                 "--threads", str(threads)], load)


def ct2_on(device: str) -> bool:
    """Whether CTranslate2 is installed and runs on ``device`` (``cpu`` or ``cuda[:N]``)."""
    try:
        import ctranslate2
    except ImportError:
        return False
    return device == "cpu" or ctranslate2.get_cuda_device_count() > 0


def examples_system(model: Path, lines: list[str], search: dict, device: str = "cpu",
                    max_tokens: int = 8000) -> System:
    """Decoding only (examples prepared, parsed included, before timing): for scheme ratios."""
    def load():
        from depnmt.decoding.translate import Translator
        tr = Translator.from_model_dir(model, None, device, "auto", max_tokens=max_tokens,
                                       **search)
        words = [w for w in (tr.src_tokenizer.tokenize(l) for l in lines) if w]
        examples = tr.examples(words)
        return lambda _: tr.translate_examples(examples)
    return System(f"{model} (decoding)", [], load)


def grafted_model(model_dir: Path, scheme: str, examples: list, options: dict):
    """The abs model of ``model_dir`` as a model of ``scheme`` (e.g. ``abs+dep+rel``): every
    weight of the abs model copied, the scheme's own parameters zero (floating-point ones)
    except DBSA's bi-affine parse heads, which compute the heads they replace
    (:meth:`~depnmt.model.schemes.dbsa.DBSAModule.imitate`), its ``options`` (``train``'s,
    e.g. ``{"dbsa_enc_layer": 2}``) set and the others learned from ``examples`` (with trees)
    as training would. Returns the model and its
    :class:`~depnmt.model.transformer.ModelConfig`."""
    import torch

    from depnmt.core.errors import DepnmtError
    from depnmt.model.schemes.dbsa import DBSAModule
    from depnmt.model.schemes.names import parse_name
    from depnmt.model.schemes.registry import learn_options, scheme_entries
    from depnmt.model.transformer import ModelConfig, TransformerNMT
    from depnmt.storage.checkpoint import load_checkpoint
    from depnmt.storage.modeldir import default_checkpoint, read_config
    base = ModelConfig.from_dict(read_config(model_dir)["model"])
    if base.scheme_names != ["abs"]:
        raise click.ClickException(f"{model_dir}: --scheme grafts an abs model's weights; this "
                                   f"one is {'+'.join(base.scheme_names)}")
    name = parse_name(scheme)
    entries = learn_options(scheme_entries(name.components, {**options, **name.options}),
                            examples)
    cfg = ModelConfig(**{**base.to_dict(), "schemes": entries})
    try:
        model = TransformerNMT(cfg)
    except DepnmtError as exc:
        raise click.ClickException(f"--scheme {scheme}: {exc} (set it with --scheme-option)")
    state = load_checkpoint(default_checkpoint(model_dir))["model"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise click.ClickException(f"{scheme}: the abs weights {unexpected[:3]} have no place")
    own = model.state_dict()                 # tensors that share the parameters' storage
    with torch.no_grad():
        for name in missing:
            if own[name].is_floating_point():
                own[name].zero_()
    for part in model.schemes.parts:         # parse heads: compute the heads they replace
        if isinstance(part, DBSAModule) and not part.parse.deep:
            part.imitate((model.encoder if part.side == "src" else model.decoder)[part.layer]
                         .self_attn)
    return model, cfg


def grafted_translator(model_dir: Path, scheme: str, trees: list, search: dict,
                       options: dict, device: str = "cpu", max_tokens: int = 8000):
    """A Translator of the abs model grafted into ``scheme`` (:func:`grafted_model`; ``abs``:
    the model itself) on ``device``, batching as the abs model's (``max_tokens``)."""
    from depnmt.decoding.translate import Translator
    base = Translator.from_model_dir(model_dir, None, device, "auto", max_tokens=max_tokens,
                                     **search)
    if scheme == "abs":
        return base
    model, _ = grafted_model(model_dir, scheme, base.examples([t.words for t in trees],
                                                              list(trees)), options)
    return Translator(model.to(base.device), base.config, base.src_vocab, base.tgt_vocab,
                      base.segmenter, base.device, base.search_cfg, max_tokens=base.max_tokens,
                      amp=base.amp, batch_size=base.batch_size)


def grafted_system(model_dir: Path, scheme: str, trees: list, search: dict,
                   options: dict, device: str = "cpu", max_tokens: int = 8000) -> System:
    """Decoding only of ``trees``' words by :func:`grafted_translator`, features computed
    before timing."""
    def load():
        tr = grafted_translator(model_dir, scheme, trees, search, options, device, max_tokens)
        examples = tr.examples([t.words for t in trees], list(trees))
        return lambda _: tr.translate_examples(examples)
    return System(f"{scheme} (grafted)", [], load)


def option_value(text: str) -> tuple[str, object]:
    """``KEY=VALUE`` of ``--scheme-option``: VALUE as JSON where it parses (numbers, booleans),
    else the string."""
    import json
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise click.BadParameter(f"{text!r} is not KEY=VALUE", param_hint="--scheme-option")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def paired_ratio(system: System, base: System) -> float:
    """The median over rounds of ``system``'s speed / ``base``'s in the same round: a load
    that changes between rounds moves both."""
    return statistics.median(a / b for a, b in zip(system.speeds, base.speeds))


def bracketed_ratio(system: System) -> float:
    """The median of ``system``'s ratios to its base (1 for the base itself)."""
    return statistics.median(system.ratios) if system.ratios else 1.0


def mean_words(texts: list[str]) -> float:
    return statistics.mean(len(t.split()) for t in texts) if texts else 0.0


def rotated(items: list, r: int) -> list:
    return items[r % len(items):] + items[:r % len(items)]


def load_all(systems: list[System], lines: list[str]) -> dict[int, Callable]:
    """Each system loaded once and warmed up (allocators, kernels): its runner by ``id``."""
    runners = {}
    for s in systems:
        runners[id(s)] = s.load()
        runners[id(s)](lines[:8])
    return runners


def timed(system: System, runner: Callable, lines: list[str]) -> float:
    """Seconds ``system`` takes to translate ``lines`` (its speed and first output kept); the
    outputs are host strings, so a GPU's work is done when it returns."""
    start = time.perf_counter()
    out = runner(lines)
    seconds = time.perf_counter() - start
    system.speeds.append(len(lines) / seconds)
    system.output = system.output or [str(o) for o in out]
    return seconds


def worker_timed(system: System, command: list[str], lines: list[str], threads: int) -> float:
    """Seconds ``system`` takes to translate ``lines`` in a fresh process of this script
    (``command`` + ``--worker NAME``: loaded and warmed up there, then one pass timed), its
    speed and first output kept. Each decoder runs alone in its process: CTranslate2's and
    torch's thread pools in one process slowed CTranslate2 to about half its speed."""
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "DEPNMT_NO_PROGRESS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "result.json"
        done = subprocess.run([sys.executable, __file__, *command, "--worker", system.name,
                               "--worker-out", str(out)], capture_output=True, text=True,
                              env=env)
        if done.returncode:
            raise click.ClickException(f"{system.name}: {done.stderr.strip()}")
        result = json.loads(out.read_text(encoding="utf-8"))
    system.speeds.append(len(lines) / result["seconds"])
    system.output = system.output or result["output"]
    return result["seconds"]


def run_worker(system: System, lines: list[str], out: Path) -> None:
    """``--worker``: load ``system``, warm it up, time one pass over ``lines``; write
    ``{"seconds", "output"}`` to ``out``."""
    runner = system.load()
    runner(lines[:8])
    start = time.perf_counter()
    output = [str(o) for o in runner(lines)]
    seconds = time.perf_counter() - start
    out.write_text(json.dumps({"seconds": seconds, "output": output}), encoding="utf-8")


def run_rounds(systems: list[System], command: list[str], lines: list[str], rounds: int,
               threads: int) -> list[float]:
    """Time the systems, each in its own process (:func:`worker_timed`), in rotated order each
    round (start-up first); returns the seconds of ``python -c "import torch"`` timed at the
    start of each round."""
    torch_imports = []
    for r in range(rounds):
        torch_imports.append(process_seconds(TORCH_IMPORT, threads))
        for s in rotated(systems, r):
            s.startups.append(startup_seconds(s.startup_args, threads))
            worker_timed(s, command, lines, threads)
    return torch_imports


def run_bracketed(base: System, others: list[System], runners: dict, lines: list[str],
                  rounds: int) -> None:
    """Each round ``base``, then every other system (rotated order) each followed by ``base``
    again: a system's ratio for the round is base's mean time of the runs just before and
    after it over its own time, so that a load that drifts while they run moves both."""
    for r in range(rounds):
        before = timed(base, runners[id(base)], lines)
        for s in rotated(others, r):
            own = timed(s, runners[id(s)], lines)
            after = timed(base, runners[id(base)], lines)
            s.ratios.append((before + after) / 2 / own)
            before = after


def export_model(model: Path, out: Path) -> Path:
    done = subprocess.run([sys.executable, "-m", "depnmt.cli", "export", "-m", str(model),
                           "-o", str(out)], capture_output=True, text=True)
    if done.returncode:
        raise click.ClickException(f"depnmt export: {done.stderr.strip()}")
    return out


@click.command()
@click.option("-m", "--model", "model_dir", type=click.Path(path_type=Path, file_okay=False),
              required=True, help="the abs model folder")
@click.option("--ct2", "ct2_dir", type=click.Path(path_type=Path, file_okay=False),
              help="its CTranslate2 export [default: made with depnmt export in a temp folder]")
@click.option("-i", "--input", "input_path", type=click.Path(path_type=Path, dir_okay=False),
              required=True, help="raw source lines")
@click.option("-r", "--ref", "ref_path", type=click.Path(path_type=Path, dir_okay=False),
              help="raw references (BLEU); without: no BLEU")
@click.option("--scheme-model", "scheme_models", multiple=True,
              type=click.Path(path_type=Path, file_okay=False),
              help="a tree scheme's model folder (repeatable): speed as a ratio to abs")
@click.option("--scheme", "grafts", multiple=True, metavar="NAME",
              help="a scheme (repeatable) to graft the abs model's weights into: its decoding "
                   "speed as a ratio to abs on --trees' words")
@click.option("--scheme-option", "scheme_options", multiple=True, metavar="KEY=VALUE",
              help="a train option of the grafted schemes (repeatable), e.g. dbsa_enc_layer=2")
@click.option("--trees", "trees_path", type=click.Path(path_type=Path, dir_okay=False),
              help="CoNLL-U trees of the input's sentences (for --scheme)")
@click.option("--lines", type=int, default=300, show_default=True)
@click.option("--rounds", type=int, default=3, show_default=True)
@click.option("--threads", type=int, default=2, show_default=True,
              help="torch threads = CTranslate2 intra_threads")
@click.option("--beam", type=int, default=4, show_default=True)
@click.option("--max-tokens", type=int, default=8000, show_default=True,
              help="the batch bound of every system, source subwords x beam "
                   "(translate --max-tokens)")
@click.option("--device", default="cpu", show_default=True,
              help="cpu or cuda[:N]: depnmt's systems (and CTranslate2's, where its CUDA build "
                   "is installed) decode there; int8 is CPU-only")
@click.option("--tiny", is_flag=True, help="8 lines, one round: a smoke test of the bench")
@click.option("--worker", hidden=True, help="time this one system here (run_rounds)")
@click.option("--worker-out", type=click.Path(path_type=Path), hidden=True)
def main(model_dir, ct2_dir, input_path, ref_path, scheme_models, grafts, scheme_options,
         trees_path, lines, rounds, threads, beam, max_tokens, device, tiny, worker,
         worker_out):
    import torch
    if grafts and trees_path is None:
        raise click.UsageError("--scheme needs --trees (the input's CoNLL-U)")
    if tiny:
        lines, rounds = 8, 1
    torch.set_num_threads(threads)
    # CTranslate2's search rules (|Y|^alpha, hypotheses cut at the length limit) for every
    # system: depnmt then writes the same lines as the export, and speeds compare like for like
    search = dict(beam=beam, at_limit="cut", length_penalty="power")
    src = input_path.read_text(encoding="utf-8").splitlines()[:lines]
    refs = ref_path.read_text(encoding="utf-8").splitlines()[:lines] if ref_path else None
    cpu, ct2 = device == "cpu", ct2_on(device)
    with tempfile.TemporaryDirectory() as tmp:
        systems = [depnmt_system(model_dir, "fp32", search, device=device, max_tokens=max_tokens),
                   depnmt_system(model_dir, "auto", search, device=device, max_tokens=max_tokens)]
        if cpu:
            systems.append(depnmt_system(model_dir, "auto", search, quantize="int8",
                                         max_tokens=max_tokens))
        ct2_float32 = None                                                # the ratios' base
        if ct2:
            export = ct2_dir or export_model(model_dir, Path(tmp) / "ct2")
            ct2_float32 = ct2_system(export, "float32", search, threads, device, max_tokens)
            systems += [ct2_float32, ct2_system(export, "int8" if cpu else "float16", search,
                                                threads, device, max_tokens)]
        if worker:
            return run_worker(next(s for s in systems if s.name == worker), src, worker_out)
        command = ["-m", str(model_dir), "-i", str(input_path), "--lines", str(len(src)),
                   "--threads", str(threads), "--beam", str(beam), "--max-tokens",
                   str(max_tokens), "--device", device] + (["--ct2", str(export)] if ct2 else [])
        schemes = [examples_system(m, src, search, device, max_tokens)
                   for m in (model_dir, *scheme_models)]
        grafted = []
        if grafts:
            from depnmt.stages.parse import read_conllu
            trees = list(read_conllu(trees_path))[:lines]
            options = dict(option_value(o) for o in scheme_options)
            grafted = [grafted_system(model_dir, g, trees, search, options, device,
                                      max_tokens)
                       for g in ("abs", *grafts)]
        runners = load_all((schemes if scheme_models else []) + grafted, src)
        torch_imports = run_rounds(systems, command, src, rounds, threads)
        for group in (schemes if scheme_models else [], grafted):
            if group:
                run_bracketed(group[0], group[1:], runners, src, rounds)
    click.echo(f"{len(src)} lines, beam {beam}, {threads} threads, {rounds} rounds, "
               f"max tokens {max_tokens}, device "
               f"{device_name(device)}; load average "
               f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}; CPU flags: {cpu_flags()}; "
               f"python -c \"import torch\": {statistics.median(torch_imports):.2f} s"
               + ("" if ct2 else "; CTranslate2: not installed for this device"))
    click.echo("| system | start-up s | steady sentences/s | × CTranslate2 float32 | BLEU | "
               "sentences/s, each round |")
    click.echo("|---|---|---|---|---|---|")
    for s in systems:
        speed = statistics.median(s.speeds)
        ratio = f"{paired_ratio(s, ct2_float32):.2f}" if ct2_float32 else "-"
        click.echo(f"| {s.name} | {statistics.median(s.startups):.2f} | {speed:.1f} | "
                   f"{ratio} | {bleu(s.output, refs)} | "
                   f"{' '.join(f'{x:.1f}' for x in s.speeds)} |")
    if scheme_models:
        click.echo("| scheme model | decoding sentences/s | × abs |")
        click.echo("|---|---|---|")
        for s in schemes:
            speed = statistics.median(s.speeds)
            click.echo(f"| {s.name} | {speed:.1f} | {bracketed_ratio(s):.2f} |")
    if grafted:
        abs_len = mean_words(grafted[0].output)
        click.echo("| scheme (abs weights grafted) | decoding sentences/s | × abs | "
                   "mean output words × abs | lines as abs | × abs, each round |")
        click.echo("|---|---|---|---|---|---|")
        for s in grafted:
            speed = statistics.median(s.speeds)
            same = sum(a == b for a, b in zip(s.output, grafted[0].output)) / len(s.output)
            click.echo(f"| {s.name} | {speed:.1f} | {bracketed_ratio(s):.2f} | "
                       f"{mean_words(s.output) / abs_len:.2f} | {100 * same:.0f} % | "
                       f"{' '.join(f'{r:.2f}' for r in s.ratios) or '-'} |")


if __name__ == "__main__":
    main()
