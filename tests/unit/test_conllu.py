"""CoNLL-U reading (validation, real UD treebanks) and writing (round trips, empty lines)."""

from __future__ import annotations

import gzip
import io

import pytest

from depnmt.core.conllu import (Sentence, format_sentence, read_conllu, read_conllu_numbered,
                                sentence_error, show, tree_problem, write_conllu)
from depnmt.core.errors import DepnmtError, InputError

UD_FILES = {  # file -> number of sentences (= "# sent_id" lines)
    "en_ewt-ud-dev.conllu": 2001, "en_ewt-ud-test.conllu": 2077,
    "de_gsd-ud-dev.conllu": 799, "de_gsd-ud-test.conllu": 977,
    "ja_gsd-ud-dev.conllu": 507, "ja_gsd-ud-test.conllu": 543,
}


def row(i, form, head, deprel="dep", upos="X", misc="_"):
    return f"{i}\t{form}\t_\t{upos}\t_\t_\t{head}\t{deprel}\t_\t{misc}"


def conllu_file(tmp_path, text, name="t.conllu"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def basic_tree_count(path):
    """Number of basic-tree words in a CoNLL-U file, counted independently of the reader."""
    n = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        first = line.split("\t", 1)[0]
        if line and not line.startswith("#") and first.isdigit():
            n += 1
    return n


@pytest.mark.parametrize("name", sorted(UD_FILES))
def test_reads_ud_gold_treebanks(shared_data, name):
    path = shared_data / "ud" / name
    sentences = list(read_conllu(path))
    assert len(sentences) == UD_FILES[name]
    assert sum(len(s) for s in sentences) == basic_tree_count(path)
    assert all(tree_problem(s.heads) is None for s in sentences)
    assert all(s.upos and len(s.upos) == len(s) for s in sentences)


def test_multiword_tokens_and_empty_nodes_are_skipped(shared_data, tmp_path):
    # de_gsd has "zum" = "zu dem" style ranges; the words are the syntactic words
    sentences = list(read_conllu(shared_data / "ud" / "de_gsd-ud-dev.conllu"))
    words = [w for s in sentences for w in s.words]
    assert "zu" in words and "dem" in words
    text = "\n".join(["1-2\tzum\t_\t_\t_\t_\t_\t_\t_\t_", row(1, "zu", 3), row(2, "dem", 3),
                      row(3, "Haus", 0, "root"), "3.1\tx\t_\t_\t_\t_\t_\t_\t_\t_", ""]) + "\n"
    path = conllu_file(tmp_path, text)
    assert [(s.words, s.heads) for s in read_conllu(path)] == [(["zu", "dem", "Haus"], [3, 3, 0])]


def test_round_trip_real_treebank(shared_data, tmp_path):
    sentences = list(read_conllu(shared_data / "ud" / "ja_gsd-ud-dev.conllu"))
    out = tmp_path / "out.conllu"
    assert write_conllu(out, sentences) == len(sentences)
    assert list(read_conllu(out)) == sentences


def test_round_trip_with_empty_lines_and_sentence_ids(tmp_path):
    sentences = [
        Sentence(["A", "dog", "."], [2, 0, 2], ["det", "root", "punct"], ["DET", "NOUN", "PUNCT"],
                 [0, 0, 0]),
        Sentence.empty(),
        Sentence(["Hi", ".", "Bye"], [0, 1, 1], ["root", "punct", "parataxis"], None, [0, 0, 1]),
        Sentence.empty(),
    ]
    out = tmp_path / "out.conllu"
    write_conllu(out, sentences)
    assert list(read_conllu(out)) == sentences
    text = out.read_text(encoding="utf-8")
    assert "# text = \n\n# text = Hi . Bye\n" in text
    assert "SentIdx=1" in text
    assert format_sentence(sentences[0]).endswith("\n\n")


def test_comment_only_block_without_text_is_skipped(tmp_path):
    path = conllu_file(tmp_path, "# global.columns = ID FORM\n\n# text = a\n" + row(1, "a", 0) +
                       "\n\n# text =\n\n")
    assert [s.words for s in read_conllu(path)] == [["a"], []]
    assert [line for line, _ in read_conllu_numbered(path)] == [3, 6]


@pytest.mark.parametrize("ending", ["\n", ""])
def test_gzip_and_missing_final_blank_line(tmp_path, ending):
    """A file that ends inside a sentence is what a cut-off copy looks like: an error naming
    the last line, not a tree without its missing words (the old reader accepted both)."""
    path = tmp_path / "t.conllu.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(row(1, "a", 2) + "\n" + row(2, "b", 0, "root") + ending)
    with pytest.raises(InputError, match="ends inside a sentence") as err:
        list(read_conllu(path))
    assert (err.value.path, err.value.line) == (str(path), 2)
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        fh.write(row(1, "a", 2) + "\n" + row(2, "b", 0, "root") + "\n\n")
    assert [s.heads for s in read_conllu(path)] == [[2, 0]]


GOOD = [row(1, "The", 2, "det"), row(2, "cat", 3, "nsubj"), row(3, "sleeps", 0, "root")]


def malformed(rows_):
    """A file whose second sentence (lines 6-9) has the given rows; line 6 is its comment."""
    return "\n".join(["# text = The cat sleeps", *GOOD, "", "# text = bad", *rows_, ""]) + "\n"


@pytest.mark.parametrize("rows_, line, fragment", [
    ([row(1, "a", 2), row(2, "b", 1), row(3, "c", 0)], 7, "cycle"),
    ([row(1, "a", 0), row(2, "b", 1), row(3, "c", 0)], 9, "several roots"),
    ([row(1, "a", 0), row(2, "b", 4), row(3, "c", 1)], 8, "out of range"),
    ([row(1, "a", 0), row(2, "b", -1), row(3, "c", 1)], 8, "HEAD '-1' is not a number"),
    ([row(1, "a", 0), "2\tb\t_\tX\t_\t_\t1\tdep\t_", row(3, "c", 1)], 8, "10 tab-separated"),
    ([row(1, "a", 0), row(2, "b", "x"), row(3, "c", 1)], 8, "HEAD 'x' is not a number"),
    ([row(1, "a", 0), row(3, "b", 1)], 8, "where 2 was expected"),
    ([row(1, "a", 2), row(2, "b", 1)], 7, "no word has HEAD 0"),
    ([row(1, "a", 0), row(2, "b", 1, misc="SentIdx=z")], 8, "SentIdx 'z' is not a number"),
    ([row(1, "a", 0), row(2, "b", 1, misc="SentIdx=0"), row(3, "c", 1)], 7, "SentIdx"),
], ids=["cycle", "two-roots", "head-too-big", "head-negative", "missing-column",
        "non-integer-head", "ids-out-of-order", "no-root", "bad-sentidx", "partial-sentidx"])
def test_malformed_conllu_names_file_and_line(tmp_path, rows_, line, fragment):
    path = conllu_file(tmp_path, malformed(rows_))
    with pytest.raises(InputError) as err:
        list(read_conllu(path))
    assert err.value.path == str(path)
    assert err.value.line == line
    assert fragment in str(err.value)
    assert str(err.value).startswith(f"{path}:{line}: ")


# Issue 10, item 8: each case below was accepted by the reader before the strict rules (a word
# lost or changed, a file read as empty); line 6 is the bad sentence's comment, 7.. its rows.
RANGE = "\t".join(["{}", "ab", "_", "_", "_", "_", "_", "_", "_", "_"])


@pytest.mark.parametrize("rows_, line, fragment", [
    ([row(1, "a", 0), row("\u0662", "b", 1)], 8, "ID '\u0662' is not a word"),
    ([row(1, "a", 0), row("+2", "b", 1)], 8, "ID '+2' is not a word"),
    ([row(1, "a", 0), row("02", "b", 1)], 8, "ID '02' is not a word"),
    ([row(1, "a", 0), row("0_2", "b", 1)], 8, "ID '0_2' is not a word"),
    ([row(1, "a", 0), row(" 2", "b", 1)], 8, "ID ' 2' begins or ends with whitespace"),
    ([row(1, "a", 0), row("2-", "b", 1), row(2, "c", 1)], 8, "ID '2-' is not a word"),
    ([row(1, "a", 0), row("1.", "b", 1), row(2, "c", 1)], 8, "ID '1.' is not a word"),
    ([row(1, "a", 0), row(2, "b", "0_1")], 8, "HEAD '0_1' is not a number"),
    ([row(1, "a", 0), row(2, "b", "+1")], 8, "HEAD '+1' is not a number"),
    ([row(1, "a", 0), row(2, "b", "01")], 8, "HEAD '01' is not a number"),
    ([row(1, "a", 2), row(2, "b", "\u0660")], 8, "HEAD '\u0660' is not a number"),
    ([row(1, "a", 0, misc="SentIdx=0"), row(2, "b", 1, misc="SentIdx=01")], 8,
     "SentIdx '01' is not a number"),
    ([row(1, "a", 0), row(2, "b", 1), RANGE.format("3-4"), row(3, "c", 1)], 9,
     "multiword range ends after the last word (3)"),
    ([row(1, "a", 0), RANGE.format("2-1"), row(2, "b", 1)], 8, "multiword range 2-1"),
    ([RANGE.format("1-2"), row(1, "a", 0), RANGE.format("2-3"), row(2, "b", 1), row(3, "c", 1)],
     9, "multiword range 2-3"),
    ([row(1, "a", 0), RANGE.format("3-4"), row(2, "b", 1)], 8, "multiword range 3-4"),
    ([RANGE.format("1-2"), RANGE.format("1.1"), row(1, "a", 0), row(2, "b", 1)], 8,
     "right after the multiword range 1-2"),
    ([row(1, "a", 0), RANGE.format("3.1"), row(2, "b", 1)], 8, "empty node 3.1 where 1.1"),
    ([row(1, "a", 0), RANGE.format("1.2"), row(2, "b", 1)], 8, "empty node 1.2 where 1.1"),
    ([row(1, "a", 0), row(2, "", 1)], 8, "empty FORM column"),
    ([row(1, "a", 0), row(2, "b", 1, deprel="")], 8, "empty DEPREL column"),
    ([row(1, "a", 0), row(2, "b ", 1)], 8, "FORM 'b ' begins or ends with whitespace"),
    ([row(1, "a", 0), row(2, "b", 1, upos="NO UN")], 8, "UPOS 'NO UN' contains whitespace"),
    ([row(1, "a", 0), row(2, "b", 1, deprel="nsubj\u00a0pass")], 8, "DEPREL"),
    ([row(1, "a", 0), "# a comment", row(2, "b", 1)], 8, "comment after a word line"),
    ([row(1, "a", 0), row(2, "b\0", 1)], 8, "NUL byte"),
    ([row(1, "a", 0), " ", "# text = b", row(1, "b", 0)], 8, "line of only whitespace"),
    ([row(1, "a", 0), "\t", row(1, "b", 0)], 8, "line of only whitespace"),
    ([row(1, "a", 0), RANGE.format("2-2"), row(2, "b", 1)], 8, "range 2-2 must span at least two"),
    ([RANGE.format("1-1"), row(1, "a", 0)], 7, "range 1-1 must span at least two"),
    ([RANGE.format("1-3"), row(1, "a", 0), row(2, "b", 1), RANGE.format("3-4"), row(3, "c", 1),
      row(4, "d", 1)], 10, "range 3-4 overlaps the multiword range on line 7"),
], ids=["arabic-indic-id", "plus-id", "zero-padded-id", "underscore-id", "space-id",
        "dangling-dash-id", "dangling-dot-id", "underscore-head", "plus-head", "zero-padded-head",
        "arabic-indic-head", "zero-padded-sentidx", "range-past-end", "reversed-range",
        "overlapping-range", "range-not-before-its-word", "empty-node-inside-range",
        "empty-node-before-its-word", "empty-node-skips-number",
        "empty-form", "empty-deprel", "form-trailing-space", "space-in-upos", "nbsp-in-deprel",
        "comment-after-words", "nul-byte", "space-line-as-break", "tab-line-as-break",
        "single-word-range", "single-word-range-first", "overlap-by-one-word"])
def test_strict_rules_name_file_and_line(tmp_path, rows_, line, fragment):
    path = conllu_file(tmp_path, malformed(rows_))
    with pytest.raises(InputError) as err:
        list(read_conllu(path))
    assert (err.value.path, err.value.line) == (str(path), line)
    assert fragment in str(err.value)
    assert len(str(err.value).splitlines()) == 1


HUGE = "9" * 5000      # more digits than int() converts (4300)


@pytest.mark.parametrize("rows_, line, fragment", [
    ([row(1, "a", 0), row(2, "b", HUGE)], 8, "HEAD '99999"),
    ([row(1, "a", 0), row(2, "b", 1234567890)], 8, "HEAD '1234567890' is too large"),
    ([row(1, "a", 0), row(HUGE, "b", 1)], 8, "ID '99999"),
    ([row(1, "a", 0), RANGE.format("2-" + HUGE), row(2, "b", 1)], 8, "ID '2-9999"),
    ([row(1, "a", 0), RANGE.format("1." + HUGE), row(2, "b", 1)], 8, "ID '1.9999"),
    ([row(1, "a", 0, misc="SentIdx=0"), row(2, "b", 1, misc="SentIdx=" + HUGE)], 8,
     "SentIdx '9999"),
], ids=["huge-head", "ten-digit-head", "huge-id", "huge-range", "huge-empty-node",
        "huge-sentidx"])
def test_numbers_too_large_are_one_line_errors(tmp_path, rows_, line, fragment):
    path = conllu_file(tmp_path, malformed(rows_))
    with pytest.raises(InputError) as err:
        list(read_conllu(path))
    assert (err.value.path, err.value.line) == (str(path), line)
    assert fragment in str(err.value) and "is too large" in str(err.value)
    assert len(str(err.value)) < 200                        # the value is shown shortened


def test_sentences_carry_their_origin(tmp_path):
    """Each tree knows where its block starts (for errors of later stages), without that
    changing what equal trees are."""
    path = conllu_file(tmp_path, malformed(GOOD) + "# text =\n\n")
    trees = list(read_conllu(path))
    assert [t.origin for t in trees] == [(str(path), 1), (str(path), 6), (str(path), 11)]
    assert trees[0] == trees[1] and trees[0] == Sentence(*[list(v) for v in (
        trees[0].words, trees[0].heads, trees[0].deprels, trees[0].upos)])


def test_sentence_error_names_file_and_line_when_known(tmp_path):
    path = conllu_file(tmp_path, malformed(GOOD))
    tree = list(read_conllu(path))[1]
    err = sentence_error(tree, 2, "3 words in the subwords but 4 in the tree")
    assert isinstance(err, InputError) and (err.path, err.line) == (str(path), 6)
    assert str(err) == f"{path}:6: 3 words in the subwords but 4 in the tree"
    assert str(sentence_error(Sentence(["a"], [0], ["root"]), 2, "x")) == "sentence 2: x"


@pytest.mark.parametrize("ending", ["\n", "\r\n", "\r", "mixed"])
def test_every_line_ending_reads_the_same(tmp_path, ending):
    """Lone CR used to make the whole file one comment: zero sentences, no error."""
    lines = malformed([RANGE.format("1-2"), row(1, "a", 0), row(2, "b", 1), RANGE.format("2.1"),
                       row(3, "c", 2)]).split("\n")
    if ending == "mixed":
        text = "".join(line + ("\r\n" if not line else ("\r", "\n", "\r\n")[k % 3])
                       for k, line in enumerate(lines[:-1]))   # (CR then LF would be one CRLF)
    else:
        text = ending.join(lines)
    path = tmp_path / "t.conllu"
    path.write_bytes(text.encode("utf-8"))
    assert [(s.words, s.heads) for s in read_conllu(path)] == [
        (["The", "cat", "sleeps"], [2, 3, 0]), (["a", "b", "c"], [0, 1, 2])]
    bad = text.replace("\t2\tdep", "\t5\tdep")   # an error's line number counts CR lines too
    path.write_bytes(bad.encode("utf-8"))
    with pytest.raises(InputError) as err:
        list(read_conllu(path))
    assert err.value.line == 11


def test_lenient_only_where_nothing_is_lost(tmp_path):
    """A byte order mark and several empty lines between sentences are accepted."""
    text = "\ufeff# text = a\n" + row(1, "a", 0) + "\n\n\n\n" + "\n".join(GOOD) + "\n\n\n"
    path = conllu_file(tmp_path, text)
    assert [s.words for s in read_conllu(path)] == [["a"], ["The", "cat", "sleeps"]]
    assert [line for line, _ in read_conllu_numbered(path)] == [1, 6]


def test_block_of_only_empty_nodes_or_ranges_is_an_error(tmp_path):
    """Without a '# text' comment such a block was skipped as if it were a file header."""
    path = conllu_file(tmp_path, RANGE.format("0.1") + "\n\n" + "\n".join(GOOD) + "\n\n")
    with pytest.raises(InputError, match="no word lines") as err:
        list(read_conllu(path))
    assert err.value.line == 1


def test_truncated_file_is_an_error(tmp_path):
    text = malformed([row(1, "a", 0), row(2, "b", 1), row(3, "c", 1)])
    cut = text[:text.rindex("\n3\t")]
    path = conllu_file(tmp_path, cut)
    with pytest.raises(InputError, match="ends inside a sentence") as err:
        list(read_conllu(path))
    assert err.value.line == 8


def test_stream_is_named_by_the_given_path():
    with pytest.raises(InputError) as err:
        list(read_conllu("<stdin>", io.BytesIO(malformed([row(1, "", 0)]).encode())))
    assert str(err.value).startswith("<stdin>:7: empty FORM column")


def test_show_keeps_messages_on_one_line():
    assert show("ab") == "'ab'"
    assert show("a\u2028b") == "'a\\u2028b'"
    assert show("x" * 50).endswith("…'") and len(show("x" * 50)) == 43


def test_text_without_words_is_an_error(tmp_path):
    path = conllu_file(tmp_path, "# text = lost words\n\n")
    with pytest.raises(InputError, match="no word lines"):
        list(read_conllu(path))


def test_tree_problem_on_good_and_bad_heads():
    assert tree_problem([2, 0, 2]) is None
    assert tree_problem([]) is None
    assert "no word has HEAD 0" in tree_problem([1])[1]  # self-loop: no root
    assert tree_problem([0, 2])[1].startswith("cycle")  # self-loop beside a root
    assert tree_problem([0, 3, 2])[0] == 1  # cycle 2 <-> 3


def test_unwritable_tokens_are_user_errors(tmp_path):
    with pytest.raises(DepnmtError, match="tab"):
        write_conllu(tmp_path / "x.conllu", [Sentence(["a\tb"], [0], ["root"])])
    assert not (tmp_path / "x.conllu").exists()


def test_sentence_rejects_inconsistent_lengths():
    with pytest.raises(ValueError):
        Sentence(["a", "b"], [0], ["root", "dep"])
