"""Multi-task data with linearized parses (after Currey and Heafield 2019, "Incorporating Source
Syntax into Transformer-Based Neural Machine Translation", WMT): one unchanged encoder-decoder
learns to translate and, as an auxiliary task, to parse its source sentences, from one mixed
corpus whose source lines carry a task tag.

``depnmt multitask -i PREPARE -t PARSE -o OUT`` writes OUT as a ``prepare`` folder (the next
stage is ``depnmt bpe -i OUT``):

* train: every pair of PREPARE's training data as a translation pair, its source prefixed with
  :data:`TAGS` ``["translate"]``; then every training source sentence again, prefixed with
  ``TAGS["parse"]``, paired with its linearized tree from PARSE (:func:`linearize`). So the
  auxiliary task's data is the translation data's own source side, parsed — 2N pairs for N;
* dev and test: translation pairs only (tagged), so dev BLEU and the test set measure
  translation. An empty source line (prepare keeps them in dev and test, and in train with
  ``--min-len 0``) stays empty, untagged, and has no parse pair: a tag alone would be decoded
  into a translation of nothing (:func:`tagged`). ``translate`` needs the tag too: give it
  OUT's ``test.raw.SRC`` (already tagged), or prefix your input lines with ``xxtranslatexx``.

A model trained on OUT knows it: ``train`` records the tags in its ``config.json``
(:data:`KEY`, :func:`model_record`; also in a CTranslate2 export's record), and everything that
gives it source text (``translate`` from ``--input`` or stdin, ``rescore --src``,
``contrastive``, the Python API's ``Translator``, ``translate --ct2``) refuses a tokenized
source line whose first token is neither tag (:func:`check_tagged`: an
:class:`~depnmt.core.errors.InputError` naming the file and line, before that line's chunk is
decoded), instead of decoding an input the model never saw; an empty line still gives an empty
line. Model folders of earlier versions record no tags and take any input, as before.

The tags are plain lower-case alphanumeric words, so every tokenizer (Moses, Sudachi, keep) and
``--lowercase`` leave them whole and BPE learns them early (they begin every source line); they
are ordinary vocabulary entries — the model is unchanged.

**What is ours, not the paper's.** The paper's text beyond its abstract could not be read here:
the abstract says a single encoder and decoder is trained on translation and parsing of the
source's linearized parses; the task tags and the 1:1 mix are the usual way to do that (Johnson
et al. 2017's target-language tags), not details checked against the paper. The paper parses
with a *constituency* parser; depnmt has dependency trees, so the auxiliary target is the
dependency tree linearized as nested brackets (:func:`linearize`). Tree schemes cannot train on
OUT (the tags have no trees); use it with ``abs`` or ``rel``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.manifest import write_manifest
from depnmt.core.optionspec import SEED, FloatRange, Folder, check_options, option
from depnmt.core.stagedir import check_distinct, stage_output
from depnmt.core.textio import atomic_open, iter_lines
from depnmt.core.trees import children

TAGS = {"translate": "xxtranslatexx", "parse": "xxparsexx"}
CLOSE = ")"
SPLITS = ("train", "dev", "test")
KEY = "multitask"       # the manifest's options key; config.json's key of a model trained on it


def model_record(prepare: dict) -> dict | None:
    """What ``train`` records as ``config.json``'s :data:`KEY` for a model trained on the
    prepare folder of manifest ``prepare``: ``{"tags": {task: tag}}`` (the tags the folder's
    manifest records) when :func:`write_multitask` wrote it, else None (nothing recorded)."""
    options = prepare.get("options")
    written = options.get(KEY) if isinstance(options, dict) else None
    if not isinstance(written, dict) or not isinstance(written.get("tags"), dict):
        return None
    return {"tags": dict(written["tags"])}


def model_tags(config: dict) -> dict[str, str]:
    """``{task: tag}``: the task tags every source line of a model trained on multitask data
    begins with (``config.json``'s :data:`KEY`, :func:`model_record`); empty for any other
    model, and for model folders of earlier versions, which recorded none."""
    record = config.get(KEY)
    tags = record.get("tags") if isinstance(record, dict) else None
    return {str(task): str(tag) for task, tag in tags.items()} if isinstance(tags, dict) else {}


def check_tagged(words: Sequence[list[str]], tags: dict[str, str], source: str,
                 line_numbers: Sequence[int] | None = None, src_lang: str = "SRC") -> None:
    """A model trained on multitask data (its ``tags``, :func:`model_tags`; none: any input
    passes) only ever saw sources that begin with a task tag, so a tokenized source sentence
    of ``words`` whose first token is none of them is an :class:`InputError` naming ``source``
    and its line (``line_numbers[i]``, else ``i + 1``) and saying to prefix it with the
    translation tag. An empty sentence passes (it is not decoded)."""
    if not tags:
        return
    known = set(tags.values())
    for i, sentence in enumerate(words):
        if sentence and sentence[0] not in known:
            translate = tags.get("translate", next(iter(tags.values())))
            raise InputError(source, line_numbers[i] if line_numbers else i + 1, (
                f"does not begin with a task tag ({' or '.join(tags.values())}), but the model "
                f"was trained on multitask data (`depnmt multitask`), whose every source line "
                f"begins with one: prefix the line with '{translate} ' to translate it (the "
                f"multitask folder's test.raw.{src_lang} is tagged so)"))


def linearize(words: list[str], heads: list[int], deprels: list[str]) -> list[str]:
    """The tree as bracketed tokens: each word's subtree is ``(LABEL``, the left dependents'
    subtrees, the word, the right dependents' subtrees, ``)``, dependents in sentence order.

    ``heads`` are CoNLL-U heads (1-based, 0 = root). "The dog barks ." with The→dog (det),
    dog→barks (nsubj), .→barks (punct) gives ``(root (nsubj (det The ) dog ) barks (punct . ) )``.
    Every word appears once; the words are in sentence order exactly when the tree is
    projective. Labels are kept whole (``(obl:tmod``). Iterative, so any depth is fine.
    Raises ``ValueError`` on a forest or a cycle.
    """
    n = len(words)
    if any(not 0 <= h <= n for h in heads):
        i, h = next((i, h) for i, h in enumerate(heads, start=1) if not 0 <= h <= n)
        raise ValueError(f"word {i} has head {h}, outside 0..{n}")
    roots = [i for i, h in enumerate(heads) if h == 0]                  # 0-based nodes below
    if n and len(roots) != 1:
        raise ValueError(f"{len(roots)} roots (a tree has one)")
    kids = children(heads)
    out: list[str] = []
    stack: list[tuple[int, int]] = [(r, 0) for r in reversed(roots)]
    seen = 0
    while stack:
        node, state = stack.pop()
        if state == 0:                                  # open the subtree
            seen += 1
            out.append("(" + deprels[node])
            left = [c for c in kids[node] if c < node]
            right = [c for c in kids[node] if c > node]
            stack.append((node, 2))                     # then close it
            stack.extend((c, 0) for c in reversed(right))
            stack.append((node, 1))                     # the word itself, after the left ones
            stack.extend((c, 0) for c in reversed(left))
        elif state == 1:
            out.append(words[node])
        else:
            out.append(CLOSE)
    if seen != n:
        raise ValueError(f"only {seen} of {n} words hang from the root (a cycle)")
    return out


def tagged(task: str, tokens: str, raw: str) -> tuple[str, str]:
    """A source line, ``tokens`` (tokenized) and ``raw`` (its reference text), with the tag of
    ``task`` in front of both; a line without tokens stays as it is, as ``translate`` gives an
    empty line back for it."""
    if not tokens:
        return tokens, raw
    return f"{TAGS[task]} {tokens}", f"{TAGS[task]} {raw}"


def _trees(parse_dir: Path, split: str, lang: str,
           text_path: Path) -> Iterator[tuple[str, list[str]]]:
    """``(line, its linearized tree)`` for every line of ``text_path``
    (``PREPARE/{split}.{lang}``), streamed; the tree file must have exactly one tree per line,
    over the line's tokens."""
    from depnmt.core.conllu import read_conllu_numbered
    path = parse_dir / f"{split}.{lang}.conllu"
    if not path.is_file():
        raise DepnmtError(f"{path}: missing; run `depnmt parse -i PREPARE -o {parse_dir} "
                          f"--side src` first")
    numbered = read_conllu_numbered(path)
    index = 0
    for index, line in enumerate(iter_lines(text_path), start=1):
        lineno, tree = next(numbered, (None, None))
        if tree is None:
            raise InputError(path, None, f"has {index - 1} trees but the text has more lines")
        if tree.text != line:
            raise InputError(path, lineno, f"tree {index} has words {tree.words[:8]}… but "
                                           f"{text_path}:{index} has {line.split()[:8]}…")
        try:
            linear = linearize(tree.words, tree.heads, tree.deprels)
        except ValueError as exc:
            raise InputError(path, lineno, f"tree {index}: {exc}") from None
        yield line, linear
    if next(numbered, None) is not None:
        raise InputError(path, None, f"has more trees than the text's {index} lines")


@dataclass
class MultitaskSettings:
    """The options of ``depnmt multitask`` (:func:`write_multitask`), each a field
    (:func:`~depnmt.core.optionspec.option`)."""

    prepare_dir: Path | None = option(None, "Folder written by `depnmt prepare`.",
                                      Folder(exists=True), flag=("-i", "--input"), required=True)
    parse_dir: Path | None = option(None, "Folder written by `depnmt parse` with the source side "
                                    "(--side src or both).", Folder(exists=True),
                                    flag=("-t", "--trees"), required=True)
    out_dir: Path | None = option(None, "Output folder: a `prepare` folder for `depnmt bpe`, "
                                  "written all or nothing (it appears, or replaces a previous "
                                  "output, when the run completes).", Folder(),
                                  flag=("-o", "--output"), required=True, metavar="OUT")
    parse_fraction: float = option(1.0, "Share of the training sentences whose parse pair is "
                                   "added.", FloatRange(0.0, 1.0), show_default=True)
    seed: int = option(1, "Which sentences --parse-fraction < 1 picks.", SEED, show_default=True)

    def __post_init__(self):
        check_options(self)


def write_multitask(prepare_dir: Path, parse_dir: Path, out_dir: Path,
                    parse_fraction: float = 1.0, seed: int = 1) -> dict:
    """Write the mixed corpus (module docstring) into ``out_dir`` (all or nothing, one writer:
    :func:`~depnmt.core.stagedir.stage_output`); returns its manifest.
    Streams (two passes over the training files), so corpus size is no memory concern.

    ``parse_fraction`` < 1 adds the parse pairs of that share of the training sentences only
    (chosen at random with ``seed``)."""
    from depnmt.core.manifest import load_manifest
    from depnmt.stages.bpe import prepared_inputs
    check_distinct(out_dir, {"prepare folder": prepare_dir, "parse folder": parse_dir})
    manifest, langs, splits = prepared_inputs(prepare_dir)
    if (parse_dir / "manifest.json").is_file():      # a folder of CoNLL-U files may have none,
        load_manifest(parse_dir, "parse", verify=False)  # but not another stage's
    owns = {f"{split}.{raw}{lang}" for split in SPLITS for raw in ("", "raw.")
            for lang in langs.values()}
    with stage_output(out_dir, "prepare", "multitask", owns=owns.__contains__) as tmp:
        return write_mixed(prepare_dir, parse_dir, tmp, (manifest, langs, splits),
                           parse_fraction, seed)


def write_mixed(prepare_dir: Path, parse_dir: Path, out_dir: Path,
                prepared: tuple[dict, dict[str, str], list[str]], parse_fraction: float,
                seed: int) -> dict:
    """Write the files of :func:`write_multitask` into ``out_dir``, manifest last; returns it.
    ``prepared``: what :func:`depnmt.stages.bpe.prepared_inputs` returned for ``prepare_dir``."""
    manifest, langs, splits = prepared
    src, tgt = langs["src"], langs["tgt"]
    counts, outputs = {}, []
    for split in splits:
        inputs = [prepare_dir / f"{split}.{src}", prepare_dir / f"{split}.{tgt}",
                  prepare_dir / f"{split}.raw.{src}", prepare_dir / f"{split}.raw.{tgt}"]
        names = [path.name for path in inputs]
        n_translate = n_parse = 0
        with ExitStack() as stack:
            files = [stack.enter_context(atomic_open(out_dir / name)) for name in names]
            for s, t, rs, rt in zip(*(iter_lines(path) for path in inputs)):
                s, rs = tagged("translate", s, rs)
                for fh, value in zip(files, (s, t, rs, rt)):
                    fh.write(value + "\n")
                n_translate += 1
            if split == "train":
                chosen = None
                if parse_fraction < 1.0:
                    rng = random.Random(seed)
                    chosen = set(rng.sample(range(n_translate), round(parse_fraction * n_translate)))
                trees = _trees(parse_dir, split, src, inputs[0])
                for i, ((s, linear), rs) in enumerate(zip(trees, iter_lines(inputs[2]))):
                    if not s or chosen is not None and i not in chosen:
                        continue
                    text = " ".join(linear)
                    s, rs = tagged("parse", s, rs)
                    for fh, value in zip(files, (s, text, rs, text)):
                        fh.write(value + "\n")
                    n_parse += 1
        outputs += names
        counts[split] = {"translate": n_translate, "parse": n_parse}
    return write_manifest(
        out_dir, "prepare", inputs={"prepare": str(prepare_dir.resolve()),
                                    "parse": str(parse_dir.resolve())},
        options={**manifest.get("options", {}), KEY: {
            "tags": TAGS, "parse_fraction": parse_fraction, "seed": seed,
            "linearization": "dependency brackets: (LABEL left-subtrees WORD right-subtrees )"}},
        outputs=outputs,
        extra={"src_lang": src, "tgt_lang": tgt, "tokenizers": manifest.get("tokenizers"),
               "counts": counts})
