"""``bench/decode.py --tiny``: one command reports depnmt's decoding (fp32, auto) against
CTranslate2 (float32, int8) on the same model: start-up and steady state apart, BLEU, and the
scheme models' speed as a ratio to abs (trained scheme models, or the abs weights grafted into a
scheme)."""

from __future__ import annotations

import re

import pytest
from click.testing import CliRunner

from tests.scripts import load_script


@pytest.mark.slow
def test_tiny_bench_reports_every_system_against_ctranslate2(tiny_model, tiny_bpe, tmp_path):
    pytest.importorskip("ctranslate2",
                        reason="CTranslate2 is an optional extra (pip install depnmt[ct2])")
    prepared = tiny_bpe.parent / "prepare"
    bench = load_script("decode")
    result = CliRunner().invoke(bench.main, [
        "-m", str(tiny_model), "-i", str(prepared / "test.raw.en"),
        "-r", str(prepared / "test.raw.de"), "--threads", "1", "--tiny",
        "--scheme-model", str(tiny_model), "--scheme", "abs+dep+rel", "--scheme", "abs+dbsa-dec",
        "--scheme-option", "dbsa_dec_layer=1",
        "--trees", str(random_trees(prepared, tmp_path / "test.en.conllu"))])
    assert result.exit_code == 0, result.output
    out = result.output
    assert re.search(r"8 lines, beam 4, 1 threads, 1 rounds, max tokens 8000, device cpu; "
                     r"load average [\d.]+ ", out)
    assert re.search(r'python -c "import torch": [\d.]+ s', out)
    assert "CPU flags: " in out
    rows = {m[0]: m[1:] for m in re.findall(
        r"^\| ([^|]+?) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| [\d. ]+ \|$", out,
        re.M)}
    assert set(rows) == {"depnmt fp32", "depnmt auto", "depnmt int8", "CTranslate2 float32",
                         "CTranslate2 int8"}, out
    assert rows["CTranslate2 float32"][2] == "1.00"               # the ratio's base
    assert all(float(start) > 0 and float(speed) > 0 for start, speed, _, _ in rows.values())
    schemes = re.findall(r"^\| (.+) \(decoding\) \| ([\d.]+) \| ([\d.]+) \|$", out, re.M)
    assert len(schemes) == 2 and schemes[0][2] == "1.00"        # abs, then the scheme model
    grafted = re.findall(r"^\| (.+) \(grafted\) \| ([\d.]+) \| ([\d.]+) \| ([\d.]+) \| "
                         r"(\d+) % \| ([-\d. ]+) \|$", out, re.M)
    assert [g[0] for g in grafted] == ["abs", "abs+dep+rel", "abs+dbsa-dec"], out
    assert grafted[0][2] == "1.00"
    assert grafted[1][4] == "100"        # zero relative tables: the abs model's outputs
    assert grafted[2][4] == "100"        # a parse head computing the head it replaces: too



def random_trees(prepared, out, lines: int = 8):
    """Random trees over the first ``lines`` tokenized test sentences, written to ``out``."""
    import random

    from depnmt.core.trees import random_heads
    from depnmt.stages.parse import Sentence, write_conllu
    rng = random.Random(3)
    words = [l.split() for l in (prepared / "test.en").read_text(encoding="utf-8").splitlines()]
    write_conllu(out, [Sentence(w, random_heads(len(w), rng), ["dep"] * len(w))
                       for w in words[:lines]])
    return out


def test_grafted_model_keeps_every_abs_weight(tiny_model, tiny_bpe, tmp_path):
    """``--scheme NAME``: the abs weights in a model of NAME, each in its place, the scheme's
    own parameters new; without ``--trees`` a usage error before anything is loaded."""
    import torch

    from depnmt.stages.parse import read_conllu
    from depnmt.storage.checkpoint import load_checkpoint
    from depnmt.storage.modeldir import default_checkpoint
    bench = load_script("decode")
    model, cfg = bench.grafted_model(tiny_model, "abs+dep+rel", [], {})
    assert [e["name"] for e in cfg.schemes] == ["abs", "dep", "rel"]
    state = load_checkpoint(default_checkpoint(tiny_model))["model"]
    own = model.state_dict()
    assert all(torch.equal(own[k], v) for k, v in state.items())
    assert set(own) - set(state)                                # the scheme's parameters,
    assert all(not own[k].any() for k in set(own) - set(state))  # zero
    dbsa, _ = bench.grafted_model(tiny_model, "abs+dbsa-dec", [], {"dbsa_dec_layer": 1})
    own, d_k = dbsa.state_dict(), dbsa.cfg.d_model // dbsa.cfg.n_heads
    head = [k for k in own if k.endswith("parse.q_proj.weight")]  # the parse head: decoder
    assert len(head) == 1 and torch.equal(own[head[0]],           # layer 1's head 0
                                          state["decoder.0.self_attn.q_proj.weight"][:d_k])
    prepared = tiny_bpe.parent / "prepare"
    trees = list(read_conllu(random_trees(prepared, tmp_path / "test.en.conllu")))
    for scheme in ("abs", "abs+rel"):         # the graft batches as the abs model: same steps
        tr = bench.grafted_translator(tiny_model, scheme, trees, {"beam": 4}, {}, "cpu", 123)
        assert (tr.max_tokens, tr.batch_size, tr.search_cfg.beam) == (123, 0, 4)
    no_trees = CliRunner().invoke(bench.main, ["-m", str(tiny_model), "-i",
                                               str(prepared / "test.raw.en"), "--scheme", "abs+rel"])
    assert no_trees.exit_code == 2 and "--scheme needs --trees" in no_trees.output


def test_ctranslate2_joins_only_where_it_runs(monkeypatch):
    """CPU: wherever it is installed; a GPU: only where its CUDA build sees one (else the bench
    reports depnmt's rows alone, with no ratio to it)."""
    import sys
    import types
    bench = load_script("decode")
    monkeypatch.setitem(sys.modules, "ctranslate2",
                        types.SimpleNamespace(get_cuda_device_count=lambda: 0))
    assert bench.ct2_on("cpu") and not bench.ct2_on("cuda")
    monkeypatch.setitem(sys.modules, "ctranslate2",
                        types.SimpleNamespace(get_cuda_device_count=lambda: 1))
    assert bench.ct2_on("cuda:0")
    monkeypatch.setitem(sys.modules, "ctranslate2", None)        # not installed
    assert not bench.ct2_on("cpu")
