"""The extra-dimensions attention path (``MultiHeadAttention._attend_extended``): factored
relative terms (Omote's depth difference) and low-rank logits (GPS's syntax term) as extra head
dimensions of one SDPA call equal :func:`reference_attention` and the explicit path — values and
gradients, fp32 and bf16 autocast, padding and causal masks, odd lengths, batches of 1 and
more, and every scheme that uses it; and the path is chosen where it should be: off the CPU
(``meta`` here) by default, on the CPU only when ``DEPNMT_ATTENTION=fused``."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import torch

import depnmt.model.attention as attention
from depnmt.core.errors import DepnmtError
from depnmt.core.trees import random_heads
from depnmt.core.vocab import EOS
from depnmt.data.batches import Example, add_features, collate
from depnmt.model import kernels
from depnmt.model.attention import (AttentionTerms, LabelFactors, LowRankLogits, MultiHeadAttention,
                                    RelativeTerm, reference_attention)
from depnmt.model.schemes.names import resolve
from depnmt.model.schemes.registry import learn_options, scheme_entries
from depnmt.model.schemes.relative import depth_factors
from depnmt.model.transformer import ModelConfig, TransformerNMT, label_smoothed_nll
from depnmt.stages.parse import Sentence
from depnmt.stages.parse.projection import join_roots

D_MODEL, HEADS = 32, 4
D_K = D_MODEL // HEADS
R, W = 6, 5                      # table rows, key classes
BF16_ATOL = 3e-2                 # bf16 autocast against the fp32 reference (8-bit mantissas)


def use_path(monkeypatch, name: str) -> None:
    """``DEPNMT_ATTENTION=name`` for this test (the switch is read at import)."""
    monkeypatch.setattr(attention, "attention_path", name)


def counted(monkeypatch, name: str) -> list:
    """Calls of ``MultiHeadAttention.<name>``, recorded (the method still runs)."""
    calls, method = [], getattr(MultiHeadAttention, name)

    def wrapper(self, *args, **kwargs):
        calls.append(name)
        return method(self, *args, **kwargs)
    monkeypatch.setattr(MultiHeadAttention, name, wrapper)
    return calls


# -- one attention layer -------------------------------------------------------------------------

def factored_terms(b: int, t: int, parts: set[str], groups: int = 2) -> tuple[AttentionTerms,
                                                                               list]:
    """Terms of the kinds ``parts`` ({"key", "value", "low_rank"}) and their learned tensors:
    a factored relative term over random classes and a random table (label 0: zero rows), and
    low-rank logits in ``groups`` groups (group 0: none)."""
    factors = LabelFactors(torch.randint(0, W, (b, t)), torch.randint(0, W, (b, t)),
                           torch.randint(0, R, (W, W)))

    def table() -> torch.Tensor:
        return torch.randn(R, D_K).index_fill(0, torch.tensor([0]), 0.0).requires_grad_()
    key = table() if "key" in parts else None
    value = table() if "value" in parts else None
    relative = ([RelativeTerm(factors.labels(), key, value, factors)]
                if key is not None or value is not None else [])
    low_rank = []
    if "low_rank" in parts:
        low_rank = [LowRankLogits(torch.randn(b, HEADS, t, D_K, requires_grad=True),
                                  torch.randn(b, HEADS, t, D_K, requires_grad=True),
                                  torch.randint(0, groups + 1, (b, t)),
                                  torch.randint(0, groups + 1, (b, t)), groups)]
    learned = [p for p in (key, value) if p is not None]
    learned += [x for term in low_rank for x in (term.query, term.key)]
    return AttentionTerms(relative, low_rank=low_rank), learned


def masks(kind: str, b: int, t: int) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(mask, the query rows compared [B, T]): key padding (lengths t, t − 2, 1, …), the
    decoder's causal mask, or none."""
    if kind == "causal":
        return torch.ones(t, t, dtype=torch.bool).tril(), torch.ones(b, t, dtype=torch.bool)
    if kind == "none":
        return None, torch.ones(b, t, dtype=torch.bool)
    lengths = torch.tensor([t, t - 2, 1, t - 1][:b])
    valid = torch.arange(t)[None, :] < lengths[:, None]
    return valid[:, None, None, :], valid


def outputs_and_grads(attn, x, mask, terms, valid, learned, reference: bool = False):
    """The layer's output and the gradients of its (valid rows') sum w.r.t. the input, W^Q,
    W^K, W^V and the terms' learned tensors."""
    out = (reference_attention(attn, x, x, mask, terms) if reference
           else attn(x, x, mask, terms))
    wrt = [x, attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight, *learned]
    return out, torch.autograd.grad(out[valid].float().sum(), wrt)


CASES = [{"key", "value"}, {"key"}, {"value"}, {"low_rank"}, {"key", "value", "low_rank"}]


@pytest.mark.parametrize("parts", CASES, ids=lambda p: "+".join(sorted(p)))
@pytest.mark.parametrize("b,t", [(1, 7), (3, 9)])
@pytest.mark.parametrize("kind", ["padding", "causal", "none"])
def test_extended_path_equals_the_reference(parts, b, t, kind, monkeypatch):
    """fp32: outputs within 1e-5 and gradients within 1e-4 of the literal equations, with the
    explicit path and the additive mask not taken."""
    use_path(monkeypatch, "fused")
    torch.manual_seed(len(parts) + b + t)
    attn = MultiHeadAttention(D_MODEL, HEADS).train()          # dropout 0: deterministic
    x = torch.randn(b, t, D_MODEL, requires_grad=True)
    terms, learned = factored_terms(b, t, parts)
    mask, valid = masks(kind, b, t)
    extended = counted(monkeypatch, "_attend_extended")
    monkeypatch.setattr(attn, "_attend_with_terms", None)
    monkeypatch.setattr(attn, "_additive_mask", None)
    fast, grads = outputs_and_grads(attn, x, mask, terms, valid, learned)
    slow, expected = outputs_and_grads(attn, x, mask, terms, valid, learned, reference=True)
    assert extended
    assert torch.allclose(fast[valid], slow[valid], atol=1e-5)
    for g, e in zip(grads, expected):
        assert torch.allclose(g, e, atol=1e-4)


@pytest.mark.parametrize("parts", CASES, ids=lambda p: "+".join(sorted(p)))
def test_extended_path_in_bf16_is_as_close_as_the_explicit_one(parts, monkeypatch):
    """Under bf16 autocast the extended path's outputs and gradients are within
    :data:`BF16_ATOL` of the fp32 reference, and not much further from it than the explicit
    path's."""
    torch.manual_seed(11)
    b, t = 3, 9
    attn = MultiHeadAttention(D_MODEL, HEADS).train()
    x = torch.randn(b, t, D_MODEL, requires_grad=True)
    terms, learned = factored_terms(b, t, parts)
    mask, valid = masks("padding", b, t)
    slow, expected = outputs_and_grads(attn, x, mask, terms, valid, learned, reference=True)
    errors = {}
    for name in ("explicit", "fused"):
        use_path(monkeypatch, name)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, grads = outputs_and_grads(attn, x, mask, terms, valid, learned)
        out, slow = out.detach(), slow.detach()
        errors[name] = max([float((out[valid].float() - slow[valid]).abs().max())]
                           + [float((g.float() - e).abs().max() / max(1.0, float(e.abs().max())))
                              for g, e in zip(grads, expected)])
    assert errors["fused"] <= BF16_ATOL
    assert errors["fused"] <= 2 * errors["explicit"] + 1e-2


def test_heads_wider_than_the_kernels_take_the_other_paths_by_default(monkeypatch):
    """``auto`` off the CPU (``meta``): low-rank logits of 2 groups (heads 8 + 2·8 wide) take
    the extra dimensions; with d_k 64 and 4 groups (64 + 256 > 256) the additive mask; the
    CPU keeps its paths; ``fused`` takes them at any width; ``explicit`` never."""
    meta = torch.device("meta")

    def attend(d_model: int, groups: int, device: torch.device) -> None:
        attn = MultiHeadAttention(d_model, HEADS).to(device).eval()
        d_k, b, t = d_model // HEADS, 2, 5
        x = torch.zeros(b, t, d_model, device=device)
        term = LowRankLogits(torch.zeros(b, HEADS, t, d_k, device=device),
                             torch.zeros(b, HEADS, t, d_k, device=device),
                             torch.zeros(b, t, dtype=torch.long, device=device),
                             torch.zeros(b, t, dtype=torch.long, device=device), groups)
        attn(x, x, None, AttentionTerms([], low_rank=[term]))
    extended = counted(monkeypatch, "_attend_extended")
    additive = counted(monkeypatch, "_additive_mask")
    cpu = torch.device("cpu")
    expected = {("auto", 32, 2, meta): "_attend_extended",
                ("auto", 256, 4, meta): "_additive_mask",
                ("auto", 32, 2, cpu): "_additive_mask",          # today's path (eval, fp32)
                ("fused", 256, 4, meta): "_attend_extended",
                ("explicit", 32, 2, meta): "_additive_mask"}
    for (mode, d_model, groups, device), method in expected.items():
        use_path(monkeypatch, mode)
        extended.clear()
        additive.clear()
        attend(d_model, groups, device)
        assert extended + additive == [method], (mode, d_model, device)


def test_an_unknown_path_is_an_error(monkeypatch):
    use_path(monkeypatch, "fast")
    attn = MultiHeadAttention(D_MODEL, HEADS)
    x = torch.randn(1, 3, D_MODEL)
    terms, _ = factored_terms(1, 3, {"low_rank"})
    with pytest.raises(DepnmtError, match="DEPNMT_ATTENTION=fast: expected one of auto, fused, "
                                          "explicit"):
        attn(x, x, None, terms)


def test_the_switch_is_read_from_the_environment():
    code = "import depnmt.model.attention as a; print(a.path())"
    for value, shown in (("fused", "fused"), ("explicit", "explicit"), ("", "auto")):
        env = {**os.environ, "DEPNMT_ATTENTION": value}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                             text=True, check=True).stdout
        assert out.strip() == shown


# -- the schemes that use it ---------------------------------------------------------------------

def line(words_per_sentence: list[int], index: int, rng: random.Random) -> tuple[list[str],
                                                                                 Sentence]:
    """Subwords of one source line of several parser sentences (joined into one tree as the
    parse stage joins them, ``sent_ids`` kept) with random labelled trees, a third of the
    words split in two pieces."""
    words, heads, labels, sent_ids = [], [], [], []
    for k, n in enumerate(words_per_sentence):
        tree = random_heads(n, rng)
        heads += [h + len(words) if h else 0 for h in tree]
        labels += ["root" if h == 0 else rng.choice(["nsubj", "obj", "det", "amod"])
                   for h in tree]
        words += [f"w{len(words) + i}" for i in range(n)]
        sent_ids += [k] * n
    subwords = [p for w in words
                for p in ((f"{w}@@", "x") if rng.random() < 1 / 3 else (w,))]
    return subwords, join_roots(Sentence(words, heads, labels, None, sent_ids))


def examples(lines: list[list[int]], seed: int = 0, vocab: int = 30) -> list[Example]:
    rng = random.Random(seed)
    out = []
    for i, sentences in enumerate(lines):
        subwords, tree = line(sentences, i, rng)
        src = [rng.randrange(4, vocab) for _ in subwords] + [EOS]
        tgt = [rng.randrange(4, vocab) for _ in range(rng.randrange(2, 7))]
        out.append(Example(i, src, tgt, subwords, tree))
    return out


# lines of different lengths (odd ones among them), one of them of three parser sentences
LINES = [[5], [2, 3, 1], [7], [3, 2]]
SCHEMES = [("abs+dep", {}), ("abs+dep", {"dep_terms": "key"}),
           ("abs+dep", {"dep_terms": "value"}),
           ("abs+dep", {"dep_l": 0, "subword_tree": "inherit"}),
           ("noabs+dep", {"dep_l": 4}), ("abs+gps", {"gps_layer": "all"}), ("abs+gps+dep", {})]


def model_and_batch(spec: str, options: dict, lines: list[list[int]], seed: int = 0):
    """A tiny model of ``spec`` and one batch of ``lines``, collated with its schemes."""
    exs = examples(lines, seed)
    entries = learn_options(scheme_entries(resolve(spec), {**options}), exs)
    torch.manual_seed(seed)
    cfg = ModelConfig(30, 30, d_model=D_MODEL, n_heads=HEADS, d_ff=32, encoder_layers=2,
                      decoder_layers=1, dropout=0.0, attention_dropout=0.0, schemes=entries)
    model = TransformerNMT(cfg)
    add_features(exs, model.schemes.schemes)
    return model, collate(exs, model.schemes.schemes)


def logits_and_grads(model, batch) -> tuple[torch.Tensor, dict]:
    model.zero_grad(set_to_none=True)
    logits, _ = model(batch.src, batch.tgt_in, batch.src_feats, batch.tgt_feats)
    loss, _ = label_smoothed_nll(logits.float(), batch.tgt_out, 0.1)
    loss.backward()
    return logits.float().detach(), {n: p.grad for n, p in model.named_parameters()}


def run(model, batch, mode: str, monkeypatch, dtype: torch.dtype | None = None):
    use_path(monkeypatch, mode)
    with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
        return logits_and_grads(model, batch)


def relative_error(got: torch.Tensor, expected: torch.Tensor, floor: float = 1e-6) -> float:
    """‖got − expected‖ / max(‖expected‖, floor)."""
    return float((got - expected).norm() / max(float(expected.norm()), floor))


def errors(got: tuple, expected: tuple, floor: float) -> tuple[float, float, float]:
    """(logits' relative error, the largest and the mean gradient error) of a step's ``got``
    logits and gradients against ``expected``."""
    grads = [relative_error(got[1][name], e, floor) for name, e in expected[1].items()]
    return relative_error(got[0], expected[0]), max(grads), sum(grads) / len(grads)


SCHEME_IDS = [f"{spec}-" + (",".join(f"{k}={v}" for k, v in options.items()) or "default")
              for spec, options in SCHEMES]


@pytest.mark.parametrize("spec,options", SCHEMES, ids=SCHEME_IDS)
@pytest.mark.parametrize("lines", [LINES, [[4, 3]]], ids=["batch", "one-line"])
def test_schemes_train_the_same_on_the_extended_path(spec, options, lines, monkeypatch):
    """A training step's logits and every parameter's gradient (the tables b^K, b^V, GPS's
    W_s^Q, W_s^K and its path encoder among them) on the extended path: in fp32 those of the
    explicit path within 1e-5 (logits) and 1e-4 (gradients, relative to at least 1e-3 of all
    gradients' norm, as ``bench/gpu_check.py``'s parity: W^K's bias gets a gradient of zero
    but for rounding); under bf16 autocast as close to fp32's as the explicit path's are, in
    the logits and on average over the gradients, up to a slack (the two round differently,
    and a tiny batch's gradients are noisy in bf16: over seeds, either path's mean error is
    1–16 % and neither is the closer one; 0.5 % in the logits)."""
    model, batch = model_and_batch(spec, options, lines)
    extended = counted(monkeypatch, "_attend_extended")
    expected = run(model, batch, "explicit", monkeypatch)
    assert not extended
    floor = 1e-3 * float(torch.stack([e.norm() for e in expected[1].values()]).norm())
    assert all(g is not None for g in expected[1].values())
    logits, worst, _ = errors(run(model, batch, "fused", monkeypatch), expected, floor)
    assert extended
    assert logits <= 1e-5 and worst <= 1e-4
    explicit = errors(run(model, batch, "explicit", monkeypatch, torch.bfloat16), expected, floor)
    fused = errors(run(model, batch, "fused", monkeypatch, torch.bfloat16), expected, floor)
    # the slack of the mean gradient error: 5 points, as a one-line batch's bf16 gradients
    # differ by several per cent between the two paths' roundings (seen: 4.9 % against 1.0 %
    # with the AVX2 kernels of ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2)
    for ours, theirs, slack in ((fused[0], explicit[0], 1e-2), (fused[2], explicit[2], 5e-2)):
        assert ours <= 2 * theirs + slack, (fused, explicit)


@pytest.mark.parametrize("options", [{}, {"dep_l": 0}, {"dep_l": 1, "subword_tree": "inherit"},
                                     {"chain_head": "first"}])
def test_depth_factors_are_the_dep_labels(options):
    """``dep``'s factors (each subword's depth, the batch's depths) give its labels exactly:
    padding, EOS, several parser sentences on one line, a line cut short by ``max_len``."""
    model, batch = model_and_batch("abs+dep", options, LINES + [[1], [6, 6]])
    feats = batch.src_feats
    l = model.schemes.schemes[1].clip_value()
    factors = depth_factors(feats["dep_depth"], feats["dep_depth_values"], l)
    assert torch.equal(factors.labels(), feats["dep_labels"].long())
    ex = examples([[6]])[0]
    ex.src = ex.src[:4] + [EOS]                                   # cut: 4 subwords kept
    cut = model.schemes.schemes[1].source_features(ex)
    assert cut["dep_depth"].shape == (5,) and cut["dep_depth"][4] == 0
    values = torch.arange(int(cut["dep_depth"].max()) + 1)
    assert torch.equal(depth_factors(cut["dep_depth"][None], values, l).labels()[0],
                       cut["dep_labels"].long())


@pytest.mark.parametrize("spec", ["abs+dep", "abs+gps", "abs+gps+dep"])
def test_a_gpu_step_takes_the_extended_path_and_the_cpu_keeps_its_own(spec, monkeypatch):
    """``auto``: a training step on ``meta`` tensors (a GPU's path choice, no host reads)
    attends through the extra dimensions wherever the scheme's terms are (no explicit path, no
    additive mask); on the CPU it does not (today's paths); a batch collated without the
    model's schemes lacks the batch's depths and sentence count and takes the other paths."""
    use_path(monkeypatch, "auto")
    model, batch = model_and_batch(spec, {}, LINES)
    calls = {name: counted(monkeypatch, name)
             for name in ("_attend_extended", "_attend_with_terms", "_additive_mask")}
    meta = torch.device("meta")
    logits_and_grads(model.train().to(meta), batch.to(meta))
    layers = model.cfg.encoder_layers if "dep" in spec else 1
    assert len(calls["_attend_extended"]) == layers
    assert not calls["_attend_with_terms"] and not calls["_additive_mask"]
    cpu_model, cpu_batch = model_and_batch(spec, {}, LINES)
    calls["_attend_extended"].clear()
    logits_and_grads(cpu_model, cpu_batch)
    assert not calls["_attend_extended"]
    use_path(monkeypatch, "fused")
    exs = examples(LINES)
    add_features(exs, cpu_model.schemes.schemes)
    logits_and_grads(cpu_model, collate(exs))                    # no batch features
    assert not calls["_attend_extended"]


def kernel_on(monkeypatch, device_type: str) -> None:
    """The label-bins kernel "runs" on ``device_type`` (``meta``: a GPU's path choice, with
    shapes and no launches)."""
    monkeypatch.setattr(kernels, "runs_on", lambda device: device.type == device_type)


needs_triton = pytest.mark.skipif(not kernels.triton_installed(),
                                  reason="the label-bins kernel's module imports Triton")


@needs_triton
@pytest.mark.parametrize("spec,options", [("abs+rel", {}), ("abs+rel", {"rel_terms": "key"}),
                                          ("abs+dep+rel", {}), ("abs+deplabel+rel", {})])
def test_a_gpu_step_takes_the_kernel_for_pair_labels(spec, options, monkeypatch):
    """``auto`` where the kernel runs (``meta`` standing for a GPU: forward and backward
    through its shapes, no launch): rel in every self-attention of both sides, rel with key
    terms only, and dep+rel (dep as extra dimensions of the kernel's heads) attend through the
    label-bins kernel, never the explicit path or the dense additive mask; deplabel+rel's two
    label tensors (no factors) keep the explicit path in the encoder."""
    use_path(monkeypatch, "auto")
    kernel_on(monkeypatch, "meta")
    model, batch = model_and_batch(spec, options, LINES)
    calls = {name: counted(monkeypatch, name)
             for name in ("_attend_kernel", "_attend_with_terms", "_additive_mask")}
    meta = torch.device("meta")
    logits_and_grads(model.train().to(meta), batch.to(meta))
    cfg = model.cfg
    if spec == "abs+deplabel+rel":
        assert len(calls["_attend_kernel"]) == cfg.decoder_layers
        assert len(calls["_attend_with_terms"]) == cfg.encoder_layers
    else:
        assert len(calls["_attend_kernel"]) == cfg.encoder_layers + cfg.decoder_layers
        assert not calls["_attend_with_terms"] and not calls["_additive_mask"]


def test_where_the_kernel_does_not_run_shaw_terms_keep_their_paths(monkeypatch):
    """Without the kernel (no Triton, an older GPU; ``meta`` here), with attention dropout,
    with ``DEPNMT_ATTENTION=explicit`` and on the CPU under ``auto``, abs+dep+rel attends as
    before: the explicit path, dep through the extra dimensions where rel is absent."""
    use_path(monkeypatch, "auto")
    meta = torch.device("meta")
    kernel = counted(monkeypatch, "_attend_kernel")
    explicit = counted(monkeypatch, "_attend_with_terms")
    model, batch = model_and_batch("abs+dep+rel", {}, LINES)
    logits_and_grads(model.train().to(meta), batch.to(meta))            # no kernel
    assert not kernel and explicit
    kernel_on(monkeypatch, "meta")
    for attn in (m for m in model.modules() if isinstance(m, MultiHeadAttention)):
        attn.dropout = 0.1
    logits_and_grads(model, batch.to(meta))                             # dropout
    assert not kernel
    use_path(monkeypatch, "explicit")
    for attn in (m for m in model.modules() if isinstance(m, MultiHeadAttention)):
        attn.dropout = 0.0
    logits_and_grads(model, batch.to(meta))
    assert not kernel
    use_path(monkeypatch, "auto")
    kernel_on(monkeypatch, "cpu")
    cpu_model, cpu_batch = model_and_batch("abs+dep+rel", {}, LINES)
    logits_and_grads(cpu_model, cpu_batch)
    assert not kernel


def test_the_kernel_runs_only_where_it_can(monkeypatch):
    """:func:`kernels.runs_on`: a CUDA GPU of compute capability 8.0 or newer with Triton 3.5
    or newer, where a tiny attention ran; the CPU only under the interpreter
    (``TRITON_INTERPRET=1``) of Triton 3.9 or newer; nowhere without Triton."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(kernels, "probe", lambda device: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    for version, on_cuda in (((3, 9), True), ((3, 5), True), ((3, 4), False), (None, False)):
        monkeypatch.setattr(kernels, "triton_version", lambda: version)
        assert (kernels.runs_on(cuda), kernels.runs_on(cpu)) == (on_cuda, False), version
    monkeypatch.setattr(kernels, "triton_version", lambda: (3, 9))
    monkeypatch.setattr(kernels, "probe", lambda device: "RuntimeError: no C compiler")
    assert not kernels.runs_on(cuda)
    monkeypatch.setattr(kernels, "probe", lambda device: None)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 5))
    assert not kernels.runs_on(cuda)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert kernels.runs_on(cpu) and not kernels.runs_on(cuda)
    monkeypatch.setattr(kernels, "triton_version", lambda: (3, 5))
    assert not kernels.runs_on(cpu)


def test_a_kernel_that_fails_to_start_is_said_once_and_left_alone(monkeypatch, capsys):
    """The probe's tiny attention failing (Triton compiles the kernel at its first use: a
    machine without a C compiler fails there) gives the reason, warned once per device, and
    the kernel is not used there."""
    monkeypatch.setattr(kernels, "_probed", {})

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Failed to find C compiler. Please specify via CC")
    monkeypatch.setattr(kernels, "label_bin_attention", no_compiler)
    cpu = torch.device("cpu")
    for _ in range(2):
        assert kernels.probe(cpu) == ("RuntimeError: Failed to find C compiler. Please "
                                      "specify via CC")
    assert capsys.readouterr().err.count("label-bins attention kernel does not run on cpu") == 1


def test_attention_imports_no_triton():
    """The model imports without Triton (CPU builds of torch lack it): the kernel's module is
    imported on first use only."""
    code = ("import sys, depnmt.model.transformer, depnmt.model.attention; "
            "print('triton' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "False"
