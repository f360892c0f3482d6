"""Options that were accepted and then did nothing, while the run seemed to use them:
``parse --conllu-dir`` without ``--backend conllu`` parsed with stanza (the manifest recording
the folder of trees it never read), ``--stanza-dir`` and ``--model`` with a backend that reads
neither, ``translate --threads`` without ``--ct2`` and ``translate --ct2 --precision`` (the
export computes in its own type); ``$DEPNMT_PRECISION`` beat a ``--config`` file's
``precision`` (click reads the variable before the file); ``--no-amp --precision bf16`` trained
in fp32, and ``--resume --precision bf16`` of a ``--no-amp`` run too, while ``config.json``
recorded bf16; ``--alpha``, ``--length-penalty`` and ``--at-limit`` did nothing to a greedy
search without a word; ``--init-partial`` without ``--init-from`` trained from scratch (and a
warm-started run could not resume from its own ``train.yaml``); ``DEPNMT_PACKED_WEIGHTS=off``
packed the weights as if unset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from depnmt.core.errors import DepnmtError
from depnmt.decoding.settings import TranslateSettings
from depnmt.stages.parse.stage import ParseSettings

from .conftest import TINY_MODEL, run_cli, run_subprocess


def training_precision(model: Path) -> tuple[str, str]:
    """What ``model``'s ``config.json`` records as its precision, and what its last
    ``metrics.jsonl`` record that names one says it trained in."""
    config = json.loads((model / "config.json").read_text(encoding="utf-8"))
    records = [json.loads(line) for line in
               (model / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    return (config["training"]["precision"],
            [r["precision"] for r in records if "precision" in r][-1])


@pytest.mark.parametrize("args, message", [
    (["--conllu-dir", "{given}"],
     "--conllu-dir takes effect only with --backend conllu, not --backend stanza"),
    (["--backend", "spacy", "--conllu-dir", "{given}"],
     "--conllu-dir takes effect only with --backend conllu, not --backend spacy"),
    (["--backend", "spacy", "--stanza-dir", "{given}"],
     "--stanza-dir takes effect only with --backend stanza, not --backend spacy"),
    (["--backend", "conllu", "--conllu-dir", "{given}", "--model", "en_core_web_sm"],
     "--model takes effect only with --backend stanza or --backend spacy, not --backend conllu"),
])
def test_parse_refuses_an_option_of_another_backend(args, message, tiny_bpe, tmp_path, capsys):
    given = tmp_path / "given"
    given.mkdir()
    out = tmp_path / "parse"
    args = [a.format(given=given) for a in args]
    assert run_cli(["parse", "-i", tiny_bpe.parent / "prepare", "-o", out, "--splits", "dev",
                    *args]) == 2
    assert f"error: {message}" in capsys.readouterr().err
    assert not out.exists()


def test_the_api_refuses_an_option_where_it_takes_no_effect(tmp_path):
    with pytest.raises(DepnmtError, match="--conllu-dir takes effect only with --backend conllu"):
        ParseSettings(out_dir=tmp_path / "o", backend="spacy", conllu_dir=tmp_path)
    with pytest.raises(DepnmtError, match="--threads takes effect only with --ct2"):
        TranslateSettings(threads=2)
    assert ParseSettings(out_dir=tmp_path / "o", backend="conllu", conllu_dir=tmp_path)
    assert TranslateSettings(threads=2, ct2_dir=tmp_path).threads == 2


def test_translate_refuses_threads_without_ct2_and_a_precision_with_it(tiny_model, tmp_path,
                                                                        capsys):
    source = tmp_path / "in.txt"
    source.write_text("A man is sleeping .\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    assert run_cli(["translate", "-m", tiny_model, "-i", source, "-o", out,
                    "--threads", "2"]) == 2
    assert "error: --threads takes effect only with --ct2" in capsys.readouterr().err
    export = tmp_path / "ct2"
    export.mkdir()
    assert run_cli(["translate", "--ct2", export, "-i", source, "-o", out,
                    "--precision", "bf16"]) == 2
    assert ("error: --ct2 computes in the export's own type (depnmt export --quantization), "
            "not --precision bf16") in capsys.readouterr().err
    assert not out.exists()


def test_a_config_files_precision_wins_over_the_environment(tiny_bpe, tmp_path, monkeypatch):
    config = tmp_path / "run.yaml"
    config.write_text("precision: fp32\n", encoding="utf-8")
    monkeypatch.setenv("DEPNMT_PRECISION", "bf16")
    model = tmp_path / "m"
    assert run_cli(["train", "--config", config, "-i", tiny_bpe, "-o", model, *TINY_MODEL,
                    "--max-steps", "1", "--valid-every", "100"]) == 0
    assert training_precision(model) == ("fp32", "fp32")
    other = tmp_path / "env"                    # without the file, the variable's default
    assert run_cli(["train", "-i", tiny_bpe, "-o", other, *TINY_MODEL, "--max-steps", "1",
                    "--valid-every", "100"]) == 0
    assert training_precision(other) == ("bf16", "bf16")


def test_no_amp_is_fp32_and_another_precision_is_not_dropped(tiny_bpe, tmp_path, capsys):
    model = tmp_path / "m"
    run = ["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--valid-every", "100"]
    assert run_cli([*run, "--max-steps", "1", "--no-amp", "--precision", "bf16"]) == 2
    assert "--no-amp is --precision fp32 (its older spelling), and --precision bf16 is given " \
           "too" in capsys.readouterr().err
    assert run_cli([*run, "--max-steps", "1", "--no-amp"]) == 0
    assert training_precision(model) == ("fp32", "fp32")
    assert run_cli(["train", "-o", model, "--resume", "--max-steps", "2", "--device", "cpu",
                    "--precision", "bf16"]) == 0
    assert training_precision(model) == ("bf16", "bf16")


def test_search_options_greedy_search_does_not_use_are_named(tiny_model, tmp_path, capsys):
    import depnmt
    source = tmp_path / "in.txt"
    source.write_text("A man is sleeping .\n", encoding="utf-8")
    greedy = ["translate", "-m", tiny_model, "-i", source, "-o", tmp_path / "out.txt",
              "--beam", "1"]
    assert run_cli([*greedy, "--alpha", "2", "--length-penalty", "power"]) == 0
    assert ("warning: --alpha 2.0, --length-penalty power: no effect with beam 1 (greedy "
            "search ranks no hypotheses") in capsys.readouterr().err
    assert run_cli([*greedy, "--alpha", "2", "--nbest", "1"]) == 0     # the score uses it
    assert run_cli([*greedy[:-1], "2", "--alpha", "2"]) == 0
    assert "no effect" not in capsys.readouterr().err
    translator = depnmt.Translator.load(tiny_model, device="cpu")
    translator.translate(["A man is sleeping ."], beam=1, at_limit="cut")
    assert "warning: --at-limit cut: no effect with beam 1" in capsys.readouterr().err


def test_init_partial_needs_init_from_and_a_warm_run_resumes_from_its_train_yaml(
        tiny_model, tiny_bpe, tmp_path, capsys):
    import depnmt
    model = tmp_path / "warm"
    run = ["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--valid-every", "100"]
    assert run_cli([*run, "--max-steps", "1", "--init-partial"]) == 2    # trained from scratch
    assert "--init-partial goes with --init-from" in capsys.readouterr().err
    with pytest.raises(DepnmtError, match="--init-partial goes with --init-from"):
        depnmt.train_model({"input": str(tiny_bpe), "output": str(model), "init-partial": True})
    assert not model.exists()
    assert run_cli([*run, "--max-steps", "1", "--init-from", tiny_model, "--init-partial"]) == 0
    # train.yaml names the run's own --init-from: with --resume it continues the run
    assert run_cli(["train", "--config", model / "train.yaml", "-o", model, "--resume",
                    "--max-steps", "2"]) == 0
    steps = [json.loads(line)["step"] for line in
             (model / "metrics.jsonl").read_text(encoding="utf-8").splitlines()]
    assert max(steps) == 2
    assert run_cli(["train", "-o", model, "--resume", "--max-steps", "3", "--init-from",
                    tiny_bpe.parent]) == 2
    assert "--init-from starts a new run" in capsys.readouterr().err


def test_a_misspelt_packed_weights_switch_is_an_error(tiny_model, tmp_path):
    source = tmp_path / "in.txt"
    source.write_text("A man is sleeping .\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    done = run_subprocess(["translate", "-m", tiny_model, "-i", source, "-o", out],
                          env={"DEPNMT_PACKED_WEIGHTS": "off"})     # read at import
    assert done.returncode == 2
    assert done.stderr == ("error: DEPNMT_PACKED_WEIGHTS=off: expected 0 (plain F.linear) or 1 "
                           "(packed weights, the default)\n")
    assert not out.exists()
