"""Every command's ``--help`` ends with a worked example (``depnmt/commands/examples.py``),
and every example runs: read back from the help text as a user would copy it, in pipeline
order, in a working directory where ``prepare --corpus multi30k`` finds a tiny Multi30k (the
first 200/20/20 pairs), on the CPU, offline (spaCy's installed English model).

The one change made to the lines: each ``depnmt train`` gets :data:`TEST_BUDGET` appended
(later flags win), a few small updates instead of the example's 30 epochs, with a save after
each, so that ``--keep-last 5`` leaves the five checkpoints ``depnmt average --last 5`` needs.
"""

from __future__ import annotations

import gzip
import importlib.util
import io
import json
import shlex
import shutil
import sys
from pathlib import Path

import click
import pytest

from depnmt.cli import cli
from depnmt.commands.examples import EXAMPLES, PIPELINE, commands

from .conftest import run_cli

TEST_BUDGET = ["--max-steps", "5", "--save-every", "1", "--max-tokens", "500"]
TINY_SPLITS = {"train": (0, 200), "val": (200, 220), "test_2016_flickr": (220, 240)}


def command_paths(group: click.Group = cli, prefix: str = "") -> list[str]:
    """The path of every command and group under ``group`` (``"train"``, ``"analyze uas"``)."""
    ctx = click.Context(group)
    paths = []
    for name in group.list_commands(ctx):
        path = f"{prefix}{name}"
        command = group.get_command(ctx, name)
        paths.append(path)
        if isinstance(command, click.Group):
            paths += command_paths(command, f"{path} ")
    return paths


def command_path(words: list[str]) -> str:
    """``analyze uas`` for ``depnmt analyze uas --gold ...``: the words naming a command."""
    path = words[1]
    return f"{path} {words[2]}" if path in ("models", "analyze") else path


def example_lines() -> list[str]:
    """Every distinct example command, in :data:`PIPELINE` order (stable within a command)."""
    lines = list(dict.fromkeys(line for path in EXAMPLES for line in commands(path)))
    return sorted(lines, key=lambda line: PIPELINE.index(command_path(shlex.split(line))))


def split_redirections(words: list[str]) -> tuple[list[str], str | None, str | None]:
    """``depnmt ARGS < IN > OUT`` as (ARGS, IN, OUT)."""
    args, stdin, stdout = [], None, None
    rest = iter(words[1:])
    for word in rest:
        if word == "<":
            stdin = next(rest)
        elif word == ">":
            stdout = next(rest)
        else:
            args.append(word)
    return args, stdin, stdout


def test_every_command_has_an_example_that_the_pipeline_runs():
    paths = command_paths()
    assert set(EXAMPLES) == {"", *paths}
    assert set(PIPELINE) == {p for p in paths if p not in ("models", "analyze")}
    for path in EXAMPLES:
        assert commands(path), path
        assert all(line.startswith("depnmt ") for line in commands(path)), path


def resolve(path: str) -> click.Command:
    """The command at ``path`` (``"analyze uas"``) as the CLI runs it."""
    command = cli
    for name in path.split():
        command = command.get_command(click.Context(command), name)
    return command


def test_every_example_flag_is_a_current_flag():
    """Each flag of each example is a visible flag of its command (no removed, misspelled or
    deprecated spelling), the lines the pipeline test cannot run (CTranslate2 missing, no
    network) included."""
    for line in example_lines():
        words = shlex.split(line)
        command = resolve(command_path(words))
        flags = {flag for p in command.params if isinstance(p, click.Option) and not p.hidden
                 for flag in [*p.opts, *p.secondary_opts]}
        args, _, _ = split_redirections(words)
        used = {word.split("=")[0] for word in args if word.startswith("-")}
        assert used <= flags, f"`{line}`: {sorted(used - flags)} are not options of it"


@pytest.fixture
def workdir(tmp_path, shared_data, monkeypatch) -> Path:
    """An empty working directory (the cwd) and $DEPNMT_DATA_DIR with a tiny Multi30k."""
    corpus = tmp_path / "data" / "multi30k"
    corpus.mkdir(parents=True)
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(240)]
        for split, (start, end) in TINY_SPLITS.items():
            with gzip.open(corpus / f"{split}.{lang}.gz", "wt", encoding="utf-8") as out:
                out.writelines(lines[start:end])
    monkeypatch.setenv("DEPNMT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def fake_stanza_download(calls: list, monkeypatch) -> None:
    """``models download`` needs the network: its downloader records what it was asked."""
    import depnmt.stages.parse.stanza_backend as stanza_backend
    monkeypatch.setattr(stanza_backend, "download_models",
                        lambda lang, package, folder: calls.append((lang, package, str(folder))))


def comparison_folder(root: Path) -> None:
    """work/compare laid out as a comparison recipe's results (models/NAME, hyps/NAME.de)
    from the pipeline's two models and their translations, checkpoints left out."""
    for name, model, hyps in (("abs", "model", "test.de"), ("abs+gps", "model-gps", "test-gps.de")):
        shutil.copytree(root / "work" / model, root / "work/compare/models" / name,
                        ignore=shutil.ignore_patterns("checkpoints", "*.lock"))
        (root / "work/compare/hyps").mkdir(parents=True, exist_ok=True)
        shutil.copy(root / hyps, root / "work/compare/hyps" / f"{name}.de")


def contrastive_set(root: Path) -> None:
    """contrast.tsv: each test pair of the pipeline's corpus against its reference with the
    first two words swapped."""
    prepare = root / "work" / "prepare"
    sources, refs = ((prepare / f"test.raw.{lang}").read_text(encoding="utf-8").splitlines()
                     for lang in ("en", "de"))
    lines = [f"{s}\t{r}\t{' '.join([*r.split()[1::-1], *r.split()[2:]])}\tswap\n"
             for s, r in zip(sources, refs) if len(r.split()) > 2]
    (root / "contrast.tsv").write_text("".join(lines), encoding="utf-8")


def run_example(line: str, capsys, monkeypatch) -> None:
    """Run one example line in-process, its ``<`` and ``>`` redirections included."""
    args, stdin, stdout = split_redirections(shlex.split(line))
    if args[0] == "train":
        args += TEST_BUDGET
    if stdin:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(open(stdin, "rb"), encoding="utf-8"))
    capsys.readouterr()
    status = run_cli(args)
    out, err = capsys.readouterr()
    assert status == 0, f"`{line}` failed:\n{err}"
    assert "is deprecated" not in err, f"`{line}` uses an old spelling:\n{err}"
    if stdout:
        Path(stdout).write_text(out, encoding="utf-8")


@pytest.mark.slow
def test_the_examples_run_in_pipeline_order(workdir, capsys, monkeypatch):
    downloads: list = []
    fake_stanza_download(downloads, monkeypatch)
    has_ct2 = importlib.util.find_spec("ctranslate2") is not None
    for line in example_lines():
        path = command_path(shlex.split(line))
        if path == "export" and not has_ct2:
            continue                            # an optional extra (the line parses: above)
        if path == "archive" and not (workdir / "work/compare").exists():
            comparison_folder(workdir)
        if path == "contrastive" and not (workdir / "contrast.tsv").exists():
            contrastive_set(workdir)
        run_example(line, capsys, monkeypatch)
    assert downloads == [("en", None, "work/stanza")]
    for made in ("work/prepare/test.raw.de", "work/parse/train.en.conllu", "work/bpe/manifest.json",
                 "work/words/vocab.src.txt", "work/model/checkpoints/avg5.pt", "work/multitask",
                 "curves.png", "tree.png", "awsl.tsv", "results/compare/models/abs/metrics.jsonl"):
        assert (workdir / made).exists(), made
    archived = json.loads((workdir / "results/data.json").read_text(encoding="utf-8"))
    assert {"bpe", "parse"} <= set(archived["folders"])       # what --check-data compared
    for hyps in ("test.de", "test-gps.de", "test-ens.de"):
        assert len((workdir / hyps).read_text(encoding="utf-8").splitlines()) == 20, hyps
