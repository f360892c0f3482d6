"""The prepare stage: line alignment, filters, bad input, named corpora, manifest."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from depnmt.cli import main
from depnmt.core.errors import DepnmtError
from depnmt.core.textio import count_lines, read_lines
from depnmt.stages import corpora
from depnmt.stages.tokenize import make_tokenizer


def run(*args: str) -> int:
    """Run ``depnmt ARGS``; return the exit status (0 when ``main`` returns normally)."""
    try:
        main([str(a) for a in args])
    except SystemExit as exc:
        return exc.code or 0
    return 0


def write(path: Path, lines: list[str] | bytes) -> Path:
    """Write a text file (lines joined by newlines) or raw bytes; ``.gz`` names are gzipped."""
    data = lines if isinstance(lines, bytes) else "".join(f"{line}\n" for line in lines).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


def manifest(out: Path) -> dict:
    return json.loads((out / "manifest.json").read_text(encoding="utf-8"))


def own_files(tmp_path: Path, train: tuple[list, list], dev: tuple[list, list] | None = None,
              test: tuple[list, list] | None = None, suffix: str = "") -> list[str]:
    """Write en/de files into ``tmp_path`` and return the matching command-line arguments."""
    args = ["--src-lang", "en", "--tgt-lang", "de"]
    for split, pair in (("train", train), ("dev", dev), ("test", test)):
        if pair is not None:
            for side, lang, lines in (("src", "en", pair[0]), ("tgt", "de", pair[1])):
                args += [f"--{split}-{side}", write(tmp_path / f"{split}.{lang}{suffix}", lines)]
    return args


TRAIN = (["A dog runs.", "Two cats sleep on the warm sofa today.", "", "A bird sings."],
         ["Ein Hund rennt.", "Zwei Katzen schlafen heute auf dem warmen Sofa.", "Leer.",
          "Ein Vogel singt."])
EVAL = (["Hello.", "Bye."], ["Hallo.", "Tschüss."])


def test_writes_all_files_aligned_with_manifest(tmp_path):
    out = tmp_path / "out"
    assert run("prepare", *own_files(tmp_path, TRAIN, EVAL, EVAL), "-o", out) == 0
    assert read_lines(out / "train.en") == ["A dog runs .", "Two cats sleep on the warm sofa "
                                            "today .", "A bird sings ."]
    assert read_lines(out / "train.raw.de")[0] == "Ein Hund rennt."
    m = manifest(out)
    assert m["stage"] == "prepare" and m["src_lang"] == "en" and m["tgt_lang"] == "de"
    assert m["options"]["src_lang"] == "en"
    assert set(m["outputs"]) == {f"{s}.{kind}{lang}" for s in ("train", "dev", "test")
                                 for kind in ("", "raw.") for lang in ("en", "de")}
    assert m["counts"]["train"] == {"read": 4, "kept": 3,
                                    "dropped": {"empty": 1, "too_short": 0, "too_long": 0,
                                                "wrong_language": 0}}
    assert m["inputs"]["dev.tgt"].endswith("dev.de")
    assert make_tokenizer(m["tokenizers"]["tgt"]).config() == m["tokenizers"]["tgt"]
    assert m["tokenizers"]["src"]["kind"] == "moses"


def test_mismatched_files_name_both_files_and_counts(tmp_path, capsys):
    args = own_files(tmp_path, (["a", "b", "c"], ["x", "y"]))
    assert run("prepare", *args, "--dev-size", "1", "--test-size", "1", "-o", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert f"{tmp_path / 'train.en'} has 3 lines" in err and f"{tmp_path / 'train.de'} has 2" in err
    assert not (tmp_path / "o" / "manifest.json").exists()


def test_mismatched_eval_files_are_caught_too(tmp_path, capsys):
    args = own_files(tmp_path, TRAIN, EVAL, (["only one"], ["eins", "zwei"]))
    assert run("prepare", *args, "-o", tmp_path / "o") == 2
    assert "test.en has 1 lines but" in capsys.readouterr().err


def test_empty_lines_and_invalid_utf8_keep_eval_line_counts(tmp_path, capsys):
    dev_en = write(tmp_path / "d.en", b"Good morning.\n\nBad \xff byte.\n   \n")
    dev_de = write(tmp_path / "d.de", b"Guten Morgen.\nLeer links.\nSchlecht.\n\n")
    out = tmp_path / "out"
    args = own_files(tmp_path, TRAIN)
    assert run("prepare", *args, "--dev-src", dev_en, "--dev-tgt", dev_de, "--test-size", "1",
               "-o", out) == 0
    err = capsys.readouterr().err
    assert f"{dev_en}:3: invalid UTF-8" in err
    assert "dev: 2 kept pairs have an empty side" in err
    assert read_lines(out / "dev.en") == ["Good morning .", "", "Bad \ufffd byte .", ""]
    assert count_lines(out / "dev.raw.de") == 4
    assert manifest(out)["counts"]["dev"]["kept"] == 4


def test_filters_drop_both_sides_together_and_are_counted(tmp_path):
    out = tmp_path / "out"
    args = own_files(tmp_path, TRAIN, EVAL, EVAL)
    assert run("prepare", *args, "--max-len", "5", "--filter-eval", "-o", out) == 0
    assert read_lines(out / "train.en") == ["A dog runs .", "A bird sings ."]
    assert read_lines(out / "train.de") == ["Ein Hund rennt .", "Ein Vogel singt ."]
    assert read_lines(out / "train.raw.de") == ["Ein Hund rennt.", "Ein Vogel singt."]
    counts = manifest(out)["counts"]
    assert counts["train"]["dropped"] == {"empty": 1, "too_short": 0, "too_long": 1,
                                          "wrong_language": 0}
    assert counts["dev"] == {"read": 2, "kept": 2, "dropped": {"empty": 0, "too_short": 0,
                                                               "too_long": 0, "wrong_language": 0}}


def test_min_len_zero_keeps_empty_pairs_and_min_len_counts_short_ones(tmp_path):
    args = own_files(tmp_path, TRAIN, EVAL, EVAL)
    assert run("prepare", *args, "--min-len", "0", "-o", tmp_path / "a") == 0
    assert count_lines(tmp_path / "a" / "train.en") == 4
    assert run("prepare", *args, "--min-len", "5", "-o", tmp_path / "b") == 0
    dropped = manifest(tmp_path / "b")["counts"]["train"]["dropped"]
    assert dropped == {"empty": 1, "too_short": 2, "too_long": 0, "wrong_language": 0}


def test_first_n_and_held_out_splits_from_the_end(tmp_path):
    src = [f"Sentence number {i}." for i in range(10)]
    tgt = [f"Satz Nummer {i}." for i in range(10)]
    out = tmp_path / "out"
    args = own_files(tmp_path, (src, tgt))
    assert run("prepare", *args, "--first", "8", "--dev-size", "2", "--test-size", "1",
               "-o", out) == 0
    assert read_lines(out / "train.raw.en") == src[:5]
    assert read_lines(out / "dev.raw.de") == tgt[5:7]
    assert read_lines(out / "test.raw.en") == src[7:8]
    m = manifest(out)
    assert m["options"]["first"] == 8 and m["options"]["held_out"] == {"dev": 2, "test": 1}
    assert m["counts"]["train"]["read"] == 5


def test_max_pairs_keeps_the_first_n_that_pass_the_filters(tmp_path, capsys):
    """Omote et al.'s Table 3 data: "the first N pairs of ≤ 50 words", i.e. filter, then count
    (--first would count before filtering)."""
    src = [f"Sentence {i}." if i % 3 else "A much longer sentence number " + str(i) + " ."
           for i in range(12)]
    tgt = [f"Satz {i}." for i in range(12)]
    args = own_files(tmp_path, (src, tgt), EVAL, EVAL)
    assert run("prepare", *args, "--max-len", "3", "--max-pairs", "4", "-o", tmp_path / "a") == 0
    assert read_lines(tmp_path / "a" / "train.raw.en") == [src[i] for i in (1, 2, 4, 5)]
    counts = manifest(tmp_path / "a")["counts"]["train"]
    assert (counts["read"], counts["kept"], counts["dropped"]["too_long"]) == (6, 4, 2)
    assert run("prepare", *args, "--max-len", "3", "--max-pairs", "9", "-o", tmp_path / "b") == 0
    assert count_lines(tmp_path / "b" / "train.en") == 8
    assert "only 8 pairs passed the filters, fewer than --max-pairs 9" in capsys.readouterr().err


LANGID = (["A dog runs in the park.", "Der Hund läuft im Park und bellt laut.",
           "Two children are playing football on the beach.", "The weather is nice today.",
           "A woman is reading a newspaper."],
          ["Ein Hund rennt im Park.", "The dog runs in the park and barks loudly.",
           "Zwei Kinder spielen am Strand Fußball.", "The weather is very nice today.",
           "Eine Frau liest eine Zeitung."])


def test_langid_filter_drops_pairs_in_another_language(tmp_path):
    """WMT16's filter in the GPS paper: pairs whose source is not English are dropped (and
    counted); ``both`` checks the target's language too (pair 3 has an English target)."""
    pytest.importorskip("py3langid")
    args = own_files(tmp_path, LANGID, EVAL, EVAL)
    assert run("prepare", *args, "--langid-filter", "src", "-o", tmp_path / "a") == 0
    assert read_lines(tmp_path / "a" / "train.raw.en") == [LANGID[0][i] for i in (0, 2, 3, 4)]
    m = manifest(tmp_path / "a")
    assert m["counts"]["train"]["dropped"]["wrong_language"] == 1
    assert m["options"]["langid_filter"] == "src" and m["langid"].startswith("py3langid ")
    assert m["counts"]["dev"]["kept"] == 2                  # dev/test keep every line
    assert run("prepare", *args, "--langid-filter", "both", "-o", tmp_path / "b") == 0
    assert read_lines(tmp_path / "b" / "train.raw.de") == [LANGID[1][i] for i in (0, 2, 4)]
    assert manifest(tmp_path / "b")["counts"]["train"]["dropped"]["wrong_language"] == 2
    assert run("prepare", *args, "-o", tmp_path / "c") == 0          # off by default
    assert count_lines(tmp_path / "c" / "train.en") == 5


def test_langid_filter_rejects_a_language_it_does_not_know(tmp_path, capsys):
    pytest.importorskip("py3langid")
    args = own_files(tmp_path, TRAIN)
    args[1] = "xx"
    assert run("prepare", *args, "--langid-filter", "src", "-o", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert "py3langid does not know language 'xx'" in err and "Traceback" not in err


def test_too_few_pairs_to_hold_out_is_a_clear_error(tmp_path, capsys):
    assert run("prepare", *own_files(tmp_path, TRAIN), "-o", tmp_path / "o") == 2
    assert "4 training pairs are too few to hold out 1000 dev + 1000 test" in \
        capsys.readouterr().err


def test_gzip_input(tmp_path):
    out = tmp_path / "out"
    assert run("prepare", *own_files(tmp_path, TRAIN, EVAL, EVAL, suffix=".gz"), "-o", out) == 0
    assert read_lines(out / "test.de") == ["Hallo .", "Tschüss ."]


def test_lowercase_applies_to_tokens_and_references(tmp_path):
    out = tmp_path / "out"
    assert run("prepare", *own_files(tmp_path, TRAIN, EVAL, EVAL), "--lowercase", "-o", out) == 0
    assert read_lines(out / "dev.en") == ["hello .", "bye ."]
    assert read_lines(out / "dev.raw.de") == ["hallo.", "tschüss."]
    assert manifest(out)["tokenizers"]["src"]["lowercase"] is True


@pytest.mark.parametrize("args, message", [
    (["--train-src", "{en}", "--src-lang", "en", "--tgt-lang", "de"],
     "--train-src needs --train-tgt"),
    (["--corpus", "multi30k", "--train-src", "{en}", "--train-tgt", "{de}"], "not both"),
    (["--train-src", "{en}", "--train-tgt", "{de}"], "--src-lang and --tgt-lang are required"),
    (["--train-src", "{en}", "--train-tgt", "{de}", "--src-lang", "en", "--tgt-lang", "en"],
     "both 'en'"),
    ([], "give a corpus"),
])
def test_usage_errors(tmp_path, capsys, args, message):
    files = {"en": write(tmp_path / "t.en", ["a"]), "de": write(tmp_path / "t.de", ["b"])}
    args = [a.format(**files) for a in args]
    assert run("prepare", *args, "--dev-size", "0", "--test-size", "0", "-o", tmp_path / "o") == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_help_has_an_example(capsys):
    assert run("prepare", "--help") == 0
    out = capsys.readouterr().out
    assert "depnmt prepare --corpus multi30k" in out and "--max-len" in out


# -- named corpora --------------------------------------------------------------------------------

def test_multi30k_first_2000(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("DEPNMT_DATA_DIR", str(shared_data))
    out = tmp_path / "out"
    assert run("prepare", "--corpus", "multi30k", "--first", "2000", "-o", out) == 0
    m = manifest(out)
    lines = {name: info["lines"] for name, info in m["outputs"].items()}
    assert lines == {f"{s}.{kind}{lang}": n for s, n in (("train", 2000), ("dev", 1014),
                                                         ("test", 1000))
                     for kind in ("", "raw.") for lang in ("en", "de")}
    assert m["inputs"]["corpus"] == "multi30k" and m["inputs"]["dev.src"].endswith("val.en.gz")
    assert (m["src_lang"], m["tgt_lang"]) == ("en", "de")
    assert read_lines(out / "train.en")[0].endswith(" .")


def test_small_parallel_enja_keeps_the_given_tokens(shared_data, tmp_path, monkeypatch):
    monkeypatch.setenv("DEPNMT_DATA_DIR", str(shared_data))
    out = tmp_path / "out"
    assert run("prepare", "--corpus", "small_parallel_enja", "--src-lang", "en", "--first", "100",
               "--dev-size", "0", "-o", out) == 0
    m = manifest(out)
    assert (m["src_lang"], m["tgt_lang"]) == ("en", "ja")
    assert m["tokenizers"]["src"]["kind"] == m["tokenizers"]["tgt"]["kind"] == "keep"
    given = read_lines(shared_data / "small_parallel_enja" / "dev.en")
    assert read_lines(out / "dev.en") == given
    assert read_lines(out / "dev.raw.en")[0] == make_tokenizer(m["tokenizers"]["src"]).detokenize(
        given[0].split())


def test_corpus_rejects_other_languages(shared_data, monkeypatch):
    monkeypatch.setenv("DEPNMT_DATA_DIR", str(shared_data))
    with pytest.raises(DepnmtError, match="multi30k is en/de"):
        corpora.corpus_files(corpora.get_corpus("multi30k"), "en", "fr")


FAKE = corpora.Corpus(name="fake_corpus", langs=("en", "de"), stems={"train": "train",
                      "dev": "valid", "test": "test"}, base_url="", description="test only",
                      remote_parts={"train": (".0", ".1")})


def test_download_concatenates_parts_into_the_cache(tmp_path, monkeypatch):
    remote = tmp_path / "remote"
    remote.mkdir()
    for lang in FAKE.langs:
        write(remote / f"train.{lang}.0", ["one"])
        write(remote / f"train.{lang}.1", ["two"])
        for stem in ("valid", "test"):
            write(remote / f"{stem}.{lang}", ["x"])
    fake = corpora.Corpus(**{**FAKE.__dict__, "base_url": remote.as_uri()})
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DEPNMT_DATA_DIR", str(tmp_path / "nothing"))
    src, tgt = corpora.corpus_files(fake, "de", "en")["train"]
    assert src == tmp_path / "home" / ".cache" / "depnmt" / "fake_corpus" / "train.de"
    assert read_lines(src) == ["one", "two"] and read_lines(tgt) == ["one", "two"]


def test_download_failure_is_one_clear_error(tmp_path, monkeypatch):
    fake = corpora.Corpus(**{**FAKE.__dict__, "base_url": (tmp_path / "missing").as_uri()})
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    with pytest.raises(DepnmtError, match="cannot download .*train.en.0.*DEPNMT_DATA_DIR"):
        corpora.locate(fake)
    assert not list((tmp_path / "home").rglob("train.en*"))
