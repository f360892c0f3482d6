"""The repository's own scripts (bench/, recipes/) call ``depnmt`` with today's spellings: no
deprecated flag (the table in ``depnmt/commands/options.py``), no 0.1.0 scheme name, no 0-based
``--gps-layers``/``--pascal-layers``. A 0.1.0 spelling still works, with a warning on stderr,
so a script using one would run and print that warning on every call until 0.3.0 breaks it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from depnmt.commands.options import DEPRECATED
from depnmt.model.schemes import names as scheme_names

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(path for pattern in ("bench/**/*.py", "bench/**/*.sh", "recipes/**/*.sh")
                 for path in REPO.glob(pattern))
OLD_OPTIONS = re.compile(r"--(gps|pascal)-layers\b")
COMMENT = re.compile(r"(^|\s)#.*$")                   # a shell or Python comment
SCHEME = re.compile(r"""--scheme["',]*\s+["']?([A-Za-z0-9+._()-]+)""")


def old_flags(line: str) -> list[str]:
    """The deprecated flags of a ``depnmt`` command that ``line`` calls: after the command's
    name (``depnmt train ...``, ``"${launch[@]}" train ...`` in a shell script, ``["train",
    ...]`` in Python), on the same line."""
    found = []
    for command, flags in DEPRECATED.items():
        words = r"[\s\"',]+".join(map(re.escape, command.split()))
        call = re.search(rf"(^|[\s\"'\[(]){words}[\s\"',]", line)
        if call is None:
            continue
        rest = line[call.end():]
        found += [old for old in flags if re.search(rf"(^|[\s\"'(,]){re.escape(old)}([\s\"'),=]|$)",
                                                     rest)]
    return found


def old_schemes(line: str) -> list[str]:
    """The literal ``--scheme`` values in ``line`` that are not today's scheme names."""
    names = []
    for value in SCHEME.findall(line):
        try:
            canonical = scheme_names.parse_name(value).canonical
        except Exception:                       # noqa: BLE001 - not a literal name ($VAR, ...)
            continue
        if canonical != value:
            names.append(value)
    return names


def leftovers(text: str) -> list[str]:
    """Each 0.1.0 spelling in the code of ``text`` (comments left out), as `LINE: spelling`."""
    found = []
    for number, line in enumerate(text.splitlines(), 1):
        code = COMMENT.sub("", line)
        spellings = [*old_flags(code), *old_schemes(code),
                     *(m.group(0) for m in OLD_OPTIONS.finditer(code)),
                     *re.findall(r"\bTransformer_[^\s\"']+", code)]
        found += [f"{number}: {spelling}" for spelling in dict.fromkeys(spellings)]
    return found


@pytest.fixture(autouse=True)
def quiet_deprecations(monkeypatch):
    """``parse_name`` of a 0.1.0 spelling warns; here it only answers."""
    monkeypatch.setattr(scheme_names, "deprecation", lambda old, new: None)


def test_leftovers_finds_each_kind_of_old_spelling():
    old = ('depnmt train --data "$bpe" -o "$1"\n'
           'return ["train", "--data", str(bpe), "-o", out]\n'
           'run abs $M30K en --scheme Transformer_abs\n'
           'ABLATIONS = ["--scheme", "rel", "--gps-layers", "0"]\n'
           '"${launch[@]}" plot -m "$m" -l "$s"\n'
           '["analyze", "awsl", "-m", m, "--src", src]\n')
    assert leftovers(old) == ["1: --data", "2: --data", "3: Transformer_abs", "4: rel",
                              "4: --gps-layers", "5: -l", "6: --src"]
    new = ('depnmt train -i "$bpe" -t "$trees" -o "$1" --scheme abs+rel --gps-layer 1\n'
           'depnmt score --ref r --src s h.de\n'          # score's own --src
           '["mount", "-t", "tmpfs"]; bench --data DIR --scheme "$name"\n')
    assert leftovers(new) == []


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_scripts_use_todays_spellings(path):
    assert leftovers(path.read_text(encoding="utf-8")) == []


def test_api_examples_use_todays_config_keys():
    """The dicts that ``depnmt.api``'s docstrings pass to ``train_model`` use the keys of
    train's visible options (``input``, ``output``; not the 0.1.0 ``data``, ``model-dir``)."""
    import ast

    import click

    from depnmt import api
    from depnmt.commands.train import command
    keys = {opt[2:] for p in command.params if isinstance(p, click.Option) and not p.hidden
            for opt in p.opts if opt.startswith("--")}
    examples = re.findall(r"train_model\((\{.*?\})\)", f"{api.__doc__}\n{api.train_model.__doc__}",
                          re.S)
    assert len(examples) == 2
    for example in examples:
        given = ast.literal_eval(re.sub(r"\n\s*(\.\.\.)?", " ", example))
        assert {"input", "output"} <= set(given) <= keys, sorted(set(given) - keys)
