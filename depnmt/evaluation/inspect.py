"""What a relative scheme sees: the per-pair matrix of a tree, printed like the papers' tables.

Row ``i``, column ``j`` is the value for the pair ``(i, j)`` before it becomes a table index:

* ``rel``       ``j − i`` (Shaw et al. 2018; Omote et al. 2019 Eqs. 13–15);
* ``dep``       ``depth(n_j) − depth(n_i)`` (Omote et al. 2019 Eq. 16, Table 1);
* ``deplabel``  that depth difference for ancestor/descendant pairs, ``self``, ``sib`` or
  ``non_dep`` (the Japanese paper, §3.1, Table 1);
* ``treedist``  the length of the path between the two words on the tree;
* ``structural`` the relative structural position (Wang et al. 2019): ``abs(x_i) − abs(x_j)``
  for words on one root path, else ``±(abs(x_i) + abs(x_j))``, + where i > j (abs = depth);
* ``pascal``    the scale ``N(j | p_i, σ²)`` (or the window) that PASCAL's heads multiply the
  score of query i on key j by, p_i the position of i's parent (Bugliarello & Okazaki 2020),
  with the options' defaults; no clip.

The scheme computes the matrix (``Scheme.pair_labels``, the labels the model looks its tables
up with, and ``Scheme.label_text``): what is printed is what the model sees.

``path`` (GPS) is no matrix: one line per token, the token, a tab and its root path joined by
``>`` (``school<TAB>root>obl``); subwords show their word's path (:mod:`depnmt.model.schemes.gps`).

With ``clip`` the values are clipped as the model clips them (Eqs. 15, 19–20); for ``deplabel``
a pair beyond the clip gets the zero vector, exactly like ``non_dep``, and is shown as
``non_dep``. Given subwords, the matrix is over the subwords' tree (:mod:`depnmt.core.trees`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Sequence

from depnmt.core.optionspec import Choice, File, IntRange, check_options, option
from depnmt.core.trees import CHAIN_HEADS, SUBWORD_RULES


def pair_schemes() -> tuple[str, ...]:
    """The registered schemes that label pairs (:meth:`Scheme.pair_labels`), joint forms left
    out; a new relative scheme is listed without a change here."""
    from depnmt.model.schemes.base import Scheme
    from depnmt.model.schemes.registry import FUSIONS, load_builtin_schemes
    from depnmt.model.schemes.registry import SCHEMES as REGISTERED
    load_builtin_schemes()
    return tuple(name for name, cls in REGISTERED.items()
                 if cls.pair_labels is not Scheme.pair_labels and name not in FUSIONS.values())


SCHEMES = pair_schemes() + ("path",)
GPS_PATHS = "path"                      # what inspect shows of gps: each token's root path
OLD_KINDS = {GPS_PATHS: "abs+gps"}      # 0.1.0's `inspect --scheme path`


def inspected_part(name: str) -> str:
    """What ``depnmt inspect --scheme NAME`` shows of the scheme name ``name`` (any name
    ``train --scheme`` takes, e.g. ``abs+dep``): its one part that labels pairs (``dep``,
    ``rel``, …) or ``path`` for ``gps``. 0.1.0's ``path`` and bare ``dep`` … still work, with a
    deprecation warning; a name with no such part, or with several, is a DepnmtError."""
    from depnmt.core.compat import deprecation
    from depnmt.core.errors import DepnmtError
    from depnmt.model.schemes.names import parse_name
    if name.strip() in OLD_KINDS:
        deprecation(name.strip(), OLD_KINDS[name.strip()])
        return GPS_PATHS
    shown = [GPS_PATHS if c == "gps" else c for c in parse_name(name).components
             if c not in ("abs", "none")]
    if len(shown) != 1 or shown[0] not in SCHEMES:
        kinds = ", ".join(k for k in SCHEMES if k != GPS_PATHS)
        raise DepnmtError(f"inspect shows one part of a scheme: the pair matrix of {kinds}, "
                          f"or gps's root paths; '{name}' has "
                          f"{', '.join(shown) if shown else 'none of them'} "
                          f"(e.g. --scheme abs+dep)")
    return shown[0]


def check_scheme(name: str) -> str:
    """The field check of ``--scheme``: ``name`` when inspect shows a part of it
    (:func:`inspected_part`), a ValueError saying why not otherwise."""
    from depnmt.core.errors import DepnmtError
    try:
        inspected_part(name)
    except DepnmtError as exc:
        raise ValueError(str(exc)) from None
    return name


@dataclass
class InspectSettings:
    """The options of ``depnmt inspect``, each a field (:func:`~depnmt.core.optionspec.option`)."""

    scheme: str | None = option(
        None, "a scheme name as `depnmt train --scheme` takes it; shown is its tree or pair "
        "part: dep (abs+dep): relative depth (Omote et al. Eq. 16); deplabel: the Japanese "
        "paper's labels; rel: j − i; treedist: path length on the tree; structural: relative "
        "structural position (Wang et al.); pascal: the scale of key j around query i's parent; "
        "gps (abs+gps): each token's root path, one line per token", str, check=check_scheme,
        required=True)
    clip: int | None = option(None, "show the values clipped to K as the model uses them "
                              "(deplabel: pairs beyond K become non_dep)", IntRange(min=0))
    bpe_codes: Path | None = option(None, "subword-nmt codes: show the matrix over subwords "
                                    "after the tree projection", File(exists=True))
    subword_tree: str = option("chain", "how a tree reaches subwords (see `depnmt train "
                               "--help`)", Choice(SUBWORD_RULES))
    chain_head: str = option("last", "chain rule: a word's arc lands on the head word's last or "
                             "first piece", Choice(CHAIN_HEADS))
    input_path: Path | None = option(None, "CoNLL-U file to read instead of standard input",
                                     File(exists=True), flag=("-i", "--input"))
    sentence: int | None = option(None, "only the N-th tree of the input (1-based)",
                                  IntRange(min=1), metavar="N")
    png: Path | None = option(None, "also draw each sentence: its tree as arcs over the words "
                              "and the matrix as a labelled heatmap (FILE-1.png, FILE-2.png, … "
                              "for several)", File(), metavar="FILE")

    def __post_init__(self):
        """Each value checked as its flag is; ``--clip`` with a scheme whose values are no
        distances is a :class:`~depnmt.core.errors.UsageError`."""
        from depnmt.core.errors import UsageError
        check_options(self)
        if self.clip is not None and self.scheme is not None and not clips(self.part()):
            shown = "gps's root paths" if self.part() == GPS_PATHS else self.part()
            raise UsageError(f"--clip does not apply to {shown}: its values are no distances")

    def part(self) -> str:
        """The part of ``scheme`` shown (:func:`inspected_part`: ``dep``, ``path``, …)."""
        return inspected_part(self.scheme)


def clips(scheme: str) -> bool:
    """Whether ``scheme``'s pair values are clipped distances (``--clip`` applies)."""
    from depnmt.model.schemes.registry import SCHEMES as REGISTERED
    return scheme in REGISTERED and hasattr(REGISTERED[scheme], "clip")


def pair_cells(scheme: str, heads: Sequence[int], tokens: Sequence[str], clip: int | None = None,
               rule: str = "chain", chain_head: str = "last",
               sent_ids: Sequence[int] | None = None) -> list[list[str]]:
    """The ``[n, n]`` cells of ``scheme`` for the tree ``heads`` over ``tokens`` (words, or
    subwords with "@@ " markers, projected by ``rule``), as the scheme itself labels the pairs
    (:meth:`~depnmt.model.schemes.base.Scheme.pair_labels`, ``label_text``); without ``clip``
    the scheme's clip value is the sentence length, so nothing is clipped. ``sent_ids``: the
    parser sentence of each word (a tree's ``SentIdx``, :class:`~depnmt.core.conllu.Sentence`),
    which the structural and PASCAL schemes start their depths and parents from, as in
    training; None: one sentence."""
    from depnmt.model.schemes.registry import SCHEMES as REGISTERED
    from depnmt.model.schemes.registry import build_schemes, load_builtin_schemes, scheme_entries
    load_builtin_schemes()
    if scheme not in SCHEMES or scheme == "path":
        raise ValueError(f"unknown scheme {scheme!r}; choose from {SCHEMES[:-1]}")
    cls = REGISTERED[scheme]
    values = {"subword_tree": rule, "chain_head": chain_head}
    if clips(scheme):                       # a clipped distance (pascal's scales are not)
        values[f"{cls.prefix}_{cls.clip}"] = clip if clip is not None else max(len(tokens), 1)
    built = build_schemes(scheme_entries([scheme], values))[0]
    tree = SimpleNamespace(heads=list(heads),
                           sent_ids=None if sent_ids is None else list(sent_ids))
    example = SimpleNamespace(index=0, src=[0] * (len(tokens) + 1), src_subwords=list(tokens),
                              src_tree=tree)
    return [[built.label_text(label) for label in row]
            for row in built.pair_labels(example).tolist()]


def check_tokens(tree, tokens: Sequence[str], number: int) -> None:
    """Raise the one-line error of sentence ``number`` (``FILE:LINE`` of a tree read from a
    file, :func:`~depnmt.core.conllu.sentence_error`) unless ``tokens`` (words, or subwords
    with "@@ " markers) make up as many words as ``tree`` has."""
    from depnmt.core.conllu import sentence_error
    from depnmt.core.subwords import word_spans
    n_words = len(word_spans(list(tokens)))
    if n_words != len(tree.words):
        raise sentence_error(tree, number, f"{n_words} words in the subwords but "
                                           f"{len(tree.words)} in the tree")


def format_matrix(tokens: Sequence[str], cells: list[list[str]]) -> str:
    """A tab-then-tokens header row, then one row per token: the token, then its cells."""
    rows = ["\t" + "\t".join(tokens)]
    rows += [token + "\t" + "\t".join(row) for token, row in zip(tokens, cells)]
    return "\n".join(rows) + "\n"


def format_paths(tree, tokens: Sequence[str]) -> str:
    """``path``: one ``token<TAB>root>…>label`` line per token (words, or subwords with "@@ "
    markers, which take their word's path), as the GPS scheme reads them."""
    from depnmt.core.subwords import word_index
    from depnmt.model.schemes.gps import label_paths
    paths = label_paths(list(tree.heads), list(tree.deprels), tree.sent_ids)
    return "".join(f"{token}\t{'>'.join(paths[w])}\n"
                   for token, w in zip(tokens, word_index(list(tokens))))
