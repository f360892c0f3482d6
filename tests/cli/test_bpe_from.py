"""``bpe --subwords-from DIR``: new data segmented with an earlier bpe folder's or a trained
model's subwords, learning nothing. The segmenter files and vocabularies are DIR's byte for
byte (so ``train --init-from`` accepts the folder), the text is what DIR's segmenters make of
it (the same with --jobs 2), the unknown subwords are counted, and options that would learn
something, a folder without subwords and an output onto DIR are refused."""

from __future__ import annotations

import gzip
import json

import pytest

from depnmt.core.textio import read_lines
from depnmt.stages.bpe import Segmenter

from .conftest import TINY_MODEL, run_cli

SUBWORD_FILES = ["bpe.json", "codes.joint", "vocab.src.txt", "vocab.tgt.txt"]


@pytest.fixture(scope="module")
def other_prepare(shared_data, tmp_path_factory):
    """300 Multi30k pairs that the tiny bpe folder was not made from (dev/test 20 each)."""
    root = tmp_path_factory.mktemp("other")
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt",
                       encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(1400)][1060:]
        for split, part in (("train", lines[:300]), ("dev", lines[300:320]),
                            ("test", lines[320:340])):
            (root / f"{split}.{lang}").write_text("".join(part), encoding="utf-8")
    assert run_cli(["prepare", "--src-lang", "en", "--tgt-lang", "de",
                    *[a for split in ("train", "dev", "test") for side, lang in
                      (("src", "en"), ("tgt", "de"))
                      for a in (f"--{split}-{side}", root / f"{split}.{lang}")],
                    "-o", root / "prepare"]) == 0
    return root / "prepare"


def test_a_bpe_folder_s_subwords_on_new_data(tiny_bpe, other_prepare, tmp_path, capsys):
    out = tmp_path / "bpe-other"
    assert run_cli(["bpe", "-i", other_prepare, "-o", out, "--subwords-from", tiny_bpe]) == 0
    err = capsys.readouterr().err
    for name in SUBWORD_FILES:
        assert (out / name).read_bytes() == (tiny_bpe / name).read_bytes(), name
    for side, lang in (("src", "en"), ("tgt", "de")):
        seg = Segmenter.from_dir(tiny_bpe, side)
        for split in ("train", "dev", "test"):
            assert read_lines(out / f"{split}.{lang}") == \
                seg.segment_lines(read_lines(other_prepare / f"{split}.{lang}"))
        vocab = set(read_lines(tiny_bpe / f"vocab.{side}.txt"))
        vocab = {line.split("\t")[0] for line in vocab}
        pieces = [p for x in read_lines(out / f"train.{lang}") for p in x.split(" ") if p]
        missing = [p for p in pieces if p not in vocab]
        assert f"train.{lang}: {len(missing)} of {len(pieces)} subwords " \
               f"({len(set(missing))} distinct) are not in vocab.{side}.txt" in err
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["stage"] == "bpe"
    assert manifest["options"]["subwords_from"] == str(tiny_bpe.resolve())
    assert manifest["options"]["merges"] == 300          # what the source recorded
    assert set(SUBWORD_FILES) <= set(manifest["outputs"])
    assert run_cli(["bpe", "-i", other_prepare, "-o", tmp_path / "two", "--subwords-from",
                    tiny_bpe, "--jobs", "2"]) == 0
    for path in out.iterdir():
        if path.name != "manifest.json":
            assert (tmp_path / "two" / path.name).read_bytes() == path.read_bytes(), path.name


def test_a_model_s_subwords_let_it_be_fine_tuned(tiny_bpe, tiny_model, other_prepare,
                                                 tmp_path, capsys):
    """The folder made from a model's subwords passes --init-from's byte comparison; one made
    by learning new codes on the same data does not."""
    out = tmp_path / "bpe-model"
    assert run_cli(["bpe", "-i", other_prepare, "-o", out, "--subwords-from", tiny_model]) == 0
    for name in SUBWORD_FILES:
        assert (out / name).read_bytes() == (tiny_model / name).read_bytes(), name
    assert json.loads((out / "manifest.json").read_text())["options"]["subwords_from"] == \
        str(tiny_model.resolve())
    capsys.readouterr()
    assert run_cli(["train", "-i", out, "-o", tmp_path / "tuned", *TINY_MODEL, "--max-steps",
                    "2", "--init-from", tiny_model]) == 0
    assert "warm start from" in capsys.readouterr().err
    assert run_cli(["bpe", "-i", other_prepare, "-o", tmp_path / "learned", "--merges",
                    "300"]) == 0
    assert run_cli(["train", "-i", tmp_path / "learned", "-o", tmp_path / "refused",
                    *TINY_MODEL, "--max-steps", "2", "--init-from", tiny_model]) == 2
    assert "differs from the model's" in capsys.readouterr().err


def test_what_subwords_from_refuses(tiny_bpe, other_prepare, tmp_path, capsys):
    args = ["bpe", "-i", other_prepare, "--subwords-from", tiny_bpe]
    for flag in (["--merges", "500"], ["--separate"], ["--mode", "word"], ["--min-freq", "2"]):
        assert run_cli([*args, "-o", tmp_path / "x", *flag]) == 2
        named = "--joint/--separate" if flag[0] == "--separate" else flag[0]
        assert f"Error: {named} does not go with --subwords-from" in capsys.readouterr().err
    assert run_cli([*args[:-2], "-o", tmp_path / "x", "--subwords-from", other_prepare]) == 2
    err = capsys.readouterr().err
    assert "bpe.json found" in err and "Traceback" not in err
    before = {p.name: p.read_bytes() for p in tiny_bpe.iterdir() if p.is_file()}
    assert run_cli([*args, "-o", tiny_bpe]) == 2
    assert "Traceback" not in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in tiny_bpe.iterdir() if p.is_file()} == before
    assert not (tmp_path / "x").exists()


def test_other_languages_are_named(tiny_bpe, other_prepare, tmp_path, capsys):
    manifest = json.loads((other_prepare / "manifest.json").read_text())
    source = tmp_path / "fr-de"
    source.mkdir()
    for path in tiny_bpe.iterdir():
        if path.is_file():
            (source / path.name).write_bytes(path.read_bytes())
    theirs = json.loads((source / "manifest.json").read_text())
    theirs["src_lang"] = "fr"
    (source / "manifest.json").write_text(json.dumps(theirs))
    assert run_cli(["bpe", "-i", other_prepare, "-o", tmp_path / "out", "--subwords-from",
                    source]) == 0
    assert f"its src language is 'fr', this data's is '{manifest.get('src_lang', 'en')}'" in \
        capsys.readouterr().err
