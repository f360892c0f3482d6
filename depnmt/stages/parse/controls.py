"""Control trees: uninformative or degraded trees over the same words as the parser's.

A control answers the question a tree scheme's gain raises: does the model profit from the
*parser's* tree, or from the extra relative-position parameters and regularisation that any tree
would give? The same scheme trained on control trees of the same sentences tells.

Heads are in CoNLL-U convention (:class:`~depnmt.core.conllu.Sentence`): ``heads[i]`` is the
head of word ``i + 1``, 1-based, 0 for the root; every function here returns a single tree
(exactly one word with head 0, no cycle, heads in ``0..n``), whatever it is given. The kinds
(:data:`KINDS`):

``random-projective``
    uniform over the projective trees with one root word over ``n`` words
    (:func:`count_projective_trees`: 1, 2, 7, 30, 143, ... trees). Exact sampling from the
    inside counts of Eisner's (1996) span decomposition, whose derivations are in one-to-one
    correspondence with projective trees: every span's split is drawn with probability
    proportional to the number of trees each choice leaves, top-down (as trees are drawn from
    an inside chart in Johnson, Griffiths and Goldwater 2007). Unit arc weights make the
    counts depend on span lengths only, so they are computed once per length.
``random-nonprojective``
    uniform over all ``n ** (n - 1)`` trees with one root word (projective or not): a
    uniform labelled tree on the ``n`` words from a uniform Prüfer (1918) sequence, hung
    from a uniform root word (each rooted labelled tree arises from one sequence and one root).
``shuffled``
    the parser's tree with its words relabelled by a uniformly random permutation ``π`` of the
    positions: word ``π(i)`` takes word ``i``'s place in the tree (head ``π(head(i))``). The
    tree's shape (its unlabelled rooted form: every node's number of dependents, every depth)
    is kept exactly; which words fill it, and so the head distances, are random.
``left-branching`` / ``right-branching``
    chains: in a left-branching tree every word's head is the next word (the last word is the
    root); in a right-branching one, the previous word (the first word is the root).
``noise``
    the parser's tree with a fraction ``p`` of its non-root words' heads corrupted (parse
    noise): ``k`` of the ``m`` words whose head is a word are drawn, ``k = p·m`` rounded down or
    up at random so that its mean is ``p·m``; in turn, each drawn word takes a new head drawn
    uniformly from the words outside its own subtree other than its current head, so the
    result stays a tree. The root word keeps HEAD 0. A drawn word with no other possible head
    (the root's only dependent, heading all the other words) keeps its head.

Labels (:data:`LABEL_MODES`), applied after the heads. Whatever the mode, a control tree is a
valid UD tree: its root word (HEAD 0) has DEPREL ``root`` and no other word has it (nor a
subtype ``root:...``). ``keep`` leaves every other word's DEPREL as the parser gave it (it stays
the word's, wherever the word now attaches), except that the parser's root word, when it is no
longer the root, gets ``dep`` (UD's unspecified relation); the new root's own label gives way
to ``root``. ``shuffle`` deals the labels of the parser's other words (all but its root word,
any ``root`` among them as ``dep``) to the control tree's other words in a uniformly random
order, so that a UD tree keeps its multiset of labels. ``constant`` writes ``dep`` on every
word but the root, so that the labels say nothing beyond the tree. A control tree keeps the
words and UPOS of the parser's tree and has no ``SentIdx``: it is one tree over the whole
line, not parser sentences joined.

**Seeds.** Every sentence draws from its own generator, seeded by a hash of the control's seed
and kind and the sentence's words (:func:`sentence_rng`): a control tree is a deterministic
function of the sentence, as a parser's tree is. So the same seed gives the same trees in any
order or batching, a sentence repeated in the corpus gets the same control tree each time, and
``translate`` (which applies a model's control to the trees it parses) gives a test sentence
the control tree the control folder has for it.
"""

from __future__ import annotations

import hashlib
import heapq
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from depnmt.core.conllu import Sentence
from depnmt.core.errors import DepnmtError, UsageError
from depnmt.core.optionspec import SEED, Choice, FloatRange, Folder, check_options, option

KINDS = ("random-projective", "random-nonprojective", "shuffled", "left-branching",
         "right-branching", "noise")
FROM_PARSER = ("shuffled", "noise")         # kinds that change the parser's tree
LABEL_MODES = ("keep", "shuffle", "constant")
ROOT_LABEL, CONSTANT_LABEL = "root", "dep"
# How labels are made: "ud" (every control made today: one root label, on the root); "legacy"
# (a control recorded before that rule, without "label_rule"): ``keep`` left every label as the
# parser gave it and ``shuffle`` permuted all of them, so a word other than the root could carry
# ``root``. A model trained on such a control is translated with the labels it was trained on.
LABEL_RULES = ("ud", "legacy")


# ---------------------------------------------------------------------------------------------
# Random projective trees: counts of Eisner's spans and top-down sampling

_COMPLETE = [1]         # _COMPLETE[d]: complete spans of d + 1 words headed at one end
_INCOMPLETE = [0]       # _INCOMPLETE[d]: incomplete spans (an arc between the ends), d >= 1


def _grow_counts(d: int) -> None:
    """Extend the span counts up to distance ``d``: an incomplete span of distance ``d`` is a
    complete span from each end meeting in the middle (``d`` places to meet); a complete span
    is the arc to its head's outermost dependent ``e`` words away, then that dependent's
    complete span to the end."""
    while len(_COMPLETE) <= d:
        k = len(_COMPLETE)
        _INCOMPLETE.append(sum(_COMPLETE[a] * _COMPLETE[k - 1 - a] for a in range(k)))
        _COMPLETE.append(sum(_INCOMPLETE[e] * _COMPLETE[k - e] for e in range(1, k + 1)))


def count_projective_trees(n: int) -> int:
    """The number of projective trees with one root word over ``n`` words (1 for ``n`` = 0)."""
    if n == 0:
        return 1
    _grow_counts(n)
    return sum(_COMPLETE[r - 1] * _COMPLETE[n - r] for r in range(1, n + 1))


def _weighted_index(weights: Sequence[int], rng: random.Random) -> int:
    """An index drawn with probability proportional to ``weights`` (exact integers)."""
    x = rng.randrange(sum(weights))
    for i, w in enumerate(weights):
        if x < w:
            return i
        x -= w
    raise AssertionError("unreachable")


def random_projective_heads(n: int, rng: random.Random) -> list[int]:
    """A projective tree over ``n`` words drawn uniformly (module docstring); ``[n]`` heads."""
    if n == 0:
        return []
    _grow_counts(n)
    heads = [0] * (n + 1)                   # 1-based positions; heads[0] unused
    c, inc = _COMPLETE, _INCOMPLETE
    root = 1 + _weighted_index([c[r - 1] * c[n - r] for r in range(1, n + 1)], rng)
    todo = [("C", root, 1), ("C", root, n)]
    while todo:
        span, h, end = todo.pop()
        d, step = abs(end - h), (1 if end > h else -1)
        if span == "C":                     # complete span from head h to end
            if d == 0:
                continue
            e = 1 + _weighted_index([inc[e] * c[d - e] for e in range(1, d + 1)], rng)
            m = h + step * e                # h's outermost dependent on this side
            heads[m] = h
            todo += [("I", h, m), ("C", m, end)]
        else:                               # incomplete span: the arc h -> end
            a = _weighted_index([c[a] * c[d - 1 - a] for a in range(d)], rng)
            k = h + step * a                # h's side ends at k, the dependent's starts after
            todo += [("C", h, k), ("C", end, k + step)]
    return heads[1:]


# ---------------------------------------------------------------------------------------------
# Other kinds

def random_nonprojective_heads(n: int, rng: random.Random) -> list[int]:
    """A tree over ``n`` words drawn uniformly from all ``n ** (n - 1)`` (module docstring)."""
    if n <= 1:
        return [0] * n
    code = [rng.randrange(n) for _ in range(n - 2)]         # a uniform Prüfer sequence
    degree = [1] * n
    for v in code:
        degree[v] += 1
    leaves = [v for v in range(n) if degree[v] == 1]
    heapq.heapify(leaves)
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for v in code:                          # decoding: join the smallest leaf to v
        leaf = heapq.heappop(leaves)
        neighbours[leaf].append(v)
        neighbours[v].append(leaf)
        degree[v] -= 1
        if degree[v] == 1:
            heapq.heappush(leaves, v)
    u, v = heapq.heappop(leaves), heapq.heappop(leaves)
    neighbours[u].append(v)
    neighbours[v].append(u)
    root = rng.randrange(n)
    heads = [0] * n
    seen, todo = {root}, [root]
    while todo:                             # orient every edge away from the root
        node = todo.pop()
        for other in neighbours[node]:
            if other not in seen:
                seen.add(other)
                heads[other] = node + 1
                todo.append(other)
    return heads


def permuted_heads(heads: Sequence[int], order: Sequence[int]) -> list[int]:
    """The tree ``heads`` with word ``i`` (0-based) moved to position ``order[i]``: the head of
    word ``order[i] + 1`` is ``order[heads[i] - 1] + 1`` (0 stays 0). Same shape, any words."""
    out = [0] * len(heads)
    for i, h in enumerate(heads):
        out[order[i]] = order[h - 1] + 1 if h else 0
    return out


def shuffled_heads(heads: Sequence[int], rng: random.Random) -> list[int]:
    """``heads`` relabelled by a uniformly random permutation (:func:`permuted_heads`)."""
    order = list(range(len(heads)))
    rng.shuffle(order)
    return permuted_heads(heads, order)


def branching_heads(n: int, direction: str) -> list[int]:
    """A chain over ``n`` words: ``left`` (every head the next word, the last word the root)
    or ``right`` (every head the previous word, the first word the root)."""
    if direction == "left":
        return [i + 2 for i in range(n - 1)] + [0] * (n > 0)
    if direction == "right":
        return [i for i in range(n)]
    raise ValueError(f"direction {direction!r}: expected 'left' or 'right'")


def subtree(heads: Sequence[int], node: int) -> set[int]:
    """The 0-based nodes of ``node``'s subtree (itself included)."""
    kids: list[list[int]] = [[] for _ in heads]
    for i, h in enumerate(heads):
        if h:
            kids[h - 1].append(i)
    found, todo = {node}, [node]
    while todo:
        for child in kids[todo.pop()]:
            found.add(child)
            todo.append(child)
    return found


def noisy_heads(heads: Sequence[int], p: float, rng: random.Random) -> list[int]:
    """``heads`` with a fraction ``p`` (0..1) of its non-root heads re-drawn so that the result
    stays a tree (module docstring: ``noise``)."""
    out = list(heads)
    dependents = [i for i, h in enumerate(out) if h]
    expected = p * len(dependents)
    k = int(expected) + (rng.random() < expected - int(expected))
    for node in rng.sample(dependents, k):
        below = subtree(out, node)
        options = [h for h in range(1, len(out) + 1) if h - 1 not in below and h != out[node]]
        if options:
            out[node] = rng.choice(options)
    return out


def is_root_label(label: str) -> bool:
    """Whether ``label`` is UD's ``root`` relation (or a subtype ``root:...``)."""
    return label == ROOT_LABEL or label.startswith(ROOT_LABEL + ":")


def control_labels(deprels: Sequence[str], parser_heads: Sequence[int], heads: Sequence[int],
                   mode: str, rng: random.Random) -> list[str]:
    """The DEPRELs of a control tree ``heads`` from the parser's tree (``parser_heads``,
    ``deprels``): ``root`` on the root word (HEAD 0) and on no other word; the others by
    ``mode`` (module docstring: ``keep``, ``shuffle`` or ``constant``). Lists of ``n``."""
    if mode not in LABEL_MODES:
        raise ValueError(f"labels {mode!r}: expected one of {', '.join(LABEL_MODES)}")
    others = [CONSTANT_LABEL if is_root_label(d) else d for d in deprels]
    if mode == "constant":
        others = [CONSTANT_LABEL] * len(deprels)
    elif mode == "shuffle":
        parser_root = list(parser_heads).index(0) if 0 in parser_heads else -1
        deck = [d for i, d in enumerate(others) if i != parser_root]
        rng.shuffle(deck)
        others = [ROOT_LABEL if h == 0 else deck.pop() for h in heads]
    return [ROOT_LABEL if h == 0 else label for h, label in zip(heads, others)]


def legacy_control_labels(deprels: Sequence[str], heads: Sequence[int], mode: str,
                          rng: random.Random) -> list[str]:
    """The DEPRELs that controls recorded without ``label_rule`` were made with (see
    :data:`LABEL_RULES`): ``keep`` the parser's, ``shuffle`` a permutation of all of them,
    ``constant`` as today. Kept so that a model trained on such trees is given the same ones."""
    if mode == "keep":
        return list(deprels)
    if mode == "shuffle":
        out = list(deprels)
        rng.shuffle(out)
        return out
    return control_labels(deprels, heads, heads, mode, rng)


def is_projective(heads: Sequence[int]) -> bool:
    """Whether the tree ``heads`` is projective: every word between a head and its dependent
    is in the head's subtree (equivalently, no two arcs cross and no arc covers the root)."""
    for d, h in enumerate(heads, start=1):
        if not h:
            continue
        below = subtree(heads, h - 1)
        if any(w - 1 not in below for w in range(min(h, d) + 1, max(h, d))):
            return False
    return True


# ---------------------------------------------------------------------------------------------
# A control: kind, seed, labels, noise

@dataclass(frozen=True)
class Control:
    """A control of kind :data:`KINDS` with its ``seed``, label mode and (kind ``noise``
    only) the fraction ``noise`` of heads corrupted. Invalid values: a :class:`DepnmtError`."""

    kind: str
    seed: int = 1
    labels: str = "keep"
    noise: float | None = None
    label_rule: str = "ud"          # :data:`LABEL_RULES`; "legacy" only when read from a record

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DepnmtError(f"control kind {self.kind!r}: choose one of {', '.join(KINDS)}")
        if self.labels not in LABEL_MODES:
            raise DepnmtError(f"control labels {self.labels!r}: choose one of "
                              f"{', '.join(LABEL_MODES)}")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise DepnmtError(f"control seed {self.seed!r}: expected an integer")
        if self.kind == "noise":
            if not isinstance(self.noise, (int, float)) or isinstance(self.noise, bool) \
                    or not 0 < self.noise <= 1:
                raise DepnmtError(f"control kind 'noise' needs a fraction 0 < p <= 1 of heads to "
                                  f"corrupt (--noise P), not {self.noise!r}")
        elif self.noise is not None:
            raise DepnmtError(f"--noise is for control kind 'noise', not '{self.kind}'")
        if self.label_rule not in LABEL_RULES:
            raise DepnmtError(f"control label_rule {self.label_rule!r}: expected one of "
                              f"{', '.join(LABEL_RULES)}")

    def to_dict(self) -> dict[str, Any]:
        """What manifests and model configs record (read back by :meth:`from_dict`)."""
        return {"kind": self.kind, "seed": self.seed, "labels": self.labels,
                "noise": self.noise, "label_rule": self.label_rule}

    @classmethod
    def from_dict(cls, record: Any) -> "Control":
        """The control a manifest or model config recorded; a :class:`DepnmtError` when it is
        not one. A record without ``label_rule`` (written before it existed) is ``legacy``."""
        fields = {"kind", "seed", "labels", "noise"}
        if not isinstance(record, dict) or set(record) - {"label_rule"} != fields:
            raise DepnmtError(f"not a tree control: {json.dumps(record)[:80]} (expected "
                              f"kind, seed, labels, noise and label_rule)")
        return cls(**{"label_rule": "legacy", **record})

    def describe(self, seed: bool = True) -> str:
        """``noise p=0.2 (seed 1, labels keep)``; ``seed`` False leaves the seed out (``noise
        p=0.2 (labels keep)``: what the runs of one system share, each of which may draw its
        control trees with a seed of its own)."""
        noise = f" p={self.noise}" if self.kind == "noise" else ""
        rule = "" if self.label_rule == "ud" else ", labels as made before the one-root rule"
        drawn = f"seed {self.seed}, " if seed else ""
        return f"{self.kind}{noise} ({drawn}labels {self.labels}{rule})"

    def heads(self, heads: Sequence[int], rng: random.Random) -> list[int]:
        """The control tree's heads for the parser's ``heads`` (only their number matters to
        the kinds that do not read them)."""
        n = len(heads)
        if self.kind == "random-projective":
            return random_projective_heads(n, rng)
        if self.kind == "random-nonprojective":
            return random_nonprojective_heads(n, rng)
        if self.kind == "shuffled":
            return shuffled_heads(heads, rng)
        if self.kind == "noise":
            return noisy_heads(heads, float(self.noise), rng)  # type: ignore[arg-type]
        return branching_heads(n, self.kind.split("-")[0])

    def apply(self, tree: Sentence) -> Sentence:
        """The control tree of the parser's ``tree``: the same words and UPOS, no SentIdx."""
        rng = sentence_rng(self, tree.words)
        heads = self.heads(tree.heads, rng)
        labels = (control_labels(tree.deprels, tree.heads, heads, self.labels, rng)
                  if self.label_rule == "ud" else
                  legacy_control_labels(tree.deprels, heads, self.labels, rng))
        return Sentence(list(tree.words), heads, labels,
                        list(tree.upos) if tree.upos is not None else None, None)


@dataclass
class ControlSettings:
    """The options of ``depnmt controls``, each a field (:func:`~depnmt.core.optionspec.option`):
    :meth:`control` is the :class:`Control` they ask for, :meth:`sides` the sides replaced."""

    parse_dir: Path | None = option(None, "Folder of the parser's trees, written by `depnmt "
                                    "parse`.", Folder(), flag=("-i", "--input"), required=True)
    out_dir: Path | None = option(None, "Folder for the control trees and manifest.json, "
                                  "written all or nothing; not the input folder, inside it or "
                                  "around it.", Folder(), flag=("-o", "--output"), required=True)
    kind: str | None = option(None, "Which control trees (see above).", Choice(KINDS),
                              required=True, metavar="KIND")
    seed: int = option(1, "Seed of the random kinds (every kind records it).", SEED,
                       show_default=True)
    labels: str = option("keep", "DEPRELs besides `root`, which is always on the root word and "
                         "only there: each word keeps its own (the old root's word gets `dep`), "
                         "the parser's other labels are shuffled among the other words, or "
                         "`dep` on every one.", Choice(LABEL_MODES), show_default=True)
    noise: float | None = option(None, "For --kind noise: the fraction of non-root words whose "
                                 "head is re-drawn.", FloatRange(0, 1, min_open=True),
                                 metavar="P")
    side: str | None = option(None, "Which side's trees to replace (the other is copied).  "
                              "[default: every side the folder has]",
                              Choice(["src", "tgt", "both"]))

    def __post_init__(self):
        check_options(self)

    def control(self) -> Control:
        """The control asked for; a :class:`~depnmt.core.errors.UsageError` when ``noise`` and
        ``kind`` do not go together."""
        if self.kind == "noise" and self.noise is None:
            raise UsageError("--kind noise needs --noise P, the fraction of heads to corrupt")
        if self.kind != "noise" and self.noise is not None:
            raise UsageError(f"--noise is for --kind noise, not {self.kind}")
        return Control(self.kind, self.seed, self.labels, self.noise)

    def sides(self) -> list[str] | None:
        """The sides whose trees are replaced (None: every side the folder has)."""
        return None if self.side is None else ["src", "tgt"] if self.side == "both" \
            else [self.side]


def sentence_rng(control: Control, words: Sequence[str]) -> random.Random:
    """The generator of one sentence's control tree: seeded by the SHA-256 of the control's
    seed and kind and the words (module docstring: Seeds)."""
    key = json.dumps([control.seed, control.kind, list(words)], ensure_ascii=False)
    return random.Random(int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:16], "big"))
