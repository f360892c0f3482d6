"""``train --compile dynamic`` (:mod:`depnmt.training.compiled`): a training step compiled once
for the batcher's many shapes (and what would recompile without dynamic shapes), its loss and
gradients those of the uncompiled step, and the compile counts and their warning.

The backends here trace as inductor does but generate no code: ``eager`` where only
TorchDynamo's graphs and guards matter (the compile counts), ``aot_eager`` for the numbers
(AOTAutograd's traced backward too)."""

from __future__ import annotations

import copy

import pytest
import torch
from test_fused_attention import LINES, examples  # tests/unit is on sys.path

from depnmt.core.errors import DepnmtError
from depnmt.core.vocab import EOS
from depnmt.data.batches import Example, add_features, collate
from depnmt.model.schemes.names import resolve
from depnmt.model.schemes.registry import learn_options, scheme_entries
from depnmt.model.transformer import ModelConfig, TransformerNMT
from depnmt.training import compiled as compiled_module
from depnmt.training.compiled import Compiled
from depnmt.training.config import TrainOptions
from depnmt.training.step import Updater

CPU = torch.device("cpu")


pytestmark = pytest.mark.usefixtures("fresh_dynamo")   # tests/conftest.py


def model_of(spec: str, exs: list[Example], dropout: float = 0.0) -> TransformerNMT:
    """A seeded tiny model of ``spec`` in training mode, its options learned from ``exs``."""
    torch.manual_seed(0)
    entries = learn_options(scheme_entries(resolve(spec), {}), exs)
    cfg = ModelConfig(30, 30, d_model=16, n_heads=2, d_ff=32, encoder_layers=1,
                      decoder_layers=1, dropout=dropout, attention_dropout=0.0,
                      schemes=entries)
    return TransformerNMT(cfg).train()


def sized(shapes: list[tuple[int, int, int]]) -> list[list[Example]]:
    """Batches of exactly these (sentences, source length incl. EOS, target length incl.
    BOS) shapes, the first sentence of each the longest."""
    batches = []
    for b, s, t in shapes:
        batches.append([Example(len(batches) * 10 + i, [5] * (s - 1 - i % 2) + [EOS],
                                [6] * (t - 1 - i % 2)) for i in range(b)])
    return batches


# (B, S, T): the first with S == T (one symbol for both were sizes "duck"-typed), B and both
# lengths changing, a batch of one sentence last
SHAPES = [(3, 9, 9), (5, 12, 7), (2, 14, 11), (4, 6, 13), (1, 8, 5)]


def updater(model: TransformerNMT, mode: str) -> Updater:
    return Updater(model, CPU, None, TrainOptions(compile=mode, warmup=10))


def train_on(shapes: list[tuple[int, int, int]], spec: str = "abs+rel", dropout: float = 0.1
             ) -> Updater:
    """A compiled updater that trained one update on each batch of ``shapes``."""
    batches = sized(shapes)
    model = model_of(spec, [e for batch in batches for e in batch], dropout)
    up = updater(model, "dynamic")
    for batch in batches:
        up.step([collate(batch, model.schemes.schemes)])
    return up


def test_the_batchers_shapes_compile_once_and_a_batch_of_one_once_more():
    """Over 4 batches of different sizes and lengths the forward pass (dropout included: no
    graph break) and the loss are one graph each; the batch of one sentence compiles each once
    more (0/1 specialisation) and is the only recompile."""
    up = train_on(SHAPES[:4])
    counts = up.compiled.counts()
    assert (counts.graphs, counts.recompiles, counts.graph_breaks) == (2, 0, 0)
    up.step([collate(sized(SHAPES[4:])[0], up.model.schemes.schemes)])
    counts = up.compiled.counts()
    assert (counts.graphs, counts.recompiles, counts.graph_breaks) == (4, 2, 0)
    assert "size" in counts.reason


def test_without_dynamic_shapes_every_shape_compiles(monkeypatch):
    """The premise: compiled with static shapes (torch.compile's dynamic=False) each of the
    5 shapes compiles both functions anew."""
    real = torch.compile
    monkeypatch.setattr(compiled_module.torch, "compile",
                        lambda fn, dynamic, backend: real(fn, dynamic=False, backend=backend))
    counts = train_on(SHAPES).compiled.counts()
    assert (counts.graphs, counts.recompiles) == (2 * len(SHAPES), 2 * (len(SHAPES) - 1))


def test_tree_features_are_dynamic_too():
    """abs+dep+rel: the tree features' sizes (labels [B, S, S], the batch's depths) change
    with the batches without a recompile."""
    exs = examples(LINES + [[2, 2], [6], [1, 4, 2]], seed=3)
    model = model_of("abs+dep+rel", exs, dropout=0.1)
    add_features(exs, model.schemes.schemes)
    up = updater(model, "dynamic")
    for part in (exs[:3], exs[3:5], exs[5:]):
        up.step([collate(part, model.schemes.schemes)])
    counts = up.compiled.counts()
    assert (counts.graphs, counts.recompiles, counts.graph_breaks) == (2, 0, 0)


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["abs", "abs+dep+rel"])
def test_a_compiled_step_has_the_uncompiled_losses_and_gradients(spec, monkeypatch):
    """fp32, dropout 0, two batches of other shapes (the second runs the graph the first
    compiled): the summed losses within 1e-5 and every parameter's gradient within 1e-4 of the
    uncompiled step's (the tolerances of the attention paths' tests), AOTAutograd's traced
    backward included."""
    monkeypatch.setenv("DEPNMT_COMPILE_BACKEND", "aot_eager")
    exs = examples(LINES + [[3, 3], [5, 1]], seed=1)
    model = model_of(spec, exs)
    add_features(exs, model.schemes.schemes)
    eager, compiled = updater(model, "off"), updater(copy.deepcopy(model), "dynamic")
    for part in (exs[:4], exs[4:]):
        batch = collate(part, model.schemes.schemes)
        results = []
        for up in (eager, compiled):
            up.model.zero_grad(set_to_none=True)
            sums = up.backward(batch, float(batch.n_tokens))
            results.append((sums, {n: p.grad for n, p in up.model.named_parameters()}))
        (want, want_grads), (got, got_grads) = results
        assert want.keys() == got.keys()
        for name in want:
            assert torch.allclose(got[name], want[name], atol=1e-5), name
        for name, grad in want_grads.items():
            assert grad is not None and torch.allclose(got_grads[name], grad, atol=1e-4), name
    assert compiled.compiled.counts().recompiles == 0


def test_recompiles_that_keep_coming_are_warned_with_the_reason(monkeypatch):
    """A function recompiled at every call (a new constant each time): warned at 5 recompiles,
    not before, then not again until 10; the warning names TorchDynamo's reason."""
    warnings = []
    monkeypatch.setattr(compiled_module, "warn", warnings.append)
    compiler = Compiled("dynamic")

    def scaled(x, tag: str):
        return x * len(tag)
    run = compiler.loss(scaled)
    seen = []
    for n in range(1, 8):
        run(torch.ones(2), "x" * n)
        fields = compiler.observe()
        seen.append((fields["recompiles"], len(warnings)))
    assert seen == [(0, 0), (1, 0), (2, 0), (3, 0), (4, 0), (5, 1), (6, 1)]
    assert "recompiled 5 times" in warnings[0] and "tag" in warnings[0], warnings
    assert fields == {"compiled_graphs": 7, "recompiles": 6, "graph_breaks": 0}


def test_off_is_the_plain_step():
    compiler = Compiled("off")
    net = torch.nn.Linear(2, 2)
    assert compiler.forward(net) is net and compiler.observe() == {}
    assert compiler.counts() is None


def test_a_backend_that_fails_is_one_error_line():
    def broken(graph, inputs):
        raise RuntimeError("no C compiler\nand more")
    compiler = Compiled("dynamic")
    compiler.backend = broken
    with pytest.raises(DepnmtError) as caught:
        compiler.loss(lambda x: x + 1)(torch.ones(2))
    message = str(caught.value)
    assert message.startswith("--compile dynamic: torch.compile's ") and "\n" not in message
    assert "no C compiler" in message and "train without --compile" in message


def test_an_unknown_mode_or_backend_is_an_error(monkeypatch):
    with pytest.raises(DepnmtError, match="not one of off, dynamic"):
        Compiled("buckets")
    monkeypatch.setenv("DEPNMT_COMPILE_BACKEND", "nosuch")
    with pytest.raises(DepnmtError, match=r"\$DEPNMT_COMPILE_BACKEND: unknown .* 'nosuch'"):
        Compiled("dynamic")


def test_a_torch_too_old_for_it_is_one_error_naming_what_it_lacks(monkeypatch):
    """torch 2.3 (the oldest depnmt installs beside) has no duck-sizing switch and no compile
    callbacks: ``--compile dynamic`` is one error there, ``--compile off`` runs as before."""
    assert compiled_module.missing_features() == []          # the pinned torch has them all
    monkeypatch.setattr(compiled_module, "missing_features",
                        lambda: ["torch.fx.experimental._config.use_duck_shape"])
    with pytest.raises(DepnmtError, match=r"--compile dynamic: torch .* is too old for it \(it "
                                          r"lacks torch.fx.experimental._config.use_duck_shape\)"):
        Compiled("dynamic")
    assert not Compiled("off").on
