"""Tests of the bpe stage (depnmt/stages/bpe.py, depnmt/commands/bpe.py) on tiny corpora."""

from __future__ import annotations

import gzip
import itertools
import json
import pickle
import random
from collections import Counter
from pathlib import Path
from unittest import mock

import pytest

from depnmt.cli import main
from depnmt.core import workers
from depnmt.core.errors import DepnmtError
from depnmt.core.manifest import load_manifest, write_manifest
from depnmt.core.subwords import escape_token, merge_subwords, word_index, word_spans
from depnmt.core.textio import TextBlock, read_lines, write_lines
from depnmt.core.vocab import Vocab
from depnmt.core.workers import InProcess, worker_pool
from depnmt.stages import bpe
from depnmt.stages.bpe import (MAX_CHUNK_CHARS, Segmenter, count_block, count_tokens, learn_codes,
                               presegment, segment_block, segment_file, split_tokens)

EN = "the a dog cat runs jumps over under lazy quick brown fox house houses running jumping".split()
DE = "der die das Hund Katze läuft springt über unter faule schnelle braune Fuchs Haus Häuser".split()
ODD = ["C@@", "@@", "x@@‡", "naïve", "Ωμέγα", "日本語", "🙂👍", "a\u0301", "\u200b", "@", "‡"]


def sentences(words: list[str], n: int, seed: int | str) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(1, 9))) for _ in range(n)]


def make_prepare_dir(path: Path, train_n: int = 60, splits=("train", "dev", "test"),
                     extra_src: list[str] = ()) -> Path:
    """A prepare folder as `depnmt prepare` would write it (tokenized text + manifest)."""
    outputs = []
    for split, (lang, words) in itertools.product(splits, (("en", EN), ("de", DE))):
        n = train_n if split == "train" else 5
        lines = sentences(words, n, seed=f"{split}.{lang}")
        if lang == "en" and split == "train":
            lines[: len(extra_src)] = extra_src
        write_lines(path / f"{split}.{lang}", lines)
        outputs.append(f"{split}.{lang}")
    write_manifest(path, "prepare", inputs={}, options={}, outputs=outputs,
                   extra={"src_lang": "en", "tgt_lang": "de"})
    return path


def run_cli(args: list[str], capsys) -> tuple[int, str]:
    """Run ``depnmt ARGS``; return (exit status, stderr)."""
    try:
        main([str(a) for a in args])
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    return code, capsys.readouterr().err


@pytest.fixture()
def prepared(tmp_path: Path) -> Path:
    return make_prepare_dir(tmp_path / "prepare", extra_src=[" ".join(ODD)])


def random_token(rng: random.Random) -> str:
    alphabet = "ab@‡ ßé日\u0301🙂\txyz"
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 8))).replace(" ", "") or "q"


# -- alignment helpers -------------------------------------------------------------------------

def test_merge_and_alignment_of_hand_written_subwords():
    subwords = ["Two", "you@@", "ng", "b@@", "u@@", "sh@@", "es", "."]
    assert merge_subwords(subwords) == ["Two", "young", "bushes", "."]
    assert word_index(subwords) == [0, 1, 1, 2, 2, 2, 2, 3]
    assert word_spans(subwords) == [(0, 1), (1, 3), (3, 7), (7, 8)]


def test_dangling_continuation_is_stripped():
    assert merge_subwords(["a", "b@@"]) == ["a", "b"]
    assert merge_subwords(["a", "b@@", "c@@"]) == ["a", "bc"]
    assert word_index(["a", "b@@", "c@@"]) == [0, 1, 1]
    assert merge_subwords([]) == [] and word_index([]) == [] and word_spans([]) == []


def test_tokens_ending_with_separator_are_escaped_reversibly():
    seg = Segmenter()  # word mode: only the escape applies
    tokens = ["C@@", "@@", "x@@‡", "@@‡‡", "a@", "‡", "plain"]
    out = seg.segment(tokens)
    assert out == ["C@@‡", "@@‡", "x@@‡‡", "@@‡‡‡", "a@", "‡", "plain"]
    assert not any(piece.endswith("@@") for piece in out)
    assert merge_subwords(out) == tokens
    assert word_index(out) == list(range(len(tokens)))


# -- learning and segmenting -------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_segmenter(tmp_path_factory) -> tuple[Segmenter, list[str]]:
    path = tmp_path_factory.mktemp("tiny") / "train.en"
    lines = sentences(EN, 80, seed=1) + [" ".join(ODD)]
    write_lines(path, lines)
    counts = count_tokens(path)
    return Segmenter(learn_codes(counts, 40)).with_filter(counts, 2), lines


def test_segment_round_trips_training_sentences(tiny_segmenter):
    seg, lines = tiny_segmenter
    assert seg.merges > 0 and not seg.is_word_level
    for line in lines:
        tokens = split_tokens(line)
        subwords = seg.segment(tokens)
        assert merge_subwords(subwords) == tokens
        assert word_index(subwords)[-1] == len(tokens) - 1
        for w, (start, end) in enumerate(word_spans(subwords)):
            assert merge_subwords(subwords[start:end]) == [tokens[w]]


def test_segment_round_trips_random_and_long_tokens(tiny_segmenter):
    seg, _ = tiny_segmenter
    rng = random.Random(7)
    for _ in range(300):
        tokens = [random_token(rng) for _ in range(rng.randint(0, 6))]
        subwords = seg.segment(tokens)
        assert merge_subwords(subwords) == tokens
        assert len(set(word_index(subwords))) == len(tokens)
    long_token = "thelazyfox@@" * (3 * MAX_CHUNK_CHARS // 10)
    subwords = seg.segment(["a", long_token, "b"])
    assert merge_subwords(subwords) == ["a", long_token, "b"]
    assert word_index(subwords).count(1) == len(subwords) - 2


def new_copy(segmenter: Segmenter) -> Segmenter:
    """The same segmenter, built again: it has segmented nothing yet."""
    return Segmenter(segmenter.codes, joint=segmenter.joint,
                     filter_counts=segmenter.filter_counts,
                     vocab_threshold=segmenter.vocab_threshold)


def test_a_pickled_segmenter_keeps_what_it_segmented(tiny_segmenter):
    """What ``--jobs`` workers receive: the same segmenter with the tokens it has segmented
    (which :func:`presegment` relies on), and the same segmentation of new ones."""
    seg, lines = tiny_segmenter
    warm = new_copy(seg)
    warm.segment_lines(lines[:20])
    copy = pickle.loads(pickle.dumps(warm))
    assert copy._joined == warm._joined and len(copy._joined) > 0
    assert (copy.codes, copy.filter_counts, copy.vocab_threshold) == \
        (warm.codes, warm.filter_counts, warm.vocab_threshold)
    assert copy.segment_lines(lines) == new_copy(seg).segment_lines(lines)


def test_segment_lines_and_count_block_are_the_line_by_line_results(tiny_segmenter, tmp_path):
    """The bulk paths of the bpe stage (a token's subwords kept once made; counts of a whole
    block) give what segmenting and counting each line afresh gives, keys in first-seen order."""
    seg, lines = tiny_segmenter
    rng = random.Random(3)
    lines = lines + ["", " ", "  dog  cat ", "C@@ C@@‡ @@", "a\tb c\u00a0d"] + [
        " ".join(random_token(rng) for _ in range(rng.randint(0, 6))) for _ in range(200)]
    rng.shuffle(lines)
    for segmenter in (seg, Segmenter(seg.codes), Segmenter()):
        fresh = [" ".join(p for t in split_tokens(line)                # a new one per token
                          for p in new_copy(segmenter).segment([t]))
                 for line in lines]
        assert segmenter.segment_lines(lines) == fresh
        assert segmenter.segment_lines(lines) == fresh        # again, from what it kept
        assert [" ".join(segmenter.segment(split_tokens(x))) for x in lines] == fresh
    path = tmp_path / "train.en"
    write_lines(path, lines)
    expected: Counter = Counter()
    for line in lines:
        for token in split_tokens(line):
            expected[escape_token(token)] += 1
    counts, n = count_block(None, TextBlock(str(path), 1, path.read_bytes()))
    assert n == len(lines) and list(counts.items()) == list(expected.items())
    fresh_seg = new_copy(seg)
    text, new, n = segment_block({"src": fresh_seg}, ("src", TextBlock(str(path), 1,
                                                                       path.read_bytes())))
    segmented = seg.segment_lines(lines)
    assert n == len(lines) and text == "".join(f"{x}\n" for x in segmented)
    assert new == [(escape_token(t), " ".join(seg.segment([t]))) for t in   # first-seen order
                   dict.fromkeys(t for x in lines for t in split_tokens(x))]
    again, none, _ = segment_block({"src": fresh_seg}, ("src", TextBlock(str(path), 1,
                                                                         path.read_bytes())))
    assert again == text and none == []           # nothing new to this segmenter any more


def test_segment_file_counts_the_subwords_of_the_text(tiny_segmenter, tmp_path):
    """The subword counts made from the token counts and the blocks' reports of new tokens
    are the counts of the segmented text (keys in first-seen order when nothing was segmented
    before), whether one process segments the file or two (many small blocks: tokens new to
    both workers), with and without the vocabulary filter, and after presegment (the frequent
    tokens segmented before, in the pool); a token the counts never saw is an error."""
    seg, lines = tiny_segmenter
    rng = random.Random(5)
    lines = lines + ["", "a\tb c\u00a0d", "C@@ C@@‡ @@ x@@"] + [
        " ".join(random_token(rng) for _ in range(rng.randint(0, 6))) for _ in range(300)]
    rng.shuffle(lines)
    path, out = tmp_path / "train.en", tmp_path / "out.en"
    write_lines(path, lines)
    token_counts = count_tokens(path)
    for warm in (seg, Segmenter(seg.codes)):
        segmented = warm.segment_lines(lines)
        expected = Counter(p for x in segmented for p in split_tokens(x))
        for jobs in (1, 2):
            fresh = new_copy(warm)
            with mock.patch.object(workers, "BLOCK_BYTES", 200), \
                    worker_pool(jobs, {"src": fresh}) as pool:
                counts = segment_file(pool, "src", path, out, len(lines), token_counts, fresh)
            assert list(counts.items()) == list(expected.items())
            assert out.read_text(encoding="utf-8").split("\n")[:-1] == segmented
            fresh = new_copy(warm)
            with mock.patch.object(workers, "BLOCK_BYTES", 200), \
                    mock.patch.object(bpe, "PRESEGMENT_CHUNK", 7), \
                    worker_pool(jobs, {"src": fresh}) as pool:
                presegment(pool, {"src": fresh}, {"src": token_counts})
                known = {t for t, n in token_counts.items() if n >= 2}
                assert {escape_token(t) for t in fresh._joined} == known
                counts = segment_file(pool, "src", path, out, len(lines), token_counts, fresh)
            assert counts == expected
            assert out.read_text(encoding="utf-8").split("\n")[:-1] == segmented
        warmed = segment_file(InProcess({"src": warm}), "src", path, out, 1, token_counts, warm)
        assert warmed == expected
    short = Counter(dict(list(token_counts.items())[:-1]))
    with pytest.raises(DepnmtError, match="was not there when the file was counted"):
        segment_file(InProcess({"src": Segmenter(seg.codes)}), "src", path, out, 1, short)


def test_empty_tokens_are_dropped(tiny_segmenter):
    seg, _ = tiny_segmenter
    assert merge_subwords(seg.segment(["dog", "", "cat"])) == ["dog", "cat"]


def test_vocab_threshold_keeps_only_frequent_subwords(tiny_segmenter):
    seg, lines = tiny_segmenter
    allowed = {t for t, n in seg.filter_counts.items() if n >= seg.vocab_threshold}
    for line in lines:
        for piece in seg.segment(split_tokens(line)):
            assert piece in allowed or len(piece.removesuffix("@@")) == 1


def test_nothing_to_merge_gives_empty_codes():
    codes = learn_codes(Counter({"a": 3, "b": 1}), 100)
    seg = Segmenter(codes)
    assert seg.merges == 0
    assert seg.segment(["ab", "a"]) == ["a@@", "b", "a"]


def test_segmenter_saved_to_model_dir_segments_identically(tiny_segmenter, tmp_path):
    seg, lines = tiny_segmenter
    written = seg.save(tmp_path, "src")
    Segmenter().save(tmp_path, "tgt")
    assert sorted(written) == ["bpe.json", "bpevocab.src", "codes.src"]
    config = json.loads((tmp_path / "bpe.json").read_text(encoding="utf-8"))
    assert config["sides"]["tgt"] == {"mode": "word"}
    loaded = Segmenter.from_dir(tmp_path, "src")
    assert loaded.vocab_threshold == 2 and loaded.merges == seg.merges
    for line in lines:
        assert loaded.segment(split_tokens(line)) == seg.segment(split_tokens(line))
    assert Segmenter.from_dir(tmp_path, "tgt").is_word_level


# -- the stage ---------------------------------------------------------------------------------

def test_joint_bpe_stage(prepared, tmp_path, capsys):
    out = tmp_path / "bpe"
    code, err = run_cli(["bpe", "-i", prepared, "-o", out, "--merges", "30",
                         "--vocab-threshold", "2"], capsys)
    assert code == 0, err
    manifest = load_manifest(out, "bpe")
    assert manifest["codes"] == {"src": "codes.joint", "tgt": "codes.joint"}
    assert manifest["prepare_dir"] == str(prepared.resolve())
    assert manifest["options"]["merges"] == 30 and manifest["options"]["joint"] is True
    assert not (out / "codes.src").exists()
    assert Vocab.load(out / "vocab.src.txt") == Vocab.load(out / "vocab.tgt.txt")
    for split, lang in itertools.product(("train", "dev", "test"), ("en", "de")):
        tokens = [split_tokens(x) for x in read_lines(prepared / f"{split}.{lang}")]
        subwords = [x.split(" ") if x else [] for x in read_lines(out / f"{split}.{lang}")]
        assert [merge_subwords(s) for s in subwords] == tokens
        assert f"{split}.{lang}" in manifest["outputs"]
    train_en = read_lines(out / "train.en")
    seg = Segmenter.from_dir(out, "src")
    assert [" ".join(seg.segment(split_tokens(x))) for x in read_lines(prepared / "train.en")] \
        == train_en


def test_separate_bpe_stage_without_optional_splits(tmp_path, capsys):
    prepared = make_prepare_dir(tmp_path / "prepare", splits=("train",))
    out = tmp_path / "bpe"
    code, err = run_cli(["bpe", "-i", prepared, "-o", out, "--separate", "--merges", "20"], capsys)
    assert code == 0, err
    assert (out / "codes.src").exists() and (out / "codes.tgt").exists()
    assert not (out / "codes.joint").exists() and not (out / "dev.en").exists()
    assert load_manifest(out, "bpe")["codes"] == {"src": "codes.src", "tgt": "codes.tgt"}
    src, tgt = Vocab.load(out / "vocab.src.txt"), Vocab.load(out / "vocab.tgt.txt")
    assert src != tgt and "Hund" not in src.stoi


def test_word_mode_vocab_min_freq(tmp_path, capsys):
    prepared = make_prepare_dir(tmp_path / "prepare", extra_src=["rareword dog", "dog"])
    out = tmp_path / "words"
    code, err = run_cli(["bpe", "-i", prepared, "-o", out, "--mode", "word",
                         "--src-min-freq", "2", "--tgt-min-freq", "3"], capsys)
    assert code == 0, err
    assert read_lines(out / "train.en") == read_lines(prepared / "train.en")
    manifest = load_manifest(out, "bpe")
    assert manifest["codes"] == {"src": None, "tgt": None}
    assert manifest["options"]["min_freq"] == {"src": 2, "tgt": 3}
    src = Vocab.load(out / "vocab.src.txt")
    assert "dog" in src.stoi and "rareword" not in src.stoi
    assert all(n >= 3 for n in Vocab.load(out / "vocab.tgt.txt").counts[4:])
    assert Segmenter.from_dir(out, "src").is_word_level
    code, err = run_cli(["bpe", "-i", prepared, "-o", tmp_path / "w2", "--mode", "word",
                         "--merges", "50", "--merge-min-freq", "3"], capsys)
    assert code == 0 and "--merges has no effect with --mode word" in err
    assert "--merge-min-freq has no effect" in err and "--vocab-threshold" not in err


def test_missing_prepare_manifest_is_a_clean_error(tmp_path, capsys):
    (tmp_path / "prepare").mkdir()
    code, err = run_cli(["bpe", "-i", tmp_path / "prepare", "-o", tmp_path / "bpe"], capsys)
    assert code == 2
    assert err.startswith("error: ") and "manifest.json" in err and "Traceback" not in err


def test_changed_prepare_file_is_detected(prepared, tmp_path, capsys):
    with open(prepared / "train.de", "a", encoding="utf-8") as fh:
        fh.write("extra line\n")
    code, err = run_cli(["bpe", "-i", prepared, "-o", tmp_path / "bpe"], capsys)
    assert code == 2 and "error: " in err and "train.de" in err


@pytest.mark.parametrize("args, message", [
    (["--src-min-freq", "2"], "--separate"),
    (["-o", "SAME"], "must differ"),
])
def test_bad_options_are_clean_errors(prepared, tmp_path, capsys, args, message):
    args = [str(prepared) if a == "SAME" else a for a in args]
    base = ["bpe", "-i", prepared] + ([] if "-o" in args else ["-o", tmp_path / "bpe"])
    code, err = run_cli(base + args, capsys)
    assert code == 2 and err.startswith("error: ") and message in err


def test_help_explains_the_stage(capsys):
    try:
        main(["bpe", "--help"])
    except SystemExit as exc:
        assert not exc.code
    text = capsys.readouterr().out
    assert "PREPARE_DIR" in text and "--vocab-threshold" in text and "Writes into OUT_DIR" in text


# -- real data (one small check) ---------------------------------------------------------------

def test_multi30k_sample_round_trips(shared_data, tmp_path):
    path = shared_data / "multi30k" / "train.de.gz"
    if not path.exists():
        pytest.skip("multi30k not present")
    with gzip.open(path, "rt", encoding="utf-8") as fh:
        lines = [line.rstrip("\n") for line, _ in zip(fh, range(1000))]
    write_lines(tmp_path / "train.de", lines)
    counts = count_tokens(tmp_path / "train.de")
    seg = Segmenter(learn_codes(counts, 300))
    for line in lines:
        assert merge_subwords(seg.segment(split_tokens(line))) == split_tokens(line)
