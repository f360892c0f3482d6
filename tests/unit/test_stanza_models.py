"""`depnmt models download`: stanza models are fetched only when asked, into the folder `parse`
reads (stanza.download is replaced here: tests never download); a missing model's error names
the exact command that fetches it."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import stanza

from depnmt.cli import main
from depnmt.core.errors import DepnmtError
from depnmt.stages.parse import make_parser
from depnmt.stages.parse.stanza_backend import PROCESSORS, default_resources_dir


def run(args, capsys) -> tuple[int, str]:
    try:
        main([str(a) for a in args])
        status = 0
    except SystemExit as exc:
        status = int(exc.code or 0)
    return status, capsys.readouterr().err


@pytest.fixture
def calls(monkeypatch):
    """stanza.download replaced by a recorder."""
    seen = []
    monkeypatch.setattr(stanza, "download", lambda *a, **kw: seen.append((a, kw)))
    return seen


def test_download_fetches_the_parse_pipelines_models_into_the_folder(calls, tmp_path, capsys):
    status, err = run(["models", "download", "en", "de", "--stanza-dir", tmp_path], capsys)
    assert status == 0, err
    expected = {"model_dir": str(tmp_path), "package": "default", "processors": PROCESSORS,
                "logging_level": "INFO", "download_json": True}
    assert calls == [(("en",), expected), (("de",), expected)]
    (tmp_path / "resources.json").write_text("{}")          # the index is there: reused
    calls.clear()
    assert run(["models", "download", "ja", "--package", "gsd", "--stanza-dir", tmp_path],
               capsys)[0] == 0
    assert calls == [(("ja",), {**expected, "package": "gsd", "download_json": False})]


def test_download_defaults_to_the_folder_parse_reads(calls, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("STANZA_RESOURCES_DIR", str(tmp_path / "env"))
    assert run(["models", "download", "en"], capsys)[0] == 0
    assert calls[0][1]["model_dir"] == str(tmp_path / "env") == default_resources_dir()
    monkeypatch.delenv("STANZA_RESOURCES_DIR")
    from stanza.resources.common import DEFAULT_MODEL_DIR
    assert default_resources_dir() == DEFAULT_MODEL_DIR       # stanza's own default


def test_a_failed_download_is_one_line(monkeypatch, tmp_path, capsys):
    def offline(*args, **kwargs):
        raise ConnectionError("no route to host")
    monkeypatch.setattr(stanza, "download", offline)
    status, err = run(["models", "download", "en", "--stanza-dir", tmp_path], capsys)
    assert status == 2
    assert err == (f"error: downloading stanza models for 'en' into {tmp_path} failed: "
                   f"ConnectionError: no route to host\n")


def test_the_missing_models_error_names_the_command_that_fetches_them(calls, tmp_path, capsys):
    folder = tmp_path / "my models"
    with pytest.raises(DepnmtError) as err:
        make_parser({"backend": "stanza", "lang": "en", "model": "ewt",
                     "resources_dir": str(folder)})
    message = str(err.value)
    assert message.startswith(f"stanza models for 'en' not found in {folder}; download them")
    command = message.split("with: ", 1)[1]
    assert command == f"depnmt models download en --package ewt --stanza-dir '{folder}'"
    assert run(shlex.split(command)[1:], capsys)[0] == 0      # the command does what it says
    assert calls == [(("en",), {"model_dir": str(folder), "package": "ewt",
                                "processors": PROCESSORS, "logging_level": "INFO",
                                "download_json": True})]


def test_recipes_fetch_stanza_models_before_parsing_with_stanza():
    """recipes/lib/compare.sh: the parse stage runs `depnmt models download` for the parsed
    sides' languages (and the flags' --stanza-dir) when the backend is stanza, else nothing."""
    lib = Path(__file__).resolve().parents[2] / "recipes" / "lib" / "compare.sh"
    script = f"""
        . {lib}
        depnmt() {{ echo "depnmt $*"; }}
        SRC_LANG=en TGT_LANG=de
        fetch_stanza_models src --backend stanza
        fetch_stanza_models both --backend stanza --stanza-dir "/m s"
        fetch_stanza_models tgt
        fetch_stanza_models src --backend spacy --model en_core_web_sm
        echo done
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert result.stdout.splitlines() == ["depnmt models download en",
                                          "depnmt models download en de --stanza-dir /m s",
                                          "depnmt models download de", "done"]
