"""One prepared command that shows what depnmt does on a GPU: parity with the CPU, training in
every precision, resumption, DDP, decoding and speed. Prints one table, one PASS/FAIL row per
check with the measured value; exit status 1 when any check fails.

    python bench/gpu_check.py --out gpu-check.md          # one H200: 150 s
    python bench/gpu_check.py --only speed --peak-tflops 989
    python bench/gpu_check.py --device cpu --tiny          # the same checks on the CPU, seconds

Run it from a checkout (it puts the repository on ``sys.path``; depnmt need not be installed).
Besides torch, click, rich, sacrebleu and numpy it needs ``subword-nmt`` with ``tqdm`` (the
shipped data is BPE'd with codes, which ``train`` copies into the model and ``translate``
applies) and ``rich-click`` (depnmt's commands), all pure Python (``CHECK_WHEELS``); the
train/translate paths import no tokenizer or parser package (sacremoses, spaCy, stanza): the shipped
data is tokenized with the ``keep`` tokenizer, English→Japanese, whose
Japanese side is detokenized by joining, and translated from pre-parsed CoNLL-U.

Data: ``bench/gpu_check_data/`` holds 240/30/100 train/dev/test pairs of small_parallel_enja
(En→Ja) through ``depnmt prepare`` (keep tokenizers), ``depnmt parse`` (spaCy
en_core_web_sm, GiNZA) and ``depnmt bpe --merges 400``, gzipped; the manifests name their
folder ``@DATA@``, which :func:`unpack` replaces with where it unpacks them.

Sections (``--only``):

* ``parity`` — every registered scheme alone, dropout 0, one batch of 16 training pairs, the
  same initial weights on the CPU and the device, fp32: largest Δ logit ≤ 1e-4, the largest
  gradient error ‖g_dev − g_cpu‖ / max(‖g_cpu‖, 1e-3 ‖G_cpu‖) over the parameters ≤ 1e-3
  (G: all gradients; the floor is for gradients that are zero but for rounding), and every
  parameter gets a gradient on the device (loss: label-smoothed NLL plus the schemes' auxiliary
  losses, as ``depnmt train``). Then the attention path with extra head dimensions
  (``depnmt.model.attention``; ``FUSED_SYSTEMS``: dep's depth terms, GPS's syntax logits, both),
  on the device, its batch collated with the model's schemes as training does: the device
  takes it by itself (CUDA; the CPU keeps its paths and is forced to it here), and against the
  explicit path with the same weights, fp32: Δ logit ≤ 1e-4 and gradient error ≤ 1e-3; bf16
  autocast: its logits' and mean gradient error against fp32 at most 2 × the explicit path's
  + 0.01 (the two round differently). The same rows for the label-bins kernel
  (``depnmt.model.kernels``; ``KERNEL_SYSTEMS``: abs+rel, abs+rel with key terms only,
  abs+dep+rel), which every self-attention layer of both sides takes by itself on CUDA (a
  failed row where it does not run: a GPU before compute capability 8.0, Triton before 3.5);
  on the CPU Triton's interpreter runs it (``TRITON_INTERPRET=1``, set by the check; an INFO
  row without Triton 3.9 or newer), abs+dep+rel only with ``--tiny``.
* ``train`` — ``depnmt train`` (the click command, in this process) for every scheme in fp32,
  bf16 and fp16 (fp16 needs CUDA: skipped on the CPU): 30 updates with finite losses; the same
  run stopped after 15 and resumed to 30 ends within 1e-3 of the uninterrupted run's logged
  loss; with fp16, the loss scale at the end is > 1.
* ``ddp`` — ``torchrun`` on the loopback (one process on a GPU, four runs at a time; two gloo
  processes on the CPU; started first, they run beside ``parity`` and ``train``) running
  ``depnmt train --update-freq 2`` for every scheme and the ablation
  ``abs+deplabel+rel --rel-terms key --deplabel-terms key``: finite losses; the value
  says how many processes the run counted.
* ``translate`` — every scheme's fp32 model from ``train``, greedy and beam 4, 100 test lines
  (pre-parsed, ``Translator.translate_words``) on the device and on the CPU in fp32: ≥ 99 % of
  the lines identical; the default ``--max-tokens`` a Translator takes on the device (32,000 on
  CUDA, 8,000 on the CPU).
* ``speed`` — Transformer-base (6+6 layers, d_model 512, 8 heads, d_ff 2048, vocabulary 32k,
  batches of 250 synthetic pairs of 100 + 100 tokens = 25k target tokens, halved until they fit)
  in bf16, abs, rel, dep+rel, dep, rel with key terms only, gps, pascal, structural and
  dbsa-enc trained side by side on the same batches, interleaved (``bench/schemes.py``), 8 rounds
  (dep and gps attend through the extra head dimensions, rel, dep+rel and rel-key through the
  label-bins kernel; ``EXPLICIT_RUNS``, the same systems kept on the explicit path, are rows of
  their own: the A/B of the two paths):
  target tokens/s, model FLOP utilisation (MFU) and peak memory
  (``torch.cuda.max_memory_allocated``); goals on CUDA: abs MFU ≥ 25 % (≥ 20 % on an H100),
  every tree scheme ≥ 0.85 × abs tokens/s, and ≥ 0.9 × for those that add only key terms or
  logit biases (rel-key, gps, pascal, structural, dbsa-enc). On the CPU the speed rows are
  informative only.

* ``loader`` — the speed model trained by ``depnmt train`` itself, through the real data path
  (the binary cache, data-loader workers computing tree features, pinned copies;
  ``bench/loader_speed.py``) on 40,000 synthetic pairs made from the shipped data (joint BPE
  8,000, ≤ 25,000 tokens a batch, 60 updates): abs, abs+dep+rel and abs+gps, each one's
  tokens/s, MFU (with the corpus's vocabulary and sentence lengths) and ratio to abs, the GPU's
  busy share (``nvidia-smi``), and the share of the loop's time spent waiting for batches
  (goal on CUDA: ≤ 5 %, and abs's MFU goal as in ``speed``). Then abs (``COMPILED_RUNS``;
  one run, for the check's time) with ``train --compile dynamic``: tokens/s over the updates after the
  first record's 10 (the warm-up, which compiles: inductor's compile time is in the row's
  wall time, not its tokens/s), MFU, the ratios to the uncompiled abs and the same scheme, and
  the graphs compiled (in all and during the measured updates), recompiles and graph breaks;
  on CUDA a check that the measured updates compiled at most 2 graphs (the forward pass and
  the loss once more for a batch of one sentence). On the CPU they use the ``eager`` backend
  (``$DEPNMT_COMPILE_BACKEND``; informative only); with a torch too old for ``--compile`` the
  row says so (INFO). A compiled run still going after ``COMPILED_TIMEOUT_S`` (300 s) is
  killed and its row fails.

``--tiny`` (what ``tests/unit/test_gpu_check.py`` runs with ``--device cpu``): 2 updates
(resumed after 1), abs alone in every precision and resumed (the other schemes: fp32, once),
only the ablation under torchrun, 5 lines to decode, a 2+2-layer d_model 32 speed model
(``loader``: abs and abs+dep+rel, 300 pairs, 3 updates; abs compiled).

MFU counts the FLOPs of the abs Transformer (the extra work of a tree scheme is not counted, so
its MFU is its speed relative to abs), as in the PaLM paper's appendix B: 6 FLOPs per
matrix-multiply parameter per token it is applied to (forward + backward), plus the attention
matrices, 12 · d_model · (keys) per query token and layer (QKᵀ and AV, forward + backward,
every key counted, causal masking not subtracted). With S source and T target tokens per
sentence, per batch of B sentences::

    FLOPs = 6 · B · (S · N_src + T · N_tgt)
            + 12 · d · B · (L_e · S · S + L_d · T · T + L_d · T · S)
    N_src = L_e · (4d² + 2 d d_ff) + L_d · 2d²        (encoder; the cross-attention K, V)
    N_tgt = L_d · (6d² + 2 d d_ff) + d · V             (decoder; the output projection)

(embedding look-ups are not multiplies and are not counted). MFU = FLOPs / step time / peak,
the peak being the chip's dense bf16 tensor rate: 989 TFLOP/s for H100 SXM and H200, 756 for
H100 PCIe, 312 for A100, by ``torch.cuda.get_device_name``; ``--peak-tflops`` for others.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import importlib.abc
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "bench")]
os.environ.setdefault("DEPNMT_NO_PROGRESS", "1")

import click  # noqa: E402
import torch  # noqa: E402

DATA = REPO / "bench" / "gpu_check_data"
SECTIONS = ("parity", "train", "ddp", "translate", "speed", "loader")
SPEED_SYSTEMS = ("abs", "rel", "dep+rel", "dep", "rel-key", "gps", "pascal", "structural",
                 "dbsa-enc")
# speed systems also trained on the explicit attention path (DEPNMT_ATTENTION=explicit), rows
# "NAME/explicit": the A/B of the fused paths (depnmt.model.attention): the extra head
# dimensions (dep, gps) and the label-bins kernel (rel, dep+rel, rel-key)
EXPLICIT_RUNS = ("dep", "gps", "rel", "dep+rel", "rel-key")
# systems whose attention terms have the extra-dimensions form, checked against the explicit
# path in the parity section
FUSED_SYSTEMS = ("abs+dep", "abs+gps", "abs+gps+dep")
# systems with a relative term of pair labels (Shaw's j − i), which the label-bins kernel
# (depnmt.model.kernels) takes on CUDA, checked against the explicit path: row name -> options
KERNEL_SYSTEMS = {"abs+rel": {}, "abs+rel-key": {"rel_terms": "key"}, "abs+dep+rel": {}}
# loader systems also trained with `train --compile dynamic`, rows "NAME --compile dynamic"
COMPILED_RUNS = ("abs",)
COMPILED_TIMEOUT_S = 300    # a compiled run past it is killed and its row fails: GPU time is short
ABLATIONS = {"deplabel+rel-key": ["--scheme", "abs+deplabel+rel", "--rel-terms", "key",
                                  "--deplabel-terms", "key"]}
# dense bf16 tensor TFLOP/s by a part of torch.cuda.get_device_name (first match wins)
PEAK_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.0), ("H200", 989.0), ("GH200", 989.0),
               ("A100", 312.0))
# goals on CUDA: abs's MFU (an H100 has less memory bandwidth per FLOP than an H200), and each
# tree scheme's tokens/s as a ratio to abs's; schemes that add only key terms or logit biases
# (no value term) have the higher one
GOAL_MFU, GOAL_MFU_H100 = 0.25, 0.20
GOAL_RATIO, GOAL_RATIO_KEY_OR_BIAS = 0.85, 0.90
GOAL_WAIT = 0.05        # the loop's wait for batches, a share of its time (real loader)
KEY_OR_BIAS = ("rel-key", "gps", "pascal", "structural", "dbsa-enc")
LOGIT_TOL, GRAD_TOL, RESUME_TOL, SAME_LINES = 1e-4, 1e-3, 1e-3, 0.99


@dataclass
class Row:
    """One check: PASS, FAIL (makes the exit status 1) or INFO (measured, no threshold)."""

    section: str
    check: str
    value: str
    status: str


@dataclass
class Plan:
    """Sizes of one run (``--tiny`` shrinks the counts, not the checks)."""

    device: torch.device
    work: Path
    layers: int = 2
    d_model: int = 64
    heads: int = 4
    d_ff: int = 128
    steps: int = 30
    ddp_steps: int = 10
    ddp_procs: int = 1
    lines: int = 100
    parity_pairs: int = 16
    # schemes trained in every precision and resumed (None: all; the others: fp32, once) and
    # schemes run under torchrun (None: all), besides the ablations
    full_schemes: tuple[str, ...] | None = None
    ddp_schemes: tuple[str, ...] | None = None
    # KERNEL_SYSTEMS checked (on the CPU Triton's interpreter runs them: slow)
    kernel_systems: tuple[str, ...] = tuple(KERNEL_SYSTEMS)
    speed: dict = field(default_factory=lambda: dict(
        d_model=512, heads=8, d_ff=2048, layers=6, vocab=32000, src_len=100, tgt_len=100,
        batch_size=250, n_batches=2, decode_len=2, rounds=8))
    # the real data path (bench/loader_speed.py): the speed model, 25k tokens a batch
    loader: dict = field(default_factory=lambda: dict(
        schemes=("abs", "abs+dep+rel", "abs+gps"), pairs=40000, merges=8000,
        steps=60, max_tokens=25000, workers=-1, compiled=COMPILED_RUNS))
    peak_tflops: float | None = None
    rows: list[Row] = field(default_factory=list)

    def add(self, section: str, check: str, value: str, ok: bool | None) -> None:
        """``ok``: True PASS, False FAIL, None INFO."""
        status = "INFO" if ok is None else "PASS" if ok else "FAIL"
        self.rows.append(Row(section, check, value, status))
        print(f"  {status:4}  {section:9} {check}: {value}", file=sys.stderr, flush=True)

    def full(self, name: str) -> bool:
        """Whether scheme ``name`` trains in every precision and is resumed."""
        return self.full_schemes is None or name in self.full_schemes

    @property
    def arch_flags(self) -> list[str]:
        return ["--layers", str(self.layers), "--d-model", str(self.d_model), "--heads",
                str(self.heads), "--d-ff", str(self.d_ff)]


def tiny_plan(device: torch.device, work: Path) -> Plan:
    """``--tiny``: the same checks with a few updates, lines and a tiny speed model; only abs
    is trained in bf16 and resumed, and only the ablation runs under torchrun."""
    return Plan(device, work, steps=2, ddp_steps=2, ddp_procs=2, lines=5, parity_pairs=8,
                full_schemes=("abs",), ddp_schemes=(), kernel_systems=("abs+dep+rel",),
                speed=dict(d_model=32, heads=4, d_ff=64, layers=2, vocab=1000, src_len=16,
                           tgt_len=16, batch_size=8, n_batches=1, decode_len=1, rounds=1),
                loader=dict(schemes=("abs", "abs+dep+rel"), pairs=300, merges=300, steps=3,
                            max_tokens=512, workers=-1, compiled=("abs",)))


# -- data and schemes ------------------------------------------------------------------------

def unpack(dest: Path) -> Path:
    """The shipped prepare/parse/bpe folders, gunzipped under ``dest``, their manifests pointing
    at ``dest``. Returns ``dest``."""
    for stage in ("prepare", "parse", "bpe"):
        (dest / stage).mkdir(parents=True, exist_ok=True)
        for path in (DATA / stage).iterdir():
            if path.suffix == ".gz":
                (dest / stage / path.stem).write_bytes(gzip.decompress(path.read_bytes()))
            else:
                text = path.read_text(encoding="utf-8").replace("@DATA@", str(dest))
                (dest / stage / path.name).write_text(text, encoding="utf-8")
    return dest


def scheme_names() -> list[str]:
    """Every scheme the registry offers, in registration order."""
    from depnmt.model.schemes.registry import SCHEMES, load_builtin_schemes
    load_builtin_schemes()
    return list(SCHEMES)


def layer_overrides(name: str, layers: int) -> dict[str, int]:
    """Options of scheme ``name`` that name one layer (DBSA's ``--dbsa-enc-layer``, 1-based)
    set to the last layer, so that they fit a model of ``layers`` layers."""
    from depnmt.model.schemes.registry import SCHEMES
    return {f.name: layers for f in fields(SCHEMES[name].Options)
            if f.name.endswith("_layer") and isinstance(f.default, int)}


def scheme_flags(name: str, layers: int) -> list[str]:
    """``depnmt train`` flags that choose scheme ``name`` alone (with its layer options),
    spelled as today's scheme names (``dep`` alone: ``noabs+dep``)."""
    from depnmt.core.schemename import scheme_name
    flags = ["--scheme", scheme_name([{"name": name, "options": {}}])]
    for option, value in layer_overrides(name, layers).items():
        flags += ["--" + option.replace("_", "-"), str(value)]
    return flags


def finite(value: float) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def failure(exc: BaseException) -> str:
    """One line naming an exception."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[-1] if text else ''}"[:160]


# -- parity ----------------------------------------------------------------------------------

def parity_examples(data: Path, pairs: int):
    """The first ``pairs`` training pairs with their source and target trees, and the vocabulary
    sizes."""
    from depnmt.data.batches import attach_trees, load_parallel
    from depnmt.storage.modeldir import load_vocabs
    src_vocab, tgt_vocab = load_vocabs(data / "bpe")
    examples, _ = load_parallel(data / "bpe/train.en", data / "bpe/train.ja", src_vocab,
                                tgt_vocab, 250)
    examples = examples[:pairs]
    attach_trees(examples, data / "parse/train.en.conllu", "src")
    attach_trees(examples, data / "parse/train.ja.conllu", "tgt")
    return examples, len(src_vocab), len(tgt_vocab)


def loss_and_grads(model, batch) -> tuple[torch.Tensor, dict]:
    """fp32 logits ``[B, T, V]`` on the CPU and each parameter's gradient (None if it got
    none) after one backward pass of the training objective."""
    from depnmt.model.transformer import label_smoothed_nll
    model.zero_grad(set_to_none=True)
    logits, extras = model(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)
    loss, _ = label_smoothed_nll(logits, batch.tgt_out, 0.1)
    for aux in extras.losses.values():
        loss = loss + aux.weight * aux.value * batch.n_tokens
    (loss / batch.n_tokens).backward()
    grads = {n: None if p.grad is None else p.grad.detach().float().cpu()
             for n, p in model.named_parameters() if p.requires_grad}
    return logits.detach().float().cpu(), grads


def gradient_errors(ref: dict, grads: dict) -> dict[str, float]:
    """Each parameter's gradient error ``‖g_dev − g_cpu‖ / max(‖g_cpu‖, 1e-3 · ‖G_cpu‖)``
    (``G``: all of the gradients together). The floor is for gradients that are zero in exact
    arithmetic and rounding noise in floats, e.g. every key projection's bias (softmax is
    invariant to adding ``q · b^K`` to all of a query's logits): their ‖g‖ is ~1e-9 of ``G``,
    and the plain relative error of two devices' noise is of order 1."""
    pairs = {n: (ref[n], g) for n, g in grads.items()
             if g is not None and ref.get(n) is not None}
    total = math.sqrt(sum(float(r.norm()) ** 2 for r, _ in pairs.values()))
    return {n: float((g - r).norm()) / max(float(r.norm()), 1e-3 * total, 1e-12)
            for n, (r, g) in pairs.items()}


def check_parity(plan: Plan, data: Path) -> None:
    """Every scheme: the same model and batch on the CPU and ``plan.device`` in fp32."""
    from depnmt.data.batches import add_features, collate
    from depnmt.model.schemes.registry import learn_options, scheme_entries
    from depnmt.model.transformer import ModelConfig, TransformerNMT
    examples, n_src, n_tgt = parity_examples(data, plan.parity_pairs)
    for name in scheme_names():
        try:     # the registered component alone (its name is no scheme name to parse)
            entries = learn_options(scheme_entries([name], layer_overrides(name, plan.layers)),
                                    examples)
            cfg = ModelConfig(n_src, n_tgt, d_model=plan.d_model, n_heads=plan.heads,
                              d_ff=plan.d_ff, encoder_layers=plan.layers,
                              decoder_layers=plan.layers, dropout=0.0, attention_dropout=0.0,
                              schemes=entries)
            torch.manual_seed(1)
            cpu_model = TransformerNMT(cfg)
            dev_model = copy.deepcopy(cpu_model).to(plan.device)
            for ex in examples:
                ex.feats, ex.tgt_feats = {}, {}
            add_features(examples, cpu_model.schemes.schemes)
            batch = collate(examples)
            ref_logits, ref_grads = loss_and_grads(cpu_model, batch)
            logits, grads = loss_and_grads(dev_model, batch.to(plan.device))
        except Exception as exc:  # noqa: BLE001 - a broken scheme is a failed row
            plan.add("parity", name, failure(exc), False)
            continue
        dlogit = float((logits - ref_logits).abs().max())
        missing = [n for n, g in grads.items() if g is None]
        errors = gradient_errors(ref_grads, grads)
        worst_name = max(errors, key=errors.get, default="")
        worst = errors.get(worst_name, 0.0)
        value = (f"Δ logit {dlogit:.1e}, grad error {worst:.1e} ({worst_name}), "
                 f"{len(grads) - len(missing)}/{len(grads)} parameters with a gradient"
                 + (f" (none: {', '.join(missing[:3])})" if missing else ""))
        plan.add("parity", f"{name} fp32 {plan.device} vs cpu", value,
                 dlogit <= LOGIT_TOL and worst <= GRAD_TOL and not missing)
    for spec in FUSED_SYSTEMS:
        try:
            check_fused(plan, FusedPath(spec, {"gps_layer": "all"}), examples, n_src, n_tgt)
        except Exception as exc:  # noqa: BLE001
            plan.add("parity", f"{spec}: extra head dimensions", failure(exc), False)
    for name in plan.kernel_systems:
        path = FusedPath(name.partition("-")[0], KERNEL_SYSTEMS[name], "_attend_kernel",
                         "label-bins kernel", name)
        try:
            if kernel_runs(plan, path):
                check_fused(plan, path, examples, n_src, n_tgt)
        except Exception as exc:  # noqa: BLE001
            plan.add("parity", f"{name}: label-bins kernel", failure(exc), False)


@dataclass
class FusedPath:
    """A system checked on a fused attention path against the explicit one: its scheme name
    and options, the ``MultiHeadAttention`` method that takes the path, the path's name in the
    rows, and the system's name there."""

    spec: str
    options: dict
    method: str = "_attend_extended"
    what: str = "extra head dimensions"
    name: str = ""

    def __post_init__(self):
        self.name = self.name or self.spec


def kernel_runs(plan: Plan, path: FusedPath) -> bool:
    """Whether the label-bins kernel runs on the device (on CUDA a failed row if not: the GPU
    or its Triton is too old; on the CPU an INFO row unless Triton's interpreter runs it)."""
    from depnmt.model import kernels
    if kernels.runs_on(plan.device):
        return True
    version = ".".join(map(str, kernels.triton_version() or ())) or "none"
    cuda = plan.device.type == "cuda"
    where = (f"compute capability {torch.cuda.get_device_capability(plan.device)}, "
             f"{kernels.probe(plan.device) or 'a tiny attention ran'}" if cuda
             else f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET', '')}")
    plan.add("parity", f"{path.name}: label-bins kernel ({plan.device})",
             f"does not run here: Triton {version}, {where}", False if cuda else None)
    return False


@contextlib.contextmanager
def attention_path(name: str):
    """``DEPNMT_ATTENTION=name`` meanwhile (``auto``, ``fused`` or ``explicit``)."""
    import depnmt.model.attention as attention
    before, attention.attention_path = attention.attention_path, name
    try:
        yield
    finally:
        attention.attention_path = before


def pinned_to(model, name: str):
    """``model`` whose forward passes attend by path ``name`` (the backward pass follows the
    forward's graph), whatever the switch says outside them."""
    forward = model.forward

    def pinned(*args, **kwargs):
        with attention_path(name):
            return forward(*args, **kwargs)
    model.forward = pinned
    return model


def fused_calls(model, batch, dtype, name: str = "_attend_extended") -> tuple[tuple, int]:
    """:func:`loss_and_grads` under ``dtype``'s autocast, and how many attention calls took
    the fused path of ``MultiHeadAttention`` method ``name``."""
    from depnmt.core.device import autocast
    from depnmt.model.attention import MultiHeadAttention
    calls, method = [], getattr(MultiHeadAttention, name)

    def counted(self, *args, **kwargs):
        calls.append(1)
        return method(self, *args, **kwargs)
    setattr(MultiHeadAttention, name, counted)
    try:
        with autocast(batch.src.device, dtype):
            return loss_and_grads(model, batch), len(calls)
    finally:
        setattr(MultiHeadAttention, name, method)


def step_errors(got: tuple, ref: tuple) -> tuple[float, float, float]:
    """(largest Δ logit relative to the largest |logit|, the largest and the mean gradient
    error) of a step against a reference step (:func:`gradient_errors`)."""
    errors = list(gradient_errors(ref[1], got[1]).values())
    dlogit = float((got[0] - ref[0]).abs().max()) / max(float(ref[0].abs().max()), 1e-12)
    return dlogit, max(errors, default=0.0), sum(errors) / max(len(errors), 1)


def check_fused(plan: Plan, path: FusedPath, examples, n_src: int, n_tgt: int) -> None:
    """A fused attention path of a system on the device (the module docstring's parity
    section): taken by itself on CUDA (every encoder layer for the extra dimensions; every
    self-attention layer, the decoder's too, for the kernel's Shaw terms); fp32 and bf16
    against the explicit path with the same weights and batch."""
    from depnmt.data.batches import add_features, collate
    from depnmt.model.schemes.names import resolve
    from depnmt.model.schemes.registry import learn_options, scheme_entries
    from depnmt.model.transformer import ModelConfig, TransformerNMT
    entries = learn_options(scheme_entries(resolve(path.spec), dict(path.options)), examples)
    cfg = ModelConfig(n_src, n_tgt, d_model=plan.d_model, n_heads=plan.heads, d_ff=plan.d_ff,
                      encoder_layers=plan.layers, decoder_layers=plan.layers, dropout=0.0,
                      attention_dropout=0.0, schemes=entries)
    torch.manual_seed(1)
    model = TransformerNMT(cfg).to(plan.device)
    for ex in examples:
        ex.feats, ex.tgt_feats = {}, {}
    add_features(examples, model.schemes.schemes)
    batch = collate(examples, model.schemes.schemes).to(plan.device)
    cuda = plan.device.type == "cuda"
    with attention_path("explicit"):
        ref, _ = fused_calls(model, batch, None)
        ref_bf16, _ = fused_calls(model, batch, torch.bfloat16)
    with attention_path("auto" if cuda else "fused"):
        fused, calls = fused_calls(model, batch, None, path.method)
        fused_bf16, _ = fused_calls(model, batch, torch.bfloat16)
    kernel = path.method == "_attend_kernel"
    layers = 2 * plan.layers if kernel else plan.layers
    plan.add("parity", f"{path.name}: attention calls on the {path.what} ({plan.device})",
             f"{calls} of {layers} {'self-attention' if kernel else 'encoder'} layers"
             + ("" if cuda else " (forced: fused)"), calls == layers if kernel else calls > 0)
    dlogit, worst, _ = step_errors(fused, ref)
    plan.add("parity", f"{path.name} fp32: {path.what} vs explicit ({plan.device})",
             f"Δ logit {dlogit:.1e} (relative), grad error {worst:.1e}",
             dlogit <= LOGIT_TOL and worst <= GRAD_TOL)
    ours, theirs = step_errors(fused_bf16, ref), step_errors(ref_bf16, ref)
    plan.add("parity", f"{path.name} bf16 vs fp32: {path.what} (explicit path) "
             f"({plan.device})", f"Δ logit {ours[0]:.1e} ({theirs[0]:.1e}), mean grad error "
             f"{ours[2]:.1e} ({theirs[2]:.1e}), largest {ours[1]:.1e} ({theirs[1]:.1e})",
             ours[0] <= 2 * theirs[0] + 0.01 and ours[2] <= 2 * theirs[2] + 0.01)


# -- train, resume -----------------------------------------------------------------------------

def run_cli(args: list[str], log: Path) -> None:
    """``depnmt ARGS`` in this process, its stderr into ``log``; raises on a non-zero exit."""
    from depnmt.cli import cli
    with open(log, "a", encoding="utf-8") as err, contextlib.redirect_stderr(err), \
            contextlib.redirect_stdout(err):
        try:
            cli.main(args, prog_name="depnmt", standalone_mode=False)
        except SystemExit as exc:
            if exc.code not in (0, None):
                raise RuntimeError(f"exit status {exc.code}; see {log}") from None


def train_args(plan: Plan, data: Path, model_dir: Path, steps: int, extra: list[str],
               every: int = 0) -> list[str]:
    """``depnmt train`` of a tiny model on the shipped data for ``steps`` updates: saves and
    logs every ``every`` (default: half of ``plan.steps``, where a resumed run starts)."""
    half = str(every or max(plan.steps // 2, 1))
    return ["train", "-i", str(data / "bpe"), "--trees", str(data / "parse"), "-o",
            str(model_dir), *plan.arch_flags, "--max-tokens", "512", "--warmup", "10", "--lr",
            "1e-3", "--max-steps", str(steps), "--log-every", half, "--save-every", half,
            "--valid-every", str(plan.steps), "--valid-max-sentences", "2", "--valid-beam", "1",
            "--early-stop-metric", "loss", "--seed", "1", "--device", str(plan.device),
            *extra]


def train_records(model_dir: Path) -> list[dict]:
    """The ``train`` records of ``metrics.jsonl``."""
    lines = (model_dir / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if r.get("event") == "train"]


def final_loss(model_dir: Path) -> tuple[float, bool]:
    """The last logged training loss and whether every logged loss is finite."""
    records = train_records(model_dir)
    return records[-1]["loss"], all(finite(r["loss"]) for r in records)


def loss_scale(model_dir: Path) -> float:
    """The AMP loss scale saved in ``checkpoints/last.pt`` (0 when the run scales nothing)."""
    from depnmt.storage.checkpoint import load_checkpoint
    state = load_checkpoint(model_dir / "checkpoints" / "last.pt")
    return float(state.get("scaler", {}).get("scale", 0.0))


def precisions(plan: Plan, name: str) -> list[str]:
    """What scheme ``name`` trains in: fp32, bf16 and fp16 (fp16 needs CUDA: ``train
    --precision fp16`` refuses the CPU); fp32 only for schemes ``--tiny`` leaves out."""
    if not plan.full(name):
        return ["fp32"]
    return ["fp32", "bf16", "fp16"] if plan.device.type == "cuda" else ["fp32", "bf16"]


def train_and_resume(plan: Plan, data: Path, name: str, precision: str) -> tuple[str, bool]:
    """``steps`` updates; with :meth:`Plan.full`, also half of them resumed to ``steps``.
    Returns (value, ok)."""
    half = max(plan.steps // 2, 1)
    whole = plan.work / "train" / f"{name}-{precision}"
    split = plan.work / "train" / "split"
    log = plan.work / "train" / f"{name}-{precision}.log"
    whole.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(split, ignore_errors=True)
    extra = [*scheme_flags(name, plan.layers), "--precision", precision]
    run_cli(train_args(plan, data, whole, plan.steps, extra), log)
    loss, ok = final_loss(whole)
    value = f"loss {loss:.4f}"
    if plan.full(name):
        run_cli(train_args(plan, data, split, half, extra), log)
        run_cli(train_args(plan, data, split, plan.steps, extra) + ["--resume"], log)
        resumed, resumed_finite = final_loss(split)
        delta = abs(resumed - loss)
        value += f", resumed {half}→{plan.steps}: Δ {delta:.1e}"
        ok = ok and resumed_finite and delta <= RESUME_TOL
    if precision == "fp16":
        scale = loss_scale(whole)
        value += f", loss scale {scale:g}"
        ok = ok and scale > 1
    return value, ok


def check_train(plan: Plan, data: Path) -> None:
    """Every scheme in every precision: ``steps`` updates, and half of them + resumed."""
    for name in scheme_names():
        for precision in precisions(plan, name):
            tag = f"{name} {precision}, {plan.steps} updates"
            try:
                value, ok = train_and_resume(plan, data, name, precision)
            except Exception as exc:  # noqa: BLE001
                value, ok = failure(exc), False
            plan.add("train", tag, value, ok)


# -- DDP ---------------------------------------------------------------------------------------

def ddp_run(plan: Plan, data: Path, tag: str, flags: list[str]) -> tuple[str, str, bool]:
    """``torchrun`` of ``depnmt train --update-freq 2``: (tag, value, ok)."""
    try:
        return tag, *torchrun_train(plan, data, tag, flags)
    except Exception as exc:  # noqa: BLE001
        return tag, failure(exc), False


def torchrun_train(plan: Plan, data: Path, tag: str, flags: list[str]) -> tuple[str, bool]:
    """Train under ``torchrun`` with ``plan.ddp_procs`` processes; (value, ok)."""
    model_dir = plan.work / "ddp" / tag
    shutil.rmtree(model_dir, ignore_errors=True)
    model_dir.parent.mkdir(parents=True, exist_ok=True)
    device = "cuda" if plan.device.type == "cuda" else "cpu"
    args = train_args(plan, data, model_dir, plan.ddp_steps, flags + ["--update-freq", "2"],
                      every=max(plan.ddp_steps // 2, 1))
    args[args.index("--device") + 1] = device
    # the loopback address and a free port, not --standalone: the latter gives the workers this
    # host's name as MASTER_ADDR, and where that name does not resolve they wait forever
    command = [sys.executable, "-m", "torch.distributed.run", "--master_addr", "127.0.0.1",
               "--master_port", str(free_port()), "--nproc_per_node", str(plan.ddp_procs),
               "-m", "depnmt.cli", *args]
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1"}
    log = plan.work / "ddp" / f"{tag}.log"
    returncode, stderr = run_logged(command, env, log, DDP_TIMEOUT)
    if returncode is None:
        return (f"timed out after {DDP_TIMEOUT} s, workers killed; stderr's last lines: "
                f"{last_lines(stderr)}; log {log}"), False
    if returncode:
        return f"exit {returncode}: {last_lines(stderr, 1)[:140]}", False
    loss, all_finite = final_loss(model_dir)
    start = next(r for r in map(json.loads, (model_dir / "metrics.jsonl").read_text(
        encoding="utf-8").splitlines()) if r.get("event") == "start")
    return f"loss {loss:.4f}, {start.get('processes')} process(es)", all_finite


DDP_TIMEOUT = 600      # seconds a torchrun check may take


def run_logged(command: list[str], env: dict, log: Path,
               timeout: float) -> tuple[int | None, str]:
    """Run ``command`` in a session of its own, its stdout and stderr written to ``log``;
    (exit status, stderr), the status None when it ran past ``timeout`` seconds: then every
    process it started is killed first (torchrun's workers have sessions of their own and
    outlive torchrun: they are found by a mark in their environment), and what it wrote so far
    is kept, so that a hang shows where it hung."""
    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(command, env={**env, RUN_MARK: mark}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        status: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        kill_marked(mark)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:       # a process outside /proc's view holds a pipe
            proc.kill()
            out, err = "", "(its output could not be read: a process it started still runs)"
        status = None
    log.write_text(out + err, encoding="utf-8")
    return status, err


RUN_MARK = "DEPNMT_GPU_CHECK_RUN"   # environment variable marking a run's processes


def kill_marked(mark: str) -> None:
    """SIGKILL every process whose environment has ``RUN_MARK=mark`` (Linux's /proc)."""
    needle = f"{RUN_MARK}={mark}".encode()
    for entry in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                os.kill(int(entry.name), signal.SIGKILL)


def last_lines(text: str, n: int = 3) -> str:
    """The last ``n`` non-blank lines of ``text``, joined by " | " (at most 400 characters)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()][-n:]
    return (" | ".join(lines) or "?")[-400:]


def free_port() -> int:
    """A TCP port on the loopback that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ddp(plan: Plan, data: Path, pool: ThreadPoolExecutor) -> dict[str, Future]:
    """Every scheme and the ablations under torchrun, started in ``pool`` (subprocesses: they
    run while this process checks parity and trains; the speed section starts after them)."""
    runs = {name: scheme_flags(name, plan.layers) for name in scheme_names()
            if plan.ddp_schemes is None or name in plan.ddp_schemes}
    runs.update(ABLATIONS)
    return {tag: pool.submit(ddp_run, plan, data, tag, flags) for tag, flags in runs.items()}


def check_ddp(plan: Plan, pending: dict[str, Future]) -> None:
    """The rows of the torchrun runs that :func:`start_ddp` started, in its order."""
    backend = "nccl" if plan.device.type == "cuda" else "gloo"
    for future in pending.values():
        tag, value, ok = future.result()
        plan.add("ddp", f"{tag} torchrun --nproc_per_node {plan.ddp_procs} ({backend}), "
                        f"--update-freq 2", value, ok)


# -- translate ---------------------------------------------------------------------------------

def decode_inputs(data: Path, lines: int) -> tuple[list[list[str]], list]:
    """The first ``lines`` test sentences: their words and source trees."""
    from depnmt.core.conllu import read_conllu
    trees = list(read_conllu(data / "parse/test.en.conllu"))[:lines]
    return [t.words for t in trees], trees


def decode_all(model_dir: Path, device: str, beam: int, words, trees) -> list[str]:
    from depnmt.decoding.translate import Translator
    translator = Translator.from_model_dir(model_dir, device=device, precision="fp32", beam=beam)
    return translator.translate_words(words, trees)


def check_translate(plan: Plan, data: Path) -> None:
    """Each scheme's fp32 model of ``train``: the device's and the CPU's translations agree;
    the batch bound ``translate`` takes by default on the device (32,000 on CUDA)."""
    from depnmt.decoding.translate import MAX_TOKENS, MAX_TOKENS_GPU, Translator
    words, trees = decode_inputs(data, plan.lines)
    expected = MAX_TOKENS_GPU if plan.device.type == "cuda" else MAX_TOKENS
    try:
        bound = Translator.from_model_dir(plan.work / "train" / "abs-fp32",
                                          device=str(plan.device)).max_tokens
        plan.add("translate", f"default --max-tokens on {plan.device.type}", str(bound),
                 bound == expected)
    except Exception as exc:  # noqa: BLE001
        plan.add("translate", "default --max-tokens", failure(exc), False)
    for name in scheme_names():
        model_dir = plan.work / "train" / f"{name}-fp32"
        for beam in (1, 4):
            tag = f"{name} {'greedy' if beam == 1 else f'beam {beam}'}, {len(words)} lines"
            try:
                ours = decode_all(model_dir, str(plan.device), beam, words, trees)
                cpu = (ours if plan.device.type == "cpu"        # CPU vs CPU: the same run
                       else decode_all(model_dir, "cpu", beam, words, trees))
            except Exception as exc:  # noqa: BLE001
                plan.add("translate", tag, failure(exc), False)
                continue
            same = sum(a == b for a, b in zip(ours, cpu)) / max(len(cpu), 1)
            plan.add("translate", f"{tag}: identical to the CPU", f"{same:.1%}",
                     same >= SAME_LINES and len(ours) == len(cpu))


# -- speed -------------------------------------------------------------------------------------

def matmul_params(s: dict) -> tuple[int, int]:
    """Weights of the abs Transformer of size ``s`` that multiply each source token and each
    target token: (N_src, N_tgt) of the module docstring."""
    d, ff, layers, vocab = s["d_model"], s["d_ff"], s["layers"], s["vocab"]
    n_src = layers * (4 * d * d + 2 * d * ff) + layers * 2 * d * d
    n_tgt = layers * (6 * d * d + 2 * d * ff) + d * vocab
    return n_src, n_tgt


def train_flops(s: dict, batch_size: int) -> float:
    """FLOPs of one training step of the abs Transformer of size ``s`` on ``batch_size``
    sentences of ``src_len`` + ``tgt_len`` tokens (module docstring)."""
    n_src, n_tgt = matmul_params(s)
    src, tgt = s["src_len"], s["tgt_len"]
    attention = 12 * s["d_model"] * s["layers"] * (src * src + tgt * tgt + tgt * src)
    return batch_size * (6 * (src * n_src + tgt * n_tgt) + attention)


def peak_tflops(device: torch.device, given: float | None) -> float | None:
    """``--peak-tflops``, else the dense bf16 peak of a known GPU (None: unknown or a CPU)."""
    if given or device.type != "cuda":
        return given
    name = torch.cuda.get_device_name(device)
    return next((tflops for part, tflops in PEAK_TFLOPS if part in name), None)


def speed_runs(plan: Plan, s: dict, batch_size: int) -> tuple:
    """The speed systems at ``batch_size`` that build and train one step (``bench/schemes.py``:
    a model per system, side by side); each one that does not is a failed row."""
    import schemes as bench
    setup = bench.Setup(plan.device, s["d_model"], s["heads"], s["d_ff"], s["layers"],
                        s["vocab"], s["src_len"], s["tgt_len"], batch_size, s["n_batches"],
                        s["decode_len"])
    runs = {}
    for name in (*SPEED_SYSTEMS, *(f"{n}/explicit" for n in EXPLICIT_RUNS)):
        try:
            system, _, path = name.partition("/")
            run = bench.new_run(setup, system, "bf16")
            if path:
                pinned_to(run.model, path)
            bench.train_step(run.model, run.optimizer, run.batches[0], run.dtype)
            runs[name] = run
        except torch.cuda.OutOfMemoryError:
            raise
        except Exception as exc:  # noqa: BLE001
            plan.add("speed", name, failure(exc), False)
    return setup, runs


def measure_speed(plan: Plan, s: dict) -> tuple[list[dict], int, float | None]:
    """Train every speed system on the same batches, interleaved (``bench/schemes.py``),
    halving the batch until it fits; returns its summary rows, the batch size and the GPU's
    mean busy share meanwhile (``nvidia-smi``; None on the CPU or without it)."""
    import loader_speed
    import schemes as bench
    batch_size = s["batch_size"]
    while True:
        try:
            setup, runs = speed_runs(plan, s, batch_size)
            if "abs" not in runs:
                return [], batch_size, None
            with loader_speed.busy_samples(str(plan.device)) as busy:
                bench.measure(setup, runs, s["rounds"], memory=plan.device.type == "cuda")
            return bench.summary(runs), batch_size, statistics.mean(busy) if busy else None
        except torch.cuda.OutOfMemoryError:
            if batch_size < 16:
                raise
        batch_size //= 2                  # the failed models are gone with the exception
        torch.cuda.empty_cache()


def check_speed(plan: Plan) -> None:
    """tokens/s, MFU and peak memory of abs; each tree scheme's tokens/s as a ratio to abs."""
    s = plan.speed
    rows, batch_size, busy = measure_speed(plan, s)
    cuda = plan.device.type == "cuda"
    peak = peak_tflops(plan.device, plan.peak_tflops)
    flops = train_flops(s, batch_size)
    size = (f"{s['layers']}+{s['layers']} layers, d {s['d_model']}, "
            f"{batch_size * s['tgt_len']} tgt tokens/batch, bf16")
    for row in rows:
        tok_s = row["train_tok_s"]
        mfu = flops * tok_s / (batch_size * s["tgt_len"]) / (peak * 1e12) if peak else None
        memory = f", peak {row['peak_mb'] / 1024:.2f} GiB" if row["peak_mb"] else ""
        value = (f"{tok_s:,} tok/s" + (f", MFU {mfu:.1%}" if mfu is not None else "")
                 + memory + f", {row['train_ratio']:.2f}× abs")
        if row["scheme"] == "abs":
            goal = goal_mfu(plan.device)
            ok = (mfu >= goal) if cuda and mfu is not None else None
            plan.add("speed", f"abs ({size}); goal MFU ≥ {goal:.0%}", value, ok)
        elif "/" in row["scheme"]:
            system = row["scheme"].partition("/")[0]
            fused = next((r["train_tok_s"] for r in rows if r["scheme"] == system), None)
            ab = f"; {system} is {fused / tok_s:.2f}× this" if fused else ""
            plan.add("speed", f"{row['scheme']} (A/B of the fused attention path)",
                     value + ab, None)
        else:
            goal = GOAL_RATIO_KEY_OR_BIAS if row["scheme"] in KEY_OR_BIAS else GOAL_RATIO
            ok = row["train_ratio"] >= goal if cuda else None
            plan.add("speed", f"{row['scheme']}; goal ≥ {goal}× abs", value, ok)
    if busy is not None:
        plan.add("speed", "GPU busy share over the rounds (nvidia-smi)", f"{busy:.0%}", None)


def loader_flops_per_s(s: dict, lengths: dict, run: dict) -> float:
    """FLOPs a second of the abs Transformer of size ``s`` (its vocabulary: the corpus's) at
    a real run's source and target tokens/s: the module docstring's count with the corpus's
    mean S², T², S·T for the attention of each sentence (``bench/loader_speed.py``)."""
    n_src, n_tgt = matmul_params({**s, "vocab": lengths["vocab"]})
    sentences = run["tgt_tok_s"] / lengths["T"]
    attention = 12 * s["d_model"] * s["layers"] * (lengths["S2"] + lengths["T2"] + lengths["ST"])
    return 6 * (run["src_tok_s"] * n_src + run["tgt_tok_s"] * n_tgt) + sentences * attention


def check_loader(plan: Plan, data: Path) -> None:
    """Training through the real data path (``bench/loader_speed.py``: ``depnmt train`` with
    its cache, workers, tree features and pinned copies) on a synthetic corpus: tokens/s and MFU
    of each scheme, its ratio to abs, the loop's wait for batches (goal on CUDA: ≤ 5 % of its
    time) and the GPU's busy share."""
    import loader_speed
    s, ld = plan.speed, plan.loader
    cuda = plan.device.type == "cuda"
    work = loader_speed.make_corpus(data, plan.work / "loader", ld["pairs"], ld["merges"])
    lengths = loader_speed.length_moments(work / "bpe")
    arch = ["--layers", str(s["layers"]), "--d-model", str(s["d_model"]), "--heads",
            str(s["heads"]), "--d-ff", str(s["d_ff"])]
    peak = peak_tflops(plan.device, plan.peak_tflops)
    size = (f"{s['layers']}+{s['layers']} layers, d {s['d_model']}, vocab {lengths['vocab']}, "
            f"≤ {ld['max_tokens']} tokens/batch, {ld['steps']} updates")
    base, eager = None, {}
    for scheme in ld["schemes"]:
        try:
            run = loader_speed.train(work, scheme, str(plan.device), arch, ld["max_tokens"],
                                     ld["steps"], ld["workers"], max(1, ld["steps"] // 6),
                                     "bf16" if cuda else "auto")
        except Exception as exc:  # noqa: BLE001
            plan.add("loader", scheme, failure(exc), False)
            continue
        base = run["tgt_tok_s"] if scheme == "abs" else base
        mfu = loader_flops_per_s(s, lengths, run) / (peak * 1e12) if peak else None
        busy = f", GPU busy {run['busy']:.0%}" if run["busy"] is not None else ""
        value = (f"{run['tgt_tok_s']:,.0f} tok/s" + (f", MFU {mfu:.1%}" if mfu is not None
                                                     else "") + busy
                 + (f", {run['tgt_tok_s'] / base:.2f}× abs" if base else ""))
        if scheme == "abs":
            goal = goal_mfu(plan.device)
            plan.add("loader", f"abs ({size}); goal MFU ≥ {goal:.0%}", value,
                     mfu >= goal if cuda and mfu is not None else None)
        else:
            plan.add("loader", scheme, value, None)
        wait = f"{run['wait_share_max']:.1%} (median {run['wait_share_median']:.1%})"
        plan.add("loader", f"{scheme}: the loop's wait for batches; goal ≤ {GOAL_WAIT:.0%}",
                 wait, run["wait_share_max"] <= GOAL_WAIT if cuda else None)
        eager[scheme] = run["tgt_tok_s"]
    for scheme in ld.get("compiled", ()):
        check_compiled(plan, work, scheme, arch, eager, lambda run: (
            loader_flops_per_s(s, lengths, run) / (peak * 1e12) if peak else None))


def check_compiled(plan: Plan, work: Path, scheme: str, arch: list[str],
                   eager: dict[str, float], mfu_of) -> None:
    """The loader run of ``scheme`` with ``train --compile dynamic``: tokens/s over the updates
    after the first record's (the warm-up, which compiles), its MFU (``mfu_of(run)``) and
    ratios to the uncompiled abs and ``scheme`` (``eager``: their tokens/s), and the compile
    counts; on CUDA a check that the real batches' shapes did not keep recompiling (at most
    the forward pass and the loss once more during the measured updates: a batch of one
    sentence)."""
    import loader_speed
    ld, cuda = plan.loader, plan.device.type == "cuda"
    warmup = max(1, ld["steps"] // 6)
    backend = os.environ.get("DEPNMT_COMPILE_BACKEND") or "inductor"
    name = (f"{scheme} --compile dynamic ({backend}; {ld['steps']} updates, the first "
            f"{warmup} a warm-up)")
    from depnmt.training.compiled import missing_features
    if missing_features():
        plan.add("loader", name, f"not run: torch {torch.__version__} lacks "
                                 f"{', '.join(missing_features())}", None)
        return
    try:
        run = loader_speed.train(work, scheme, str(plan.device), arch, ld["max_tokens"],
                                 ld["steps"], ld["workers"], warmup,
                                 "bf16" if cuda else "auto", ("--compile", "dynamic"),
                                 timeout=COMPILED_TIMEOUT_S)
    except Exception as exc:  # noqa: BLE001
        plan.add("loader", name, failure(exc), False)
        return
    mfu = mfu_of(run)
    ratios = [f"{run['tgt_tok_s'] / eager[base]:.2f}× {base}" for base in dict.fromkeys(
        ("abs", scheme)) if eager.get(base)]
    counts = (f"{run.get('compiled_graphs', '?')} graphs compiled "
              f"({run.get('steady_compiles', '?')} in the measured updates), "
              f"{run.get('recompiles', '?')} recompiles, {run.get('graph_breaks', '?')} "
              f"graph breaks")
    value = ", ".join([f"{run['tgt_tok_s']:,.0f} tok/s", *([f"MFU {mfu:.1%}"] if mfu is not None
                                                          else []), *ratios, counts])
    steady = run.get("steady_compiles")
    plan.add("loader", name, value, steady is not None and steady <= 2 if cuda else None)


def goal_mfu(device: torch.device) -> float:
    """abs's MFU goal on ``device``: lower on an H100 (not an H200) than on other GPUs."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else ""
    return GOAL_MFU_H100 if "H100" in name else GOAL_MFU


class Blocked(importlib.abc.MetaPathFinder):
    """Makes the named top-level packages unimportable (``--block-imports``: what the GPU image
    lacks)."""

    def __init__(self, names: set[str]):
        self.names = names

    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in self.names:
            raise ImportError(f"{name} is blocked by --block-imports")
        return None


# -- the command -------------------------------------------------------------------------------

def markdown(plan: Plan, header: str) -> str:
    lines = [header, "", "| section | check | value | result |", "|---|---|---|---|"]
    lines += [f"| {r.section} | {r.check} | {r.value} | {r.status} |" for r in plan.rows]
    failed = sum(r.status == "FAIL" for r in plan.rows)
    lines += ["", f"{len(plan.rows)} rows, {failed} failed"]
    return "\n".join(lines)


def machine_line(device: torch.device) -> str:
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    return (f"depnmt gpu_check on {where} ({device}), torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}, Python {sys.version.split()[0]}")


def run_section(plan: Plan, section: str, data: Path, pending: dict[str, Future]) -> None:
    """One section (``pending``: the torchrun runs of ``ddp``); an unexpected error is one
    failed row, the others still run."""
    started = time.monotonic()
    try:
        {"parity": lambda: check_parity(plan, data), "train": lambda: check_train(plan, data),
         "ddp": lambda: check_ddp(plan, pending), "translate": lambda: check_translate(plan, data),
         "speed": lambda: check_speed(plan),
         "loader": lambda: check_loader(plan, data)}[section]()
    except Exception as exc:  # noqa: BLE001
        plan.add(section, "section", failure(exc), False)
    print(f"{section}: {time.monotonic() - started:.0f} s", file=sys.stderr, flush=True)


# What the train, ddp and translate checks import beyond a GPU machine's usual packages (torch,
# click, rich, sacrebleu, numpy), all pure Python: module -> the wheel to bring, pinned.
CHECK_WHEELS = {"subword_nmt": "subword-nmt==0.3.8", "tqdm": "tqdm",
                "rich_click": "rich-click>=1.9"}


def require_wheels() -> None:
    """``train`` copies the shipped data's BPE codes (subword-nmt, with tqdm) and runs depnmt's
    commands (rich-click): a usage error naming the missing wheels and how to bring them."""
    import importlib.util
    missing = [wheel for module, wheel in CHECK_WHEELS.items()
               if importlib.util.find_spec(module) is None]
    if missing:
        wanted = " ".join(f"'{w}'" for w in missing)
        raise click.UsageError(
            f"the train, ddp and translate checks need {', '.join(missing)} (pure Python): "
            f"pip install {wanted}, or without internet `pip download --no-deps {wanted} -d "
            "build/wheels` elsewhere and `pip install --no-index --no-deps build/wheels/*.whl` "
            "here; --only parity,speed runs without them")


@click.command(context_settings={"show_default": True, "help_option_names": ["-h", "--help"]})
@click.option("--device", default="cuda", help="cuda, cuda:N or cpu")
@click.option("--tiny", is_flag=True, help="a few updates, lines and a tiny speed model "
              "(about a minute on 2 CPU cores: what the unit test runs)")
@click.option("--only", default=",".join(SECTIONS),
              help=f"comma-separated sections to run: {', '.join(SECTIONS)}")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write the table to this markdown file and FILE.json")
@click.option("--peak-tflops", type=click.FloatRange(min=0, min_open=True), default=None,
              help="the device's dense bf16 peak for MFU (default: known GPUs by name)")
@click.option("--work", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="keep the models and logs here (default: a temporary folder, deleted)")
@click.option("--block-imports", default="", metavar="PKGS",
              help="comma-separated packages to make unimportable in this process, e.g. "
                   "sacremoses,spacy,stanza: shows that the checks do without them")
def main(device: str, tiny: bool, only: str, out: Path | None, peak_tflops: float | None,
         work: Path | None, block_imports: str) -> None:
    """Check depnmt on a GPU (or the CPU with --device cpu); exit status 1 if a check fails."""
    blocked = {name.strip() for name in block_imports.split(",") if name.strip()}
    if blocked:
        sys.meta_path.insert(0, Blocked(blocked))
    from depnmt.core.device import resolve_device
    sections = [s.strip() for s in only.split(",") if s.strip()]
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise click.BadParameter(f"unknown {sorted(unknown)}", param_hint="--only")
    if "translate" in sections and "train" not in sections:
        sections.insert(sections.index("translate"), "train")   # it decodes train's models
    dev = resolve_device(device)
    if dev.type == "cpu":       # the label-bins kernel's parity rows, in Triton's interpreter
        os.environ.setdefault("TRITON_INTERPRET", "1")
        # the compiled loader rows trace without generating code (inductor's C++ build takes
        # minutes on a small CPU; on the CPU these rows are informative only)
        os.environ.setdefault("DEPNMT_COMPILE_BACKEND", "eager")
    if set(sections) & {"train", "ddp", "translate", "loader"}:
        require_wheels()
    with contextlib.ExitStack() as stack:
        root = work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gpucheck-")))
        plan = (tiny_plan if tiny else Plan)(dev, root)
        plan.peak_tflops = peak_tflops
        data = unpack(root / "data")
        pool = stack.enter_context(ThreadPoolExecutor(4 if dev.type == "cuda" else 1))
        pending = start_ddp(plan, data, pool) if "ddp" in sections else {}
        for section in SECTIONS:
            if section in sections:
                run_section(plan, section, data, pending)
    table = markdown(plan, machine_line(dev))
    print(table)
    if out is not None:
        out.write_text(table + "\n", encoding="utf-8")
        out.with_name(out.name + ".json").write_text(json.dumps(
            {"machine": machine_line(dev), "rows": [asdict(r) for r in plan.rows]}, indent=1)
            + "\n", encoding="utf-8")
    sys.exit(1 if any(r.status == "FAIL" for r in plan.rows) else 0)


if __name__ == "__main__":
    main()
