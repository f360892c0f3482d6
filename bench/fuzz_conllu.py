r"""Fuzz the CoNLL-U reader with mutated real UD sentences against an independent strict oracle.

The long version of ``tests/unit/test_conllu_fuzz.py`` (same mutators and oracle, from
``tests/conllu_oracle.py``): every case is 1-3 consecutive sentences of the UD files with 0-3
random changes (lines deleted, duplicated, swapped or moved; IDs and HEADs set to odd strings,
numbers of 10 and 5,000 digits among them; fields emptied or given whitespace; columns removed or
added; comments, blank or whitespace-only lines inserted; multiword ranges (single-word ones
such as ``2-2`` too) and empty nodes inserted; the file cut, its line endings
changed to CRLF, lone CR or a mix, a NUL byte or a byte order mark added).

    python bench/fuzz_conllu.py                      # 12,000 cases, seed 0
    python bench/fuzz_conllu.py --cases 50000 --seed 7

``--reader MODULE`` fuzzes another module's ``read_conllu(path)``, e.g. the reader of commit
0e880a7, before its inputs were checked: ``git show 0e880a7:depnmt/parse/conllu.py | sed
's/^from \.\./from depnmt./' > depnmt/stages/parse/conllu_0e880a7.py`` (its relative imports
made absolute: depnmt's 0.2.0 module paths still import) then ``--reader
depnmt.stages.parse.conllu_0e880a7``. Each case is written to a file that is read by path.

Prints the counts; exits 1 when any of the must-be-zero counts is not zero.
"""

from __future__ import annotations

import collections
import datetime
import importlib
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from depnmt.core.errors import InputError  # noqa: E402
from tests.conllu_oracle import Invalid, line_count, load_sentences, make_case, oracle  # noqa: E402


def classify(read_conllu, path: Path, data: bytes) -> tuple[str, str]:
    """(outcome, detail) of one case, written to ``path``: reader against oracle."""
    path.write_bytes(data)
    try:
        expected, why = oracle(data), ""
    except Invalid as invalid:
        expected, why = None, str(invalid)
    try:
        got = [(s.words, s.heads, s.deprels) for s in read_conllu(path)]
    except InputError as err:
        message = str(err)
        if err.path != str(path) or not 1 <= (err.line or 0) <= line_count(data) \
                or len(message.splitlines()) != 1:
            return "malformed error", message
        return ("rejected" if expected is None else "valid rejected"), message
    except Exception as exc:  # noqa: BLE001 -- counting them is the point
        return "exception", f"{type(exc).__name__}: {exc}"
    if expected is None:
        return "invalid accepted", why
    return ("accepted" if got == expected else "accepted, different trees"), ""


def error_kind(message: str) -> str:
    """A rejection's message without file, line and values: its kind."""
    text = message.split(": ", 1)[1]
    text = re.sub(r"'[^']*'|\"[^\"]*\"|\d+", "…", text)
    return text[:90]


def machine() -> list[str]:
    flags = sorted(set(re.findall(r"\b(avx512_bf16|amx_bf16|avx512f|avx2)\b",
                                  Path("/proc/cpuinfo").read_text())))
    cpu = next((line.split(":", 1)[1].strip() for line in
                Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("model name")),
               platform.processor())
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    return [f"date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}",
            f"machine: {cpu}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
            f"commit {commit or '?'}",
            f"CPU flags: {' '.join(flags) or 'none of avx2/avx512f/avx512_bf16/amx_bf16'}",
            f"load average before: {Path('/proc/loadavg').read_text().strip()}"]


MUST_BE_ZERO = ("exception", "malformed error", "invalid accepted", "accepted, different trees")


@click.command()
@click.option("--cases", type=click.IntRange(min=1), default=12000, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--ud", "ud_dir", type=click.Path(file_okay=False, path_type=Path),
              default=REPO.parent / "shared" / "data" / "ud", show_default=True,
              help="folder of *.conllu files whose sentences are mutated")
@click.option("--examples", type=click.IntRange(min=0), default=3, show_default=True,
              help="examples printed per outcome that must not happen")
@click.option("--reader", default="depnmt.core.conllu", show_default=True,
              help="module whose read_conllu(path) is fuzzed")
def main(cases: int, seed: int, ud_dir: Path, examples: int, reader: str) -> None:
    """Mutated UD sentences: the reader must agree with the oracle on every case."""
    sentences = load_sentences(ud_dir)
    if not sentences:
        raise click.UsageError(f"{ud_dir}: no *.conllu sentences")
    read_conllu = importlib.import_module(reader).read_conllu
    print(f"command: python bench/fuzz_conllu.py --cases {cases} --seed {seed} --ud {ud_dir} "
          f"--reader {reader}")
    print("\n".join(machine()))
    rng = random.Random(seed)
    counts: collections.Counter = collections.Counter()
    kinds: collections.Counter = collections.Counter()
    shown: dict[str, list[str]] = collections.defaultdict(list)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(cases):
            data = make_case(rng, sentences)
            outcome, detail = classify(read_conllu, Path(tmp) / "case.conllu", data)
            counts[outcome] += 1
            if outcome == "rejected":
                kinds[error_kind(detail)] += 1
            elif outcome != "accepted" and len(shown[outcome]) < examples:
                shown[outcome].append(f"{detail}\n      case: {data[:300]!r}")
    seconds = time.perf_counter() - start
    print(f"load average after: {Path('/proc/loadavg').read_text().strip()}")
    print(f"sentences to mutate: {len(sentences)} from {ud_dir}/*.conllu")
    print(f"cases: {cases} in {seconds:.1f} s ({cases / seconds:.0f}/s)")
    print(f"accepted (valid per the oracle, same trees): {counts['accepted']}")
    print(f"rejected with a one-line FILE:LINE error (invalid per the oracle): {counts['rejected']}")
    for name in MUST_BE_ZERO + ("valid rejected",):
        print(f"{name}: {counts[name]}" + (" (must be 0)" if name in MUST_BE_ZERO else ""))
    print(f"kinds of rejection ({len(kinds)}), most frequent first:")
    for kind, n in kinds.most_common():
        print(f"  {n:6d}  {kind}")
    for outcome, lines in shown.items():
        print(f"examples of '{outcome}':")
        for line in lines:
            print(f"  - {line}")
    bad = sum(counts[name] for name in MUST_BE_ZERO + ("valid rejected",))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
