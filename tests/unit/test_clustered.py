"""Decisions on items grouped into sentences (depnmt.evaluation.clustered): copies of a
sentence's items are not more evidence, for the interval as for the paired test; items that
are their own sentences keep Wilson's interval and McNemar's test."""

from __future__ import annotations

import random

import pytest

from depnmt.evaluation.clustered import (design_effect, mcnemar_exact, paired_p, sentence_ids,
                                         sign_flip_p)
from depnmt.evaluation.contrastive import Accuracy, accuracy_of, wilson

rng = random.Random(7)
BASE = [rng.random() < 0.6 for _ in range(80)]
OTHER = [b or rng.random() < 0.3 for b in BASE]          # better on some items


def copied(values, k):
    return [v for v in values for _ in range(k)]


def test_sentence_ids_number_sources_in_order_of_first_appearance():
    assert sentence_ids(["b", "a", "b", "c", "a"]) == [0, 1, 0, 2, 1]


def test_one_item_a_sentence_has_no_design_effect_and_copies_have_theirs():
    one = list(range(len(BASE)))
    assert design_effect(BASE, one) == 1.0
    for k in (2, 5):
        assert design_effect(copied(BASE, k), copied(one, k)) == pytest.approx(k, rel=1e-12)
    assert design_effect([True] * 10, [0] * 10) == 1.0            # no variance
    # items of one sentence that disagree among themselves: less than independent, kept at 1
    assert design_effect([True, False] * 20, copied(range(20), 2)) == 1.0


def test_the_interval_of_copies_is_the_interval_of_one_item_a_sentence():
    one = accuracy_of(BASE, list(range(len(BASE))))
    five = accuracy_of(copied(BASE, 5), copied(range(len(BASE)), 5))
    assert one.interval() == wilson(sum(BASE), len(BASE))
    assert five.value == one.value and five.total == 5 * one.total
    assert five.interval() == pytest.approx(one.interval(), abs=1e-12)
    assert Accuracy(5 * sum(BASE), 5 * len(BASE)).interval()[1] - \
        Accuracy(5 * sum(BASE), 5 * len(BASE)).interval()[0] < 0.5 * (one.interval()[1] -
                                                                       one.interval()[0])


def test_the_paired_test_is_mcnemar_for_single_items_and_over_sentences_otherwise():
    one = list(range(len(BASE)))
    assert paired_p(BASE, OTHER, one) == ("mcnemar", mcnemar_exact(BASE, OTHER))
    # the sign-flip test over single items is McNemar's exact test by Monte Carlo
    assert sign_flip_p(BASE, OTHER, one) == pytest.approx(mcnemar_exact(BASE, OTHER), abs=0.01)
    test, p5 = paired_p(copied(BASE, 5), copied(OTHER, 5), copied(one, 5))
    assert test == "sign-flip" and p5 == sign_flip_p(BASE, OTHER, one)
    assert mcnemar_exact(copied(BASE, 5), copied(OTHER, 5)) < p5 / 10     # what it would claim
    assert paired_p(BASE, BASE, copied(range(40), 2)) == ("sign-flip", 1.0)
