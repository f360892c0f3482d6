"""The README's "Your own data" block runs as written: from plain aligned text files (the first
240 Multi30k pairs as train/dev/test) through prepare, parse (spaCy's installed English
model), bpe, two trainings, translate and score, in a fresh working directory, offline.

The one change made to the lines: each ``depnmt train`` gets :data:`TINY` appended (later
flags win): a 1+1-layer, d_model 32 model and 2 updates instead of Transformer-base for 30
epochs, which would take the suite minutes for nothing the example shows. The other README blocks are the set-up commands (``bash bin/quickstart``, ``python -m
pytest -q``), which ``tests/docs/test_site.py`` checks.
"""

from __future__ import annotations

import gzip
import re
import shlex
from pathlib import Path

import pytest

from .conftest import run_cli
from .test_help_examples import split_redirections

README = Path(__file__).resolve().parents[2] / "README.md"
SPLITS = {"train": (0, 200), "dev": (200, 220), "test": (220, 240)}
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--max-steps", "2",
        "--max-tokens", "500"]


def own_data_block() -> list[str]:
    """The command lines of the README's bash block that starts from ``--train-src``
    (continuation lines joined)."""
    blocks = re.findall(r"^```bash\n(.*?)^```", README.read_text(encoding="utf-8"),
                        re.MULTILINE | re.DOTALL)
    block = next(b for b in blocks if "--train-src" in b)
    return [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]


@pytest.fixture
def own_files(tmp_path, shared_data, monkeypatch) -> Path:
    """train/dev/test.{en,de} as plain text in an empty working directory (the cwd)."""
    for lang in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{lang}.gz", "rt", encoding="utf-8") as fh:
            lines = [next(fh) for _ in range(240)]
        for split, (start, end) in SPLITS.items():
            (tmp_path / f"{split}.{lang}").write_text("".join(lines[start:end]), encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.slow
def test_readme_own_data_block_runs_as_written(own_files, capsys, monkeypatch):
    lines = own_data_block()
    assert [shlex.split(line)[1] for line in lines] == [
        "prepare", "parse", "bpe", "train", "train", "translate", "score"]
    for line in lines:
        args, stdin, stdout = split_redirections(shlex.split(line))
        assert stdin is None and stdout is None, line
        capsys.readouterr()
        status = run_cli(args + TINY if args[0] == "train" else args)
        err = capsys.readouterr().err
        assert status == 0, f"`{line}` failed:\n{err}"
        assert "is deprecated" not in err, f"`{line}` uses an old spelling:\n{err}"
    hyps = (own_files / "deprel.de").read_text(encoding="utf-8").splitlines()
    assert len(hyps) == 20
    for model in ("work/model-abs", "work/model-deprel"):
        assert (own_files / model / "checkpoints" / "last.pt").exists(), model
