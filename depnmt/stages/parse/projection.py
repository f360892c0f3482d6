"""From a parser's output to exactly one tree per line over exactly our tokens.

A backend returns an *analysis*: a :class:`~depnmt.core.conllu.Sentence` over the backend's own
tokens that may be a forest (several sentences, several roots). :func:`line_tree` turns it into
our tree in two steps.

**1. Projection onto our tokens** (only when the backend re-tokenized, :func:`project`).
Both token sequences are laid over the same text. Character offsets are computed with all
whitespace removed, so spacing differences do not matter (if the backend changed characters, e.g.
normalised ``...`` to ``…``, its offsets are carried over through a character alignment of the two
texts: matching characters exactly, differing stretches linearly; still a valid tree).
Each backend token is *owned* by the first of our tokens it overlaps. Then, for each of our tokens:

* it owns backend tokens: its head word is the owned backend token closest to the backend root
  (smallest depth; leftmost on ties). It takes that token's relation and UPOS; its head is the
  token of ours that owns the backend head (going further up past backend tokens that overlap
  none of ours, e.g. spaCy's whitespace tokens), or the root if the backend head is the root;
* it owns none but overlaps a backend token (a backend token split over several of our tokens):
  it is a later piece and attaches to the first piece with ``goeswith`` (UD's relation for one
  word split into several tokens), UPOS ``X``;
* it overlaps nothing (only whitespace-like characters, or text the backend dropped): it
  attaches to the nearest covered token on its left (else on its right) with ``dep``, UPOS ``X``.

Why this is always a forest: along a chain of "owner" heads the backend depth of the chosen head
word strictly decreases (the owner of a backend head above word w has a head word at most as deep
as that head, which is shallower than w), so no chain can loop; pieces and uncovered tokens only
point at covered tokens and nothing points at them.

**2. One tree per line** (:func:`join_roots`). When the parser produced several sentences or
several roots for one line, the first root (in word order, hence the root of the first sentence)
stays the root, with relation ``root``; every other root is attached to it with ``parataxis``
(UD's relation for juxtaposed clauses). ``sent_ids`` keeps the parser sentence of each word (the
sentence of its head word for pieces and uncovered tokens), so later stages can tell which word
pairs cross a sentence boundary.
"""

from __future__ import annotations

from bisect import bisect_right
from difflib import SequenceMatcher

from depnmt.core.conllu import Sentence, find_cycle, tree_problem

ROOT, PARATAXIS, GOESWITH, UNKNOWN_REL, UNKNOWN_POS = "root", "parataxis", "goeswith", "dep", "X"


def char_spans(tokens: list[str]) -> list[tuple[int, int]]:
    """Half-open ``[start, end)`` offsets of each token in the text with all whitespace removed."""
    spans = []
    pos = 0
    for token in tokens:
        length = sum(1 for c in token if not c.isspace())
        spans.append((pos, pos + length))
        pos += length
    return spans


def _squeezed(tokens: list[str]) -> str:
    """The text of ``tokens`` with all whitespace removed."""
    return "".join(c for token in tokens for c in token if not c.isspace())


def _mapped(spans: list[tuple[int, int]], source: str, target: str) -> list[tuple[float, float]]:
    """Offsets into ``source`` carried over to ``target`` through a character alignment.

    Identical texts map exactly; otherwise difflib's alignment maps matching characters exactly
    and each differing stretch linearly onto its counterpart (a monotone map).
    """
    if source == target:
        return [(float(s), float(e)) for s, e in spans]
    ops = SequenceMatcher(None, source, target, autojunk=False).get_opcodes()

    def at(x: int) -> float:
        for _, i1, i2, j1, j2 in ops:
            if x <= i2:
                return j1 + (x - i1) * (j2 - j1) / (i2 - i1) if i2 > i1 else float(j1)
        return float(len(target))

    return [(at(s), at(e)) for s, e in spans]


def overlap_groups(ours: list[str], theirs: list[str]) -> list[list[int]]:
    """For each of our tokens, the (0-based) backend tokens whose characters overlap it."""
    mine = char_spans(ours)
    other = _mapped(char_spans(theirs), _squeezed(theirs), _squeezed(ours))
    ends = [e for _, e in other]
    groups = []
    for start, end in mine:
        group = []
        b = bisect_right(ends, start)  # first backend token ending after our start
        while b < len(other) and other[b][0] < end:
            if other[b][0] < other[b][1]:  # skip empty (whitespace-only) backend tokens
                group.append(b)
            b += 1
        groups.append(group)
    return groups


def tree_depths(heads: list[int]) -> list[int]:
    """Depth of every word in a forest (roots have depth 0). Raises ValueError on a cycle."""
    cycle = find_cycle(heads)
    if cycle:
        raise ValueError(f"parser output has a cycle: {[i + 1 for i in cycle]}")
    depth: list[int | None] = [None] * len(heads)
    for start in range(len(heads)):
        path = []
        i = start
        while depth[i] is None and heads[i] != 0:
            path.append(i)
            i = heads[i] - 1
        base = 0 if depth[i] is None else depth[i]
        depth[i] = base
        for k, j in enumerate(reversed(path), start=1):
            depth[j] = base + k
    return depth  # type: ignore[return-value]


def _owners(groups: list[list[int]], n_backend: int) -> list[int | None]:
    """The owner (first overlapping token of ours) of every backend token, or None."""
    owner: list[int | None] = [None] * n_backend
    for i, group in enumerate(groups):
        for b in group:
            if owner[b] is None:
                owner[b] = i
    return owner


def _owner_head(b: int, heads: list[int], owner: list[int | None]) -> int:
    """Our 1-based head for backend head word ``b`` (0 = root), skipping unowned ancestors."""
    h = heads[b]
    while h and owner[h - 1] is None:
        h = heads[h - 1]
    return 0 if h == 0 else owner[h - 1] + 1  # type: ignore[operator]


def project(words: list[str], analysis: Sentence) -> Sentence:
    """Project a backend forest over its own tokens onto ``words`` (rule in the module docstring).

    The result is a forest over exactly ``words``; :func:`join_roots` makes it one tree.
    """
    n = len(words)
    groups = overlap_groups(words, analysis.words)
    owner = _owners(groups, len(analysis))
    depth = tree_depths(analysis.heads)
    a_upos = analysis.upos or [UNKNOWN_POS] * len(analysis)
    a_sids = analysis.sent_ids or [0] * len(analysis)
    heads, deprels = [0] * n, [UNKNOWN_REL] * n
    upos, sids = [UNKNOWN_POS] * n, [0] * n
    covered = [bool(g) for g in groups]
    owned = [[b for b in group if owner[b] == i] for i, group in enumerate(groups)]
    for i in range(n):  # owners of backend tokens
        if owned[i]:
            top = min(owned[i], key=lambda b: (depth[b], b))
            heads[i] = _owner_head(top, analysis.heads, owner)
            deprels[i], upos[i], sids[i] = analysis.deprels[top], a_upos[top], a_sids[top]
    for i in range(n):  # later pieces of a split backend token: attach to the first piece
        if covered[i] and not owned[i]:
            first: int = owner[groups[i][0]]  # type: ignore[assignment]
            heads[i], deprels[i], sids[i] = first + 1, GOESWITH, sids[first]
    if not any(covered):
        return Sentence(list(words), [0] + [1] * (n - 1), [ROOT] + [UNKNOWN_REL] * (n - 1),
                        upos, [0] * n)
    for i in range(n):  # tokens that overlap nothing
        if not covered[i]:
            j = _nearest_covered(covered, i)
            heads[i], sids[i] = j + 1, sids[j]
    return Sentence(list(words), heads, deprels, upos, sids)


def _nearest_covered(covered: list[bool], i: int) -> int:
    """Index of the nearest covered token left of ``i``, else the first one right of it."""
    for j in range(i - 1, -1, -1):
        if covered[j]:
            return j
    return covered.index(True)


def join_roots(sentence: Sentence) -> Sentence:
    """Make a forest one tree: the first root stays (``root``), the others attach to it
    with ``parataxis``. ``sent_ids`` default to all 0 (one parser sentence)."""
    heads, deprels = list(sentence.heads), list(sentence.deprels)
    roots = [i for i, h in enumerate(heads) if h == 0]
    if not roots and heads:
        raise ValueError("parser output has no root")
    for r in roots[1:]:
        heads[r], deprels[r] = roots[0] + 1, PARATAXIS
    if roots:
        deprels[roots[0]] = ROOT
    sent_ids = list(sentence.sent_ids) if sentence.sent_ids is not None else [0] * len(heads)
    upos = list(sentence.upos) if sentence.upos is not None else None
    return Sentence(list(sentence.words), heads, deprels, upos, sent_ids)


def line_tree(words: list[str], analysis: Sentence) -> Sentence:
    """Exactly one tree over exactly ``words`` from a backend's analysis of that line; a
    ValueError when the analysis is no forest (a head out of range, a cycle)."""
    if analysis.words != words:
        analysis = project(words, analysis)
    tree = join_roots(analysis)
    problem = tree_problem(tree.heads)
    if problem:
        raise ValueError(f"parser output is no tree: {problem[1]}")
    return tree
