"""Property-based fuzzing of the CoNLL-U reader against an independent strict oracle.

Real UD sentences (``../shared/data/ud``) are mutated (lines deleted, duplicated, swapped; IDs
and HEADs set to odd strings; columns removed; files cut; line endings changed; NUL bytes
inserted; see ``tests/conllu_oracle.py``). The reader must accept exactly the files the oracle
accepts, read the same words, heads and relations from them, and reject the others with a
one-line :class:`InputError` whose line is inside the file -- never another exception.
``bench/fuzz_conllu.py`` runs the same check on 10,000+ cases.
"""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from depnmt.core.conllu import read_conllu
from depnmt.core.errors import InputError
from tests.conftest import SHARED_DATA
from tests.conllu_oracle import Invalid, line_count, load_sentences, make_case, oracle

UD = SHARED_DATA / "ud"
SENTENCES = load_sentences(UD) if UD.is_dir() else []
NAME = "case.conllu"


def read(data: bytes) -> list[tuple[list[str], list[int], list[str]]]:
    return [(s.words, s.heads, s.deprels) for s in read_conllu(NAME, io.BytesIO(data))]


def check(data: bytes) -> bool:
    """Reader and oracle agree on ``data``; True if the file is valid."""
    try:
        expected = oracle(data)
    except Invalid as invalid:
        with pytest.raises(InputError) as err:
            read(data)
        assert err.value.path == NAME, invalid
        assert 1 <= err.value.line <= line_count(data)
        assert len(str(err.value).splitlines()) == 1
        return False
    assert read(data) == expected
    return True


@pytest.mark.skipif(not SENTENCES, reason="../shared/data/ud not present")
@settings(max_examples=200, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.randoms(use_true_random=False))
def test_reader_agrees_with_the_oracle_on_mutated_ud_sentences(rng):
    check(make_case(rng, SENTENCES))


@pytest.mark.skipif(not SENTENCES, reason="../shared/data/ud not present")
def test_unmutated_sentences_are_valid_and_the_mutations_mostly_not():
    """The oracle is not vacuous: real sentences pass it, mutated ones mostly fail it."""
    import random
    rng = random.Random(0)
    valid = [check(make_case(rng, SENTENCES)) for _ in range(300)]
    assert 0.1 < sum(valid) / len(valid) < 0.5
    whole = "".join("\n".join(s) + "\n\n" for s in SENTENCES[:500]).encode()
    assert check(whole) and len(oracle(whole)) == 500


@pytest.mark.parametrize("data", [
    b"1\ta\t_\t_\t_\t_\t0\troot\t_\t_\r\r",                 # lone CR: one sentence
    b"# text = a\r1\ta\t_\t_\t_\t_\t0\troot\t_\t_\r",        # lone CR, cut: an error
    b"1\ta\t_\t_\t_\t_\t0\troot\t_\t_\r\n\r\n",
    b"1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n \n",
    b"1\ta\t_\t_\t_\t_\t\xd9\xa0\troot\t_\t_\n\n",          # HEAD Arabic-Indic zero
    b"1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n2-3\tbc\t_\t_\t_\t_\t_\t_\t_\t_\n2\tb\t_\t_\t_\t_\t1\tx\t_\t_"
    b"\n\n",
    b"", b"\n\n\n", b"\xef\xbb\xbf# c\n\n",
    b"1\ta\t_\t_\t_\t_\t" + b"9" * 5000 + b"\troot\t_\t_\n\n",     # HEAD too large for int()
    b"1-1\ta\t_\t_\t_\t_\t_\t_\t_\t_\n1\ta\t_\t_\t_\t_\t0\troot\t_\t_\n\n",  # 1-word range
])
def test_oracle_and_reader_agree_on_edge_cases(data):
    check(data)


@pytest.mark.skipif(not SENTENCES, reason="../shared/data/ud not present")
def test_bench_script_reports_the_counts(tmp_path):
    """``bench/fuzz_conllu.py`` (a script, loaded from its path) on a few cases."""
    import importlib.util

    from click.testing import CliRunner

    from tests.conftest import REPO
    spec = importlib.util.spec_from_file_location("bench_fuzz_conllu",
                                                  REPO / "bench" / "fuzz_conllu.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    result = CliRunner().invoke(bench.main, ["--cases", "40", "--seed", "3"])
    assert result.exit_code == 0, result.output
    counts = dict(line.split(": ", 1) for line in result.output.splitlines()
                  if line.startswith(("cases", "accepted", "rejected", "invalid", "exception")))
    assert counts["exception"] == "0 (must be 0)" and counts["invalid accepted"] == "0 (must be 0)"
    accepted = int(counts["accepted (valid per the oracle, same trees)"])
    rejected = int(counts["rejected with a one-line FILE:LINE error (invalid per the oracle)"])
    assert accepted + rejected == 40 and accepted and rejected
