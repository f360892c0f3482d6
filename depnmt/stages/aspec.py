"""ASPEC-JE (WAT), which users obtain under licence: find its files and extract plain text.

Layout of the distribution (``ASPEC/ASPEC-JE/``)::

    train/train-1.txt train-2.txt train-3.txt   score ||| doc-id ||| sent-id ||| ja ||| en
    dev/dev.txt  devtest/devtest.txt  test/test.txt       doc-id ||| sent-id ||| ja ||| en

The training files are sorted by alignment score; the papers use the first 1.5 million pairs
of train-1 and train-2 (Omote et al. 2019 §5.1; Deguchi et al. 2019 §4.1), dev.txt (1,790
sentences) for validation and test.txt (1,812) for testing. :func:`extract` writes
``{train,dev,test}.{ja,en}`` for ``depnmt prepare --train-src ...``.

    python -m depnmt.stages.aspec /data/ASPEC work/aspec/extract --first 1500000
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import click

from depnmt.core.errors import DepnmtError
from depnmt.core.log import info, warn
from depnmt.core.manifest import write_manifest
from depnmt.core.textio import atomic_open, iter_lines, make_dir

TRAIN_FILES = ("train/train-1.txt", "train/train-2.txt")
EVAL_FILES = {"dev": "dev/dev.txt", "test": "test/test.txt"}
EXPECTED_LINES = {"dev": 1790, "test": 1812}
FIRST = 1_500_000


def find_aspec_je(path: Path) -> Path:
    """The ``ASPEC-JE`` folder under ``path`` (``path`` itself, ``path/ASPEC-JE`` or
    ``path/ASPEC/ASPEC-JE``); a :class:`DepnmtError` names every missing file otherwise."""
    candidates = [path, path / "ASPEC-JE", path / "ASPEC" / "ASPEC-JE"]
    needed = [*TRAIN_FILES, *EVAL_FILES.values()]
    for folder in candidates:
        if all((folder / name).is_file() for name in needed):
            return folder
    best = max(candidates, key=lambda f: sum((f / n).is_file() for n in needed))
    missing = [str(best / name) for name in needed if not (best / name).is_file()]
    raise DepnmtError(f"{path}: not an ASPEC-JE folder; missing {', '.join(missing)} (ASPEC is "
                      f"licensed: obtain it from its distributor, then give the folder holding "
                      f"ASPEC-JE/)")


def read_pairs(path: Path, fields: int) -> Iterator[tuple[str, str]]:
    """``(ja, en)`` of each line of an ASPEC file with ``fields`` ``|||``-separated fields."""
    for lineno, line in enumerate(iter_lines(path), start=1):
        parts = [p.strip() for p in line.split("|||")]
        if len(parts) != fields:
            raise DepnmtError(f"{path}:{lineno}: expected {fields} fields separated by '|||', "
                              f"found {len(parts)}")
        yield parts[-2], parts[-1]


def _write(pairs: Iterator[tuple[str, str]], out_dir: Path, split: str) -> int:
    n = 0
    with atomic_open(out_dir / f"{split}.ja") as ja, atomic_open(out_dir / f"{split}.en") as en:
        for n, (j, e) in enumerate(pairs, start=1):
            ja.write(j + "\n")
            en.write(e + "\n")
    return n


def _first(pairs: Iterator[tuple[str, str]], limit: int) -> Iterator[tuple[str, str]]:
    for i, pair in enumerate(pairs):
        if i >= limit:
            return
        yield pair


def extract(aspec: Path, out_dir: Path, first: int = FIRST) -> dict[str, int]:
    """Write ``{train,dev,test}.{ja,en}`` (train: the first ``first`` pairs of train-1 then
    train-2) and a manifest; returns the line count of each split."""
    folder = find_aspec_je(aspec)
    make_dir(out_dir)

    def train_pairs() -> Iterator[tuple[str, str]]:
        for name in TRAIN_FILES:
            yield from read_pairs(folder / name, 5)

    counts = {"train": _write(_first(train_pairs(), first), out_dir, "train")}
    for split, name in EVAL_FILES.items():
        counts[split] = _write(read_pairs(folder / name, 4), out_dir, split)
        if counts[split] != EXPECTED_LINES[split]:
            warn(f"{folder / name}: {counts[split]} sentences; the papers' {split} set has "
                 f"{EXPECTED_LINES[split]}")
    if counts["train"] < first:
        warn(f"{folder}: train-1 and train-2 hold {counts['train']} pairs, fewer than {first}")
    write_manifest(out_dir, "aspec", inputs={"aspec_je": str(folder)},
                   options={"first": first},
                   outputs=[f"{s}.{lang}" for s in counts for lang in ("ja", "en")])
    return counts


@click.command(context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("aspec", type=click.Path(path_type=Path))
@click.argument("out_dir", type=click.Path(path_type=Path, file_okay=False))
@click.option("--first", type=click.IntRange(min=1), default=FIRST, show_default=True,
              help="training pairs taken from the start of train-1.txt, then train-2.txt")
def main(aspec: Path, out_dir: Path, first: int) -> None:
    """Extract ASPEC-JE's Japanese and English text into OUT_DIR/{train,dev,test}.{ja,en}."""
    try:
        counts = extract(aspec, out_dir, first)
    except DepnmtError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    info(f"wrote {out_dir}: " + ", ".join(f"{s} {n:,}" for s, n in counts.items()))


if __name__ == "__main__":
    main()
