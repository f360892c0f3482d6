"""GPS, PASCAL and structural positions end to end: training through flags (GPS at all layers,
and all three composed), the label vocabulary in config.json (resume keeps it; unseen labels
map to <unk>), translation of pre-parsed input, and `depnmt analyze awsl`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from depnmt.stages.parse import read_conllu, write_conllu

from .conftest import TINY_MODEL, import_random_trees, run_cli

LABELS = ["nsubj", "obj", "det", "amod", "obl"]


@pytest.fixture(scope="module")
def src_trees(tiny_bpe, tmp_path_factory) -> Path:
    """Random labelled source trees over the tiny corpus, imported with the conllu backend."""
    return import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given-gps"), "parse-gps",
                               ("en",), LABELS, seed=1)


def train(tiny_bpe, trees, model: Path, *flags) -> None:
    assert run_cli(["train", "-i", tiny_bpe, "--trees", trees, "-o", model, *TINY_MODEL,
                    "--max-steps", "2", "--valid-every", "2", *flags]) == 0


@pytest.fixture(scope="module")
def gps_model(tiny_bpe, src_trees, tmp_path_factory) -> Path:
    model = tmp_path_factory.mktemp("gps") / "m"
    train(tiny_bpe, src_trees, model, "--scheme", "abs+gps-all")
    return model


def test_label_vocabulary_is_in_the_config_and_resume_keeps_it(gps_model, tiny_bpe, src_trees):
    config = json.loads((gps_model / "config.json").read_text())
    assert [s["name"] for s in config["model"]["schemes"]] == ["abs", "gps"]
    options = config["model"]["schemes"][1]["options"]
    assert set(options) == {"gps_layer", "gps_dim", "gps_dropout",
                            "gps_labels"}                        # gps's own, no others
    assert options["gps_layer"] == "all"
    assert set(options["gps_labels"]) == set(LABELS) | {"root"}
    assert config["parser"]["src"]["backend"] == "conllu"
    assert run_cli(["train", "-i", tiny_bpe, "--trees", src_trees, "-o", gps_model,
                    *TINY_MODEL, "--max-steps", "3", "--valid-every", "2", "--scheme",
                    "abs+gps-all", "--resume"]) == 0
    again = json.loads((gps_model / "config.json").read_text())["model"]["schemes"][1]["options"]
    assert again["gps_labels"] == options["gps_labels"]


def test_composed_schemes_train_and_translate_preparsed_input(tiny_bpe, src_trees, tmp_path,
                                                              capsys):
    model = tmp_path / "m"
    train(tiny_bpe, src_trees, model, "--scheme", "abs+gps+pascal+structural", "--pascal-heads",
          "1", "--structural-k", "3")
    trees = list(read_conllu(src_trees / "test.en.conllu"))[:5]
    trees[0].deprels[-1] = "never-seen-label"                     # -> <unk>
    given = tmp_path / "in.conllu"
    write_conllu(given, trees)
    capsys.readouterr()
    assert run_cli(["translate", "-m", model, "-i", given, "--input-format", "conllu",
                    "--beam", "2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 5


def test_training_and_translation_find_the_distinct_paths_on_the_host(tiny_bpe, src_trees,
                                                                     tmp_path, monkeypatch):
    """Training steps, validation (loss and dev BLEU) and translate collate their batches with
    the model's schemes: every encode gets GPS's distinct paths from the host and none is
    left to the device (where finding them waits for a GPU)."""
    from depnmt.model.schemes.gps import GPSModule
    found, prepare = [], GPSModule.prepare_features

    def recording(self, side, feats):
        found.extend(["gps_unique" in feats] if side == "src" else [])
        return prepare(self, side, feats)

    monkeypatch.setattr(GPSModule, "prepare_features", recording)
    model = tmp_path / "m"
    train(tiny_bpe, src_trees, model, "--scheme", "abs+gps")
    trained = len(found)
    assert run_cli(["translate", "-m", model, "-i", src_trees / "test.en.conllu",
                    "--input-format", "conllu"]) == 0
    assert 0 < trained < len(found) and all(found)


def test_analyze_awsl_writes_table_and_plot(gps_model, src_trees, tmp_path, capsys):
    out = tmp_path / "awsl"
    assert run_cli(["analyze", "awsl", "-m", gps_model, "-i", src_trees / "test.en.conllu",
                    "--input-format", "conllu", "-o", out]) == 0
    rows = (tmp_path / "awsl.tsv").read_text().splitlines()
    assert len(rows) == 2 and rows[1].split("\t")[:3] == ["m", "0", "yes"]
    assert 0 < float(rows[1].split("\t")[3]) < 1
    assert (tmp_path / "awsl.png").read_bytes()[:4] == b"\x89PNG"
    assert "awsl" in capsys.readouterr().out


def test_awsl_of_a_model_without_gps_is_a_one_line_error(tiny_model, tmp_path, capsys):
    src = tmp_path / "in.txt"
    src.write_text("A man .\n")
    assert run_cli(["analyze", "awsl", "-m", tiny_model, "-i", src, "-o",
                    tmp_path / "x"]) == 2
    assert "needs a GPS model" in capsys.readouterr().err
