"""The training-data cache gives the examples, trees and features that loading the text
files in memory gives; it is the same for any number of processes; it is rebuilt when its
text changes and refused when damaged; errors name the file and line."""

from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest
import torch

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.subwords import merge_subwords, word_spans
from depnmt.core.trees import random_heads
from depnmt.core.vocab import Vocab
from depnmt.data.batches import attach_trees, load_parallel, scheme_features
from depnmt.data.cache import build as build_module
from depnmt.data.cache import open_corpus
from depnmt.model.schemes.registry import build_schemes, learn_options, scheme_entries
from depnmt.stages.parse import Sentence, write_conllu
from tests.cli.conftest import tiny_bpe  # noqa: F401  (the session fixture)

LABELS = ["nsubj", "obj", "det", "amod", "case", "punct"]
TAGS = ["NOUN", "VERB", "DET", "ADJ", "ADP", "PUNCT"]


def write_trees(words_of_lines: list[list[str]], path: Path, seed: int = 3) -> None:
    """Random trees; every third with UPOS, every other with SentIdx (two sentences)."""
    rng = random.Random(seed)
    trees = []
    for k, words in enumerate(words_of_lines):
        heads = random_heads(len(words), rng)
        rels = ["root" if h == 0 else rng.choice(LABELS) for h in heads]
        upos = [rng.choice(TAGS) for _ in words] if k % 3 == 0 and words else None
        sent = [0 if i < len(words) // 2 else 1 for i in range(len(words))] \
            if k % 2 and words else None
        trees.append(Sentence(words, heads, rels, upos, sent))
    write_conllu(path, trees)


@pytest.fixture
def data(tiny_bpe, tmp_path):  # noqa: F811
    """A copy of the tiny bpe folder (one source subword left out of the vocabulary, so
    that the cache meets unknown continued pieces) and trees over its source words."""
    bpe = tmp_path / "bpe"
    shutil.copytree(tiny_bpe, bpe, ignore=shutil.ignore_patterns("cache"))
    vocab = (bpe / "vocab.src.txt").read_text(encoding="utf-8").splitlines(keepends=True)
    dropped = next(i for i, line in enumerate(vocab) if line.split("\t")[0].endswith("@@")
                   and i > 10)
    (bpe / "vocab.src.txt").write_text("".join(vocab[:dropped] + vocab[dropped + 1:]),
                                       encoding="utf-8")
    lines = (bpe / "train.en").read_text(encoding="utf-8").splitlines()
    write_trees([merge_subwords(line.split()) for line in lines], tmp_path / "train.en.conllu")
    return bpe, tmp_path / "train.en.conllu"


def vocabs(bpe: Path) -> dict[str, Vocab]:
    return {side: Vocab.load(bpe / f"vocab.{side}.txt") for side in ("src", "tgt")}


def in_memory(bpe: Path, conllu: Path, max_len=None):
    v = vocabs(bpe)
    examples, dropped = load_parallel(bpe / "train.en", bpe / "train.de", v["src"], v["tgt"],
                                      max_len, drop_long=True)
    attach_trees(examples, conllu, "src")
    return examples, dropped


def cached(bpe: Path, conllu: Path, max_len=None, jobs=1):
    return open_corpus(bpe, "train", {"src": "en", "tgt": "de"}, vocabs(bpe),
                       {"src": conllu}, max_len, jobs=jobs)


@pytest.mark.parametrize("max_len", [None, 12])
def test_cache_gives_the_examples_and_trees_of_the_text(data, max_len):
    bpe, conllu = data
    expected, dropped = in_memory(bpe, conllu, max_len)
    corpus, left_out = cached(bpe, conllu, max_len)
    assert left_out == dropped and len(corpus) == len(expected)
    assert max_len or any(1 in ex.src for ex in expected)   # an unknown subword is in there
    for a, b in zip(expected, corpus):
        assert (a.index, a.src, a.tgt) == (b.index, b.src, b.tgt)
        assert word_spans(a.src_subwords) == word_spans(b.src_subwords)
        ta, tb = a.src_tree, b.src_tree
        assert (ta.heads, ta.deprels, ta.upos, ta.sent_ids) == \
            (tb.heads, tb.deprels, tb.upos, tb.sent_ids)
        assert ta.origin == tb.origin
    assert corpus.lengths().tolist() == [[len(e.src), len(e.tgt) + 1] for e in expected]


@pytest.mark.parametrize("schemes", [["abs", "dep", "rel"], ["abs", "gps"], ["abs", "pascal"],
                                     ["abs", "structural"], ["abs", "factors"],
                                     ["abs", "dbsa_enc"]])
def test_cache_examples_have_the_same_features_and_learned_options(data, schemes):
    bpe, conllu = data
    expected, _ = in_memory(bpe, conllu)
    corpus, _ = cached(bpe, conllu)
    entries = scheme_entries(schemes, {})
    assert learn_options(entries, corpus) == learn_options(entries, expected)
    built = build_schemes(learn_options(entries, expected))
    for k in range(0, len(expected), 7):
        fa, _ = scheme_features(expected[k], built)
        fb, _ = scheme_features(corpus[k], built)
        assert fa.keys() == fb.keys()
        assert all(torch.equal(fa[name], fb[name]) for name in fa)


def arrays_of(cache: Path) -> dict:
    """Every entry's arrays (count, dtype, sha256), without when they were written."""
    return {p.name: {name: {k: v for k, v in spec.items() if k != "mtime_ns"}
                     for name, spec in json.loads((p / "meta.json").read_text())["arrays"].items()}
            for p in cache.iterdir() if p.is_dir()}


def test_cache_is_the_same_built_in_pieces_by_several_processes(data, tmp_path, monkeypatch):
    bpe, conllu = data
    cached(bpe, conllu, jobs=1)
    one = arrays_of(bpe / "cache")
    shutil.rmtree(bpe / "cache")
    monkeypatch.setattr(build_module, "PIECE_BYTES", 2000)     # dozens of pieces
    assert len(build_module.pieces(conllu, blocks=True, size=2000)) > 20
    cached(bpe, conllu, jobs=2)
    two = arrays_of(bpe / "cache")
    assert one == two and len(one) == 3                  # text of both sides, source trees


def test_cache_is_rebuilt_when_its_text_changes(data):
    bpe, conllu = data
    corpus, _ = cached(bpe, conllu)
    first = corpus[0].tgt
    lines = (bpe / "train.de").read_text(encoding="utf-8").splitlines(keepends=True)
    lines[0], lines[1] = lines[1], lines[0]
    (bpe / "train.de").write_text("".join(lines), encoding="utf-8")
    again, _ = cached(bpe, conllu)
    assert again[0].tgt != first and again[1].tgt == first


def test_a_damaged_cache_array_is_refused_naming_the_file(data):
    bpe, conllu = data
    cached(bpe, conllu)
    array = bpe / "cache" / "text-train.de" / "tokens.bin"
    array.write_bytes(array.read_bytes()[:-4])
    with pytest.raises(DepnmtError, match=r"tokens\.bin: cache array has .* bytes.*truncated"):
        cached(bpe, conllu)
    array.write_bytes(array.read_bytes() + b"\0\0\0\0")           # the size again
    data = bytearray(array.read_bytes())
    data[0] ^= 0xFF                                            # a changed value
    array.write_bytes(bytes(data))
    with pytest.raises(DepnmtError, match=r"tokens\.bin: cache array does not match the "
                                          r"checksum"):
        cached(bpe, conllu)


def test_tree_file_that_does_not_fit_the_text_names_file_and_line(data, tmp_path):
    bpe, conllu = data
    lines = (bpe / "train.en").read_text(encoding="utf-8").splitlines()
    words = [merge_subwords(line.split()) for line in lines]
    write_trees(words[:-1], conllu)
    with pytest.raises(InputError, match=r"train\.en\.conllu: has 399 trees but the text has "
                                         r"400 lines"):
        cached(bpe, conllu)
    words[5] = words[5][:-1] + ["different"]
    write_trees(words + [["extra"]], conllu)
    with pytest.raises(InputError, match=r"train\.en\.conllu:\d+: tree 6 has words .* but "
                                         r"\S*train\.en:6 has"):
        cached(bpe, conllu)
    words[5] = merge_subwords(lines[5].split())
    write_trees(words + [["extra"]], conllu)
    with pytest.raises(InputError, match=r"has more trees than the text has lines \(400\)"):
        cached(bpe, conllu)


def test_cache_dir_elsewhere_leaves_the_data_folder_alone(data, tmp_path, monkeypatch):
    bpe, conllu = data
    monkeypatch.setenv("DEPNMT_CACHE_DIR", str(tmp_path / "elsewhere"))
    corpus, _ = cached(bpe, conllu)
    assert len(corpus) == 400 and not (bpe / "cache").exists()
    (folder,) = (tmp_path / "elsewhere").iterdir()
    assert folder.name.startswith("bpe-") and (folder / "text-train.en" / "meta.json").is_file()


def test_a_data_folder_that_cannot_hold_the_cache_says_what_to_do(data, monkeypatch):
    bpe, conllu = data
    (bpe / "cache").write_text("not a folder")
    with pytest.raises(DepnmtError, match=r"cache: cannot create the training data cache .*"
                                          r"set DEPNMT_CACHE_DIR"):
        cached(bpe, conllu)


def test_bpe_replaces_its_folder_cache_included(data, tmp_path):
    from tests.cli.conftest import run_cli
    bpe, conllu = data
    cached(bpe, conllu)
    prepare = json.loads((bpe / "manifest.json").read_text())["prepare_dir"]
    assert run_cli(["bpe", "-i", prepare, "-o", bpe, "--merges", "300"]) == 0
    assert not (bpe / "cache").exists()


def test_a_script_without_a_main_guard_can_build_the_cache(data, tmp_path):
    """The cache build's workers are forked: a script that trains at its top level (no
    ``if __name__ == "__main__":``) is not run again in them."""
    import subprocess
    import sys
    bpe, conllu = data
    script = tmp_path / "script.py"
    script.write_text(
        "from pathlib import Path\n"
        "from depnmt.data.cache import build, open_corpus\n"
        "from depnmt.core.vocab import Vocab\n"
        "build.PIECE_BYTES = 2000\n"
        f"bpe, conllu = Path({str(bpe)!r}), Path({str(conllu)!r})\n"
        "v = {s: Vocab.load(bpe / f'vocab.{s}.txt') for s in ('src', 'tgt')}\n"
        "corpus, _ = open_corpus(bpe, 'train', {'src': 'en', 'tgt': 'de'}, v,\n"
        "                        {'src': conllu}, None, jobs=2)\n"
        "print('pairs', len(corpus))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["pairs", "400"]


def same_size_and_time(path: Path, edit) -> None:
    """``path``'s bytes replaced by ``edit(bytes)`` (as many), its modification time kept: as
    ``cp -p``, ``rsync -t`` or a restored backup leave an edited file."""
    st = path.stat()
    data = edit(path.read_bytes())
    assert len(data) == st.st_size and data != path.read_bytes()
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)


def swap_first_lines(data: bytes) -> bytes:
    lines = data.splitlines(keepends=True)
    return b"".join([lines[1], lines[0], *lines[2:]])


def flip_first_byte(data: bytes) -> bytes:
    return bytes([data[0] ^ 0xFF]) + data[1:]


def test_an_edit_under_the_same_size_and_time_rebuilds_the_cache(data):
    bpe, conllu = data
    corpus, _ = cached(bpe, conllu)
    first, second = corpus[0].tgt, corpus[1].tgt
    same_size_and_time(bpe / "train.de", swap_first_lines)
    again, _ = cached(bpe, conllu)
    assert again[0].tgt == second and again[1].tgt == first


def test_a_cache_array_changed_under_the_same_size_and_time_is_refused(data):
    bpe, conllu = data
    cached(bpe, conllu)
    array = bpe / "cache" / "text-train.de" / "tokens.bin"
    same_size_and_time(array, flip_first_byte)
    with pytest.raises(DepnmtError, match=r"text-train\.de/tokens\.bin: cache array does not "
                                          r"match the checksum in its meta\.json"):
        cached(bpe, conllu)


def test_the_corpus_gives_the_sha256_of_its_sources_each_read_once(data, monkeypatch):
    """What a record of the training data reuses (no second read of the corpus)."""
    from depnmt.data.cache import arrays
    from depnmt.data.record import sha256
    bpe, conllu = data
    cached(bpe, conllu)                                 # built
    read = []
    monkeypatch.setattr(arrays, "sha256", lambda path: read.append(path) or sha256(path))
    corpus, _ = cached(bpe, conllu)                     # checked
    files = [bpe / "train.en", bpe / "vocab.src.txt", bpe / "train.de", bpe / "vocab.tgt.txt",
             conllu]
    assert corpus.source_digests == {f.name: sha256(f) for f in files}
    sources = [path for path in read if path.suffix != ".bin"]
    assert sorted(sources) == sorted(files)             # each once, the arrays once each too
    assert len(read) - len(sources) == 9 and len(set(read)) == len(read)


def test_train_uses_an_edit_under_the_same_size_and_time_and_refuses_a_changed_array(
        tiny_bpe, tmp_path, capsys):  # noqa: F811
    from tests.cli.conftest import TINY_MODEL, run_cli
    bpe = tmp_path / "bpe"
    shutil.copytree(tiny_bpe, bpe, ignore=shutil.ignore_patterns("cache"))

    def train(out: str) -> tuple[int, str]:
        status = run_cli(["train", "-i", bpe, "-o", tmp_path / out, *TINY_MODEL,
                          "--max-steps", "1"])
        return status, capsys.readouterr().err

    assert train("m1")[0] == 0
    same_size_and_time(bpe / "train.de", swap_first_lines)
    status, err = train("m2")
    assert status == 0
    assert f"rebuilt the training data cache {bpe / 'cache' / 'text-train.de'}" in err
    meta = json.loads((bpe / "cache" / "text-train.de" / "meta.json").read_text())
    from depnmt.data.record import sha256
    assert meta["sources"]["train.de"]["sha256"] == sha256(bpe / "train.de")
    array = bpe / "cache" / "text-train.en" / "offsets.bin"
    same_size_and_time(array, flip_first_byte)
    status, err = train("m3")
    assert status == 2
    assert err.strip().splitlines()[-1] == (
        f"error: {array}: cache array does not match the checksum in its meta.json (changed or "
        f"damaged): delete {array.parent} and train again to rebuild it")
