"""Test likelihood files (``HYP.ref-logprob``) and the test NLL as a metric of the significance
tests (``depnmt.decoding.likelihood``)."""

from __future__ import annotations

import numpy as np
import pytest

from depnmt.core.errors import InputError
from depnmt.decoding import likelihood as lk
from depnmt.evaluation import significance as sig


def write(path, rows, header=lk.HEADER):
    path.write_text(header + "\n" + "".join(f"{lp}\t{t}\t{w}\n" for lp, t, w in rows),
                    encoding="utf-8")
    return path


def test_a_file_reads_as_sentence_statistics(tmp_path):
    path = write(tmp_path / "abs.de.ref-logprob", [(-6.0, 4, 3), (-2.5, 2, 1)])
    stats = lk.read_likelihood(path, 2)
    assert stats.tolist() == [[6.0, 3, 4], [2.5, 1, 2]]           # −logprob, words, tokens
    assert lk.run_nll(stats) == {"nll": pytest.approx(8.5 / 4),
                                 "nll_subword": pytest.approx(8.5 / 6)}
    assert lk.likelihood_file(tmp_path / "abs.de") == path
    with pytest.raises(InputError, match="1 sentences, but the references have 2"):
        lk.read_likelihood(write(path, [(-6.0, 4, 3)]), 2)
    with pytest.raises(InputError, match=r"ref-logprob:2: log-probability nan"):
        lk.read_likelihood(write(path, [("nan", 4, 3)]), 1)
    with pytest.raises(InputError, match="no words"):
        lk.read_likelihood(write(path, [(-1.0, 1, 0)]), 1)


def test_other_references_are_refused(tmp_path):
    a = lk.read_likelihood(write(tmp_path / "a", [(-6.0, 4, 3), (-2.5, 2, 1)]), 2)
    b = lk.read_likelihood(write(tmp_path / "b", [(-5.0, 9, 3), (-2.0, 2, 2)]), 2)
    lk.check_same_words([(tmp_path / "a", a), (tmp_path / "a2", a)])
    with pytest.raises(InputError, match=r"b:3: 2 reference words, but .*a has 1"):
        lk.check_same_words([(tmp_path / "a", a), (tmp_path / "b", b)])


def campaign(nll: float, seed: int, runs: int = 3, sentences: int = 40) -> np.ndarray:
    """``[runs, sentences, 3]`` statistics: about ``nll`` nats a word with sentence noise."""
    rng = np.random.default_rng(seed)
    words = np.random.default_rng(0).integers(3, 20, size=sentences)
    per_word = nll + rng.normal(0, 0.2, size=(runs, sentences))
    return np.stack([per_word * words, np.broadcast_to(words, (runs, sentences)),
                     np.broadcast_to(words + 2, (runs, sentences))], axis=-1).astype(float)


def test_stratified_randomization_on_the_test_nll():
    """The approximate randomization of depnmt.evaluation.significance takes the test NLL per word
    as its
    metric (additive sentence statistics): a difference of 0.2 nats a word is at the floor,
    runs of the same NLL are not told apart, and the pooled score is Σ −log p / Σ words."""
    metric = lk.PerUnitNLL()
    base, better, same = campaign(2.0, 1), campaign(1.8, 2), campaign(2.0, 3)
    total = base.reshape(-1, 3).sum(axis=0)
    assert sig.pooled_score(metric, base) == pytest.approx(total[0] / total[1])
    assert sig.pooled_score(lk.PerUnitNLL(lk.TOKENS), base) == pytest.approx(total[0] / total[2])
    p_better, p_same = sig.approximate_randomization_tests(
        [(metric, base, better), (metric, base, same)], shuffles=199, seed=5)
    assert p_better == pytest.approx(1 / 200) and p_same > 0.05
    assert sig.stratified_approximate_randomization(metric, base, base.copy(), 99) == 1.0
