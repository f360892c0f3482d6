"""End-to-end fixtures: a tiny real corpus run through prepare and bpe, and tiny models.

Every command these helpers run builds and runs its model on the CPU unless the test names a
device: exact outputs (resumed training equal to straight training, translations compared with
stored ones) hold only there (on CUDA, attention's backward and ``scatter_add_`` add in a
varying order, and ``--precision auto`` decodes in bf16/fp16)."""

from __future__ import annotations

import gzip
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest

from depnmt.cli import cli, main

CPU = ["--device", "cpu"]
TINY_MODEL = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64",
              "--max-tokens", "400", "--warmup", "10", "--lr", "3e-3", "--log-every", "2",
              "--valid-max-sentences", "20", "--beam", "2", *CPU]


def overriding(base: list, *args) -> list:
    """``base`` (e.g. :data:`TINY_MODEL`: flags, each followed by its value unless it is a
    bare flag) without the flags ``args`` gives, then ``args``: depnmt refuses an option given
    twice, so a test changes a shared list's value this way."""
    given = {a for a in args if isinstance(a, str) and a.startswith("-")}
    kept, skip = [], False
    for i, item in enumerate(base):
        if skip:
            skip = False
            continue
        if item in given:
            following = base[i + 1] if i + 1 < len(base) else None
            skip = following is not None and not str(following).startswith("--")
            continue
        kept.append(item)
    return [*kept, *args]


def takes_device(args: list[str]) -> bool:
    """Whether the (sub)command that ``depnmt ARGS`` runs has a ``--device`` option."""
    command, ctx = cli, click.Context(cli)
    for word in args:
        if not isinstance(command, click.Group):
            break
        command = command.get_command(ctx, word)
        if command is None:
            return False
    return any("--device" in p.opts for p in command.params if isinstance(p, click.Option))


def on_cpu(args: list) -> list[str]:
    """``ARGS`` as strings, with ``--device cpu`` added when the command takes ``--device`` and
    ``ARGS`` name no device."""
    args = [str(a) for a in args]
    named = any(a == "--device" or a.startswith("--device=") for a in args)
    return args if named or not takes_device(args) else [*args, *CPU]


def run_cli(args: list[str], capsys=None) -> int:
    """Run ``depnmt ARGS`` in-process (on the CPU: :func:`on_cpu`); returns the exit status."""
    try:
        main(on_cpu(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def run_subprocess(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """``python -m depnmt.cli ARGS`` (on the CPU: :func:`on_cpu`), output captured as text."""
    env = {**os.environ, "DEPNMT_NO_PROGRESS": "1", **kwargs.pop("env", {})}
    return subprocess.run([sys.executable, "-m", "depnmt.cli", *on_cpu(args)], env=env,
                          capture_output=True, text=True, **kwargs)


def popen(args: list[str], env: dict | None = None, group: bool = False) -> subprocess.Popen:
    """``python -m depnmt.cli ARGS`` started in the background (on the CPU: :func:`on_cpu`);
    ``group``: in a process group of its own (whose id is its pid), for ``os.killpg``."""
    return subprocess.Popen([sys.executable, "-m", "depnmt.cli", *on_cpu(args)],
                            env={**os.environ, "DEPNMT_NO_PROGRESS": "1", **(env or {})},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=group)


@pytest.fixture(scope="session")
def tiny_bpe(tmp_path_factory, shared_data) -> Path:
    """The first 400 Multi30k pairs (dev/test 30 each) through prepare and a 300-merge BPE."""
    root = tmp_path_factory.mktemp("tiny")
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(460)]
        (root / f"train.{lang}").write_text("".join(lines[:400]), encoding="utf-8")
        (root / f"dev.{lang}").write_text("".join(lines[400:430]), encoding="utf-8")
        (root / f"test.{lang}").write_text("".join(lines[430:460]), encoding="utf-8")
    assert run_cli(["prepare", "--src-lang", "en", "--tgt-lang", "de",
                    "--train-src", root / "train.en", "--train-tgt", root / "train.de",
                    "--dev-src", root / "dev.en", "--dev-tgt", root / "dev.de",
                    "--test-src", root / "test.en", "--test-tgt", root / "test.de",
                    "-o", root / "prepare"]) == 0
    assert run_cli(["bpe", "-i", root / "prepare", "-o", root / "bpe", "--merges", "300"]) == 0
    return root / "bpe"


def train_tiny(bpe: Path, model: Path, steps: int, valid_every: int) -> Path:
    """``model``: a :data:`TINY_MODEL` trained on ``bpe`` for ``steps`` updates."""
    assert run_cli(["train", "-i", bpe, "-o", model, *TINY_MODEL, "--max-steps", steps,
                    "--valid-every", valid_every]) == 0
    return model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory, tiny_bpe) -> Path:
    """A 1-layer model trained for 12 updates (enough to have checkpoints and a config)."""
    return train_tiny(tiny_bpe, tmp_path_factory.mktemp("model") / "m", 12, 6)


_RUN_SEEDS = itertools.count(101)


def copy_run(model: Path, dest: Path, seed: int | None = None) -> Path:
    """A copy of the model folder ``model`` at ``dest``, recorded (``config.json``) as trained
    with ``seed``, by default one that no other copy has: the runs of a system differ by seed
    (``report`` refuses two of one seed)."""
    shutil.copytree(model, dest)
    config = json.loads((dest / "config.json").read_text(encoding="utf-8"))
    config.setdefault("training", {})["seed"] = next(_RUN_SEEDS) if seed is None else seed
    (dest / "config.json").write_text(json.dumps(config, indent=1), encoding="utf-8")
    return dest


@pytest.fixture(scope="session")
def seeds(tiny_bpe, tmp_path_factory) -> tuple[Path, Path]:
    """Two abs models of the tiny corpus, seeds 1 and 2, 150 updates each (ensembles)."""
    root = tmp_path_factory.mktemp("seeds")
    for seed in (1, 2):
        assert run_cli(["train", "-i", tiny_bpe, "-o", root / f"s{seed}", *TINY_MODEL,
                        "--max-steps", "150", "--valid-every", "1000", "--seed", seed]) == 0
    return root / "s1", root / "s2"


def import_random_trees(tiny_bpe: Path, given: Path, out_name: str, langs: tuple[str, ...],
                        labels: list[str], seed: int) -> Path:
    """Random trees (labels drawn from ``labels``; ``root`` on the root) over every split and
    language of the tiny corpus, written to ``given`` and imported with the conllu backend into
    ``tiny_bpe.parent / out_name``."""
    from depnmt.core.trees import random_heads
    from depnmt.stages.parse import Sentence, write_conllu
    prepare = tiny_bpe.parent / "prepare"
    rng = random.Random(seed)
    for split in ("train", "dev", "test"):
        for lang in langs:
            trees = []
            for line in (prepare / f"{split}.{lang}").read_text(encoding="utf-8").splitlines():
                words = line.split()
                heads = random_heads(len(words), rng)
                trees.append(Sentence(words, heads, ["root" if h == 0 else rng.choice(labels)
                                                     for h in heads]))
            write_conllu(given / f"{split}.{lang}.conllu", trees)
    out = tiny_bpe.parent / out_name
    side = "both" if len(langs) == 2 else "src"
    assert run_cli(["parse", "-i", prepare, "-o", out, "--backend", "conllu", "--conllu-dir",
                    given, "--side", side]) == 0
    return out


def other_segmentation(tiny_bpe: Path, out: Path) -> Path:
    """A copy of ``tiny_bpe`` at ``out`` whose BPE codes are in another order (merges applied
    otherwise) and whose vocabularies are the same size: another segmentation."""
    shutil.copytree(tiny_bpe, out)
    codes = (out / "codes.joint").read_text(encoding="utf-8").splitlines(keepends=True)
    (out / "codes.joint").write_text("".join([codes[0], *reversed(codes[1:])]),
                                     encoding="utf-8")
    return out
