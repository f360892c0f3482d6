"""``depnmt translate --quantize int8`` and ``depnmt.Translator.load(quantize="int8")``: one
line per input line, mostly the float model's translations; refused with ``--ct2``."""

from __future__ import annotations

import pytest
import torch

import depnmt

from .conftest import run_cli

pytestmark = pytest.mark.skipif(
    not {"x86", "fbgemm"} & set(torch.backends.quantized.supported_engines),
    reason="this torch build has no x86/fbgemm int8 kernels")


def test_int8_translates_every_line(tiny_model, tiny_bpe, tmp_path, capsys):
    lines = (tiny_bpe.parent / "prepare" / "test.raw.en").read_text().splitlines()[:8]
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in [*lines[:3], "", *lines[3:]]),
                      encoding="utf-8")
    outs = {}
    for flags in ([], ["--quantize", "int8"]):
        capsys.readouterr()
        assert run_cli(["translate", "-m", tiny_model, "-i", source, "--device", "cpu",
                        "--precision", "fp32", *flags]) == 0
        outs[bool(flags)] = capsys.readouterr().out.splitlines()
    assert len(outs[True]) == len(outs[False]) == 9 and outs[True][3] == ""
    same = sum(a == b for a, b in zip(outs[True], outs[False]))
    assert same >= 5, outs                           # int8 rounding changes a few at most
    api = depnmt.Translator.load(tiny_model, device="cpu", precision="fp32", quantize="int8")
    assert api.translate([*lines[:3], "", *lines[3:]]) == outs[True]     # the same batches


def test_int8_keeps_the_rest_in_fp32_unless_told(tiny_model):
    """Autocast's casts around the int8 layers (fp32 out) cost more than bf16 saves: auto
    means fp32 there; an explicit --precision bf16 is kept."""
    from depnmt.decoding.translate import Translator
    assert Translator.from_model_dir(tiny_model, None, "cpu", "auto", quantize="int8").amp is None
    kept = Translator.from_model_dir(tiny_model, None, "cpu", "bf16", quantize="int8")
    assert kept.amp is torch.bfloat16


def test_an_unknown_quantization_is_refused_before_anything_loads(tmp_path):
    from depnmt.core.errors import DepnmtError
    with pytest.raises(DepnmtError, match="'int4': choose one of none, int8"):
        depnmt.Translator.load(tmp_path / "no-model", quantize="int4")


def test_int8_with_ct2_is_a_clear_error(tiny_model, tmp_path, capsys):
    rc = run_cli(["translate", "--ct2", tmp_path, "--quantize", "int8"])
    assert rc != 0 and "depnmt export --quantization int8" in capsys.readouterr().err
