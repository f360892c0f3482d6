"""The training-data cache under a reader that opens its arrays again (a pickled corpus: the
data loader's workers under the ``spawn`` or ``forkserver`` start method): an entry rebuilt
meanwhile by another run, from changed data, is refused, never read with the offsets of the
entry this run indexed."""

from __future__ import annotations

import pickle

import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.data.loader import BatchSource
from tests.cli.conftest import tiny_bpe  # noqa: F401  (the session fixture)
from tests.unit.test_datacache import cached, data, same_size_and_time  # noqa: F401

REPLACED = r"text-train\.de/tokens\.bin: cache array replaced while training"


def swap_lines_of_other_lengths(text: bytes) -> bytes:
    """The first line moved below the first line of another length: the same bytes, other
    rows (the offsets of the old rows cut the new array elsewhere)."""
    lines = text.splitlines(keepends=True)
    other = next(k for k, line in enumerate(lines) if len(line.split()) != len(lines[0].split()))
    return b"".join([*lines[1:other + 1], lines[0], *lines[other + 1:]])


def rebuilt_by_another_run(bpe, conllu) -> None:
    """``train.de`` edited (same size and modification time) and its cache entry rebuilt, as
    another ``depnmt train`` on the folder does at its start."""
    same_size_and_time(bpe / "train.de", swap_lines_of_other_lengths)
    cached(bpe, conllu)


def test_a_pickled_corpus_reads_the_rows_of_its_own_entry(data):  # noqa: F811
    bpe, conllu = data
    corpus, _ = cached(bpe, conllu)
    again = pickle.loads(pickle.dumps(corpus))
    assert [again[k].tgt for k in range(5)] == [corpus[k].tgt for k in range(5)]
    assert again[0].src_tree.heads == corpus[0].src_tree.heads


def test_a_pickled_corpus_refuses_an_entry_rebuilt_since(data):  # noqa: F811
    bpe, conllu = data
    corpus, _ = cached(bpe, conllu)
    expected = [corpus[k].tgt for k in range(3)]
    shipped = pickle.dumps(corpus)                  # what a spawned worker is given
    rebuilt_by_another_run(bpe, conllu)
    assert [corpus[k].tgt for k in range(3)] == expected      # the open reader: its own file
    with pytest.raises(DepnmtError, match=REPLACED):
        pickle.loads(shipped)[0]


def test_a_pickled_corpus_whose_entry_is_gone_is_one_error(data):  # noqa: F811
    bpe, conllu = data
    corpus, _ = cached(bpe, conllu)
    shipped = pickle.dumps(corpus)
    (bpe / "cache" / "text-train.de" / "tokens.bin").unlink()
    with pytest.raises(DepnmtError, match=r"tokens\.bin: cache array gone while training"):
        pickle.loads(shipped)[0]


def test_spawned_loader_workers_refuse_an_entry_rebuilt_since(data):  # noqa: F811
    """Through torch's data loader with spawned workers, as ``train --workers`` gives them
    the corpus where ``spawn`` is the start method (macOS; ``forkserver``: Python 3.14)."""
    bpe, conllu = data
    corpus, _ = cached(bpe, conllu)
    source = BatchSource(corpus, [[0, 1], [2, 3]], ())
    rebuilt_by_another_run(bpe, conllu)
    loader = torch.utils.data.DataLoader(source, batch_size=None, num_workers=1,
                                         multiprocessing_context="spawn")
    results = list(loader)
    assert all(isinstance(r, DepnmtError) for r in results)
    assert "cache array replaced while training" in str(results[0])
