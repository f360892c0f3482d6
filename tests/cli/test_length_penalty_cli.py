"""``--length-penalty gnmt|power``: train saves it with the model's search defaults, translate
overrides it, and ``--length-penalty power --at-limit cut`` decodes as the CTranslate2 export
does (same hypotheses, same scores log p / |Y|^alpha), which knows no other form."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .conftest import TINY_MODEL, run_cli


def nbest_rows(path: Path) -> list[tuple[str, str, float]]:
    """(SENT_ID, hypothesis, score) of each line of a ``--nbest`` file."""
    rows = [line.split(" ||| ") for line in path.read_text(encoding="utf-8").splitlines()]
    return [(sent, hyp, float(score)) for sent, hyp, score, _ in rows]


def test_power_at_limit_cut_reproduces_ctranslate2(tiny_model, tiny_bpe, tmp_path):
    pytest.importorskip("ctranslate2", reason="CTranslate2 is an optional extra")
    prepare = tiny_bpe.parent / "prepare"
    src = tmp_path / "src.en"
    src.write_text("".join((prepare / f"{split}.raw.en").read_text(encoding="utf-8")
                           for split in ("test", "dev")), encoding="utf-8")
    exported = tmp_path / "ct2"
    assert run_cli(["export", "-m", tiny_model, "-o", exported]) == 0
    search = ["--beam", "4", "--alpha", "1.0", "--nbest", "4", "-i", src]
    assert run_cli(["translate", "-m", tiny_model, *search, "--length-penalty", "power",
                    "--at-limit", "cut", "--precision", "fp32", "-o", tmp_path / "ours"]) == 0
    assert run_cli(["translate", "--ct2", exported, *search, "-o", tmp_path / "ct2.txt"]) == 0
    ours, theirs = nbest_rows(tmp_path / "ours"), nbest_rows(tmp_path / "ct2.txt")
    assert len(ours) >= 4 * 60 - 10                          # 60 lines, n-best lists of 4
    assert [row[:2] for row in ours] == [row[:2] for row in theirs]
    assert [row[2] for row in ours] == pytest.approx([row[2] for row in theirs], abs=2e-4)


def test_ctranslate2_refuses_the_gnmt_penalty(tmp_path, capsys):
    assert run_cli(["translate", "--ct2", tmp_path, "--length-penalty", "gnmt"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --length-penalty gnmt: CTranslate2 divides log p by "
                          "|Y|^alpha only") and "Traceback" not in err


def test_train_saves_the_form_and_translate_overrides_it(tiny_bpe, tmp_path):
    from depnmt.decoding.translate import Translator
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "2",
                    "--valid-every", "2", "--length-penalty", "power"]) == 0
    saved = json.loads((model / "config.json").read_text())["search"]
    assert saved["length_penalty"] == "power"
    assert Translator.from_model_dir(model, device="cpu").search_cfg.length_penalty == "power"
    given = Translator.from_model_dir(model, device="cpu", length_penalty="gnmt")
    assert given.search_cfg.length_penalty == "gnmt"
