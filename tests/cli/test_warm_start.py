"""``train --init-from MODEL``: a new run from a trained model's weights. Into abs+dep+rel from
a trained abs it copies every shared weight, names the new ones by group (the scheme's
tables), and starts from a lower dev loss than a fresh run; it refuses, before it writes
anything, another architecture (d_model, separate into shared embeddings) unless
--init-partial asks for the weights whose name and role match, a model whose vocabularies or
codes are not the data's, and --resume beside it."""

from __future__ import annotations

import json
import re

import pytest

from .conftest import (TINY_MODEL, import_random_trees, other_segmentation, overriding, run_cli,
                       train_tiny)
from .test_chaos import chaos

error_lines = chaos.error_lines


@pytest.fixture(scope="module")
def trained_abs(tiny_bpe, tmp_path_factory):
    """abs trained for 60 updates: its dev loss is well below a fresh model's."""
    return train_tiny(tiny_bpe, tmp_path_factory.mktemp("abs") / "abs", 60, 30)


@pytest.fixture(scope="module")
def trees(tiny_bpe, tmp_path_factory):
    return import_random_trees(tiny_bpe, tmp_path_factory.mktemp("given"), "parse-warm",
                               ("en",), ["nsubj", "obj", "det"], 3)


def first_dev_nll(model_dir) -> float:
    records = [json.loads(x) for x in (model_dir / "metrics.jsonl").read_text().splitlines()]
    return next(r["dev_nll"] for r in records if r.get("event") == "valid")


def one_update(tiny_bpe, trees, out, *extra) -> int:
    """abs+dep+rel, one update at a learning rate too small to move it, then validation."""
    return run_cli(["train", "-i", tiny_bpe, "-t", trees, "-o", out,
                    *overriding(TINY_MODEL, "--lr", "1e-9"), "--scheme", "abs+dep+rel",
                    "--max-steps", "1", "--valid-every", "1", *extra])


def warm_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("warm start")]


def test_abs_into_abs_dep_rel_starts_lower_and_names_the_new_weights(trained_abs, tiny_bpe,
                                                                     trees, tmp_path, capsys):
    assert one_update(tiny_bpe, trees, tmp_path / "fresh") == 0
    capsys.readouterr()
    assert one_update(tiny_bpe, trees, tmp_path / "warm", "--init-from", trained_abs) == 0
    best = trained_abs / "checkpoints" / "best.pt"
    assert warm_lines(capsys.readouterr().err) == [
        f"warm start from {best}: 45 of 51 weights copied (embeddings, encoder layer 0, "
        f"decoder layer 0)",
        "warm start: new, as in a fresh run: scheme dep+rel weights (6 weights)"]
    assert first_dev_nll(tmp_path / "warm") < first_dev_nll(tmp_path / "fresh") - 0.5


def train_from(tiny_bpe, out, model_args, *extra) -> int:
    return run_cli(["train", "-i", tiny_bpe, "-o", out, *model_args, "--max-steps", "1",
                    *extra])


@pytest.mark.parametrize("partial", [[], ["--init-partial"]], ids=["strict", "partial"])
def test_other_dimensions_are_refused_leaving_no_folder(trained_abs, tiny_bpe, tmp_path,
                                                        capsys, partial):
    out = tmp_path / "m"
    assert train_from(tiny_bpe, out, overriding(TINY_MODEL, "--d-model", "64"),
                      "--init-from", trained_abs, *partial) == 2
    [line] = error_lines(capsys.readouterr().err)
    best = trained_abs / "checkpoints" / "best.pt"
    assert line.startswith(f"error: --init-from {best}: d_model 32 there, 64 here; 43 weights "
                           f"would have other shapes (src_embed.weight [")
    assert line.endswith("and 40 more); a warm start copies weights into the same dimensions "
                         "(d_model, heads, d_ff, vocabularies)")
    assert not out.exists()


def test_separate_into_shared_embeddings_is_refused(trained_abs, tiny_bpe, tmp_path, capsys):
    out = tmp_path / "m"
    assert train_from(tiny_bpe, out, TINY_MODEL, "--share-all-embeddings",
                      "--init-from", trained_abs) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: --init-from {trained_abs / 'checkpoints' / 'best.pt'}: not this run's "
        f"architecture: embeddings separate there, shared here (--share-all-embeddings); 3 "
        f"weights would be left new or dropped (src_embed.weight, tgt_embed.weight, "
        f"output.weight); pass --init-partial to copy only the weights whose name and role "
        f"match"]
    assert not out.exists()


def test_a_partial_start_copies_the_same_roles_and_names_the_rest(trained_abs, tiny_bpe,
                                                                  tmp_path, capsys):
    """Into shared embeddings and two layers a side: layer 0 copied, layer 1 new, no
    embedding copied (the trained model's are separate: another role)."""
    assert train_from(tiny_bpe, tmp_path / "m", overriding(TINY_MODEL, "--layers", "2"),
                      "--share-all-embeddings", "--init-from", trained_abs,
                      "--init-partial") == 0
    best = trained_abs / "checkpoints" / "best.pt"
    assert warm_lines(capsys.readouterr().err) == [
        f"warm start from {best}: 42 of 87 weights copied (encoder layer 0, decoder layer 0)",
        "warm start: new, as in a fresh run: encoder layer 1, decoder layer 1 (42 weights)",
        "warm start: not copied, another role there (tied otherwise, other scheme options): "
        "embeddings (3 weights)",
        "warm start: dropped: embeddings (3 weights)"]


def test_a_partial_start_through_the_api(trained_abs, tiny_bpe, tmp_path):
    """``init-partial`` is a key of a train config (YAML, ``train_model``) as every flag."""
    from depnmt import train_model
    from depnmt.core.errors import DepnmtError
    config = {"input": str(tiny_bpe), "output": str(tmp_path / "m"), "layers": 1,
              "d-model": 32, "heads": 2, "d-ff": 64, "max-tokens": 400, "max-steps": 1,
              "device": "cpu", "decoder-layers": 2, "init-from": str(trained_abs)}
    with pytest.raises(DepnmtError, match=r"decoder_layers 1 there, 2 here; 26 weights would "
                                          r"be left new"):
        train_model({**config, "layers": None, "encoder-layers": 1})
    assert not (tmp_path / "m").exists()
    assert train_model({**config, "layers": None, "encoder-layers": 1,
                        "init-partial": True}) == tmp_path / "m"


def test_a_scheme_moved_in_the_stack_keeps_its_weights():
    """abs+rel -> abs+dep+rel: the relative tables are ``schemes.parts.1`` there and
    ``schemes.parts.2`` here; they are copied (same scheme, same options), dep's are new."""
    from depnmt.model.schemes.registry import scheme_entries
    from depnmt.model.transformer import ModelConfig
    from depnmt.training.warmstart import make_plan, model_shapes

    def model(*names: str) -> dict:
        return ModelConfig(50, 50, d_model=16, n_heads=2, d_ff=32, encoder_layers=1,
                           decoder_layers=1, schemes=scheme_entries(list(names), {})).to_dict()
    there, here = model("abs", "rel"), model("abs", "dep", "rel")
    plan = make_plan((there, model_shapes(there)), (here, model_shapes(here)))
    assert {k: v for k, v in plan.copied.items() if k.startswith("schemes.")} == {
        f"schemes.parts.2.sides.{side}.{kv}": f"schemes.parts.1.sides.{side}.{kv}"
        for side in ("src", "tgt") for kv in ("key", "value")}
    assert plan.new == ["schemes.parts.1.tables.key", "schemes.parts.1.tables.value"]
    assert plan.dropped == plan.other_role == plan.other_shape == []


def test_a_checkpoint_file_can_be_given(trained_abs, tiny_bpe, tmp_path, capsys):
    last = trained_abs / "checkpoints" / "last.pt"
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL, "--max-steps",
                    "1", "--init-from", last]) == 0
    assert f"warm start from {last}: " in capsys.readouterr().err


def test_other_codes_are_refused(trained_abs, tiny_bpe, tmp_path, capsys):
    other = other_segmentation(tiny_bpe, tmp_path / "bpe")
    assert run_cli(["train", "-i", other, "-o", tmp_path / "m", *TINY_MODEL, "--max-steps", "1",
                    "--init-from", trained_abs]) == 2
    assert error_lines(capsys.readouterr().err) == [
        f"error: {other / 'codes.joint'}: differs from the model's "
        f"{trained_abs / 'codes.joint'}: --init-from needs the data the model was trained on (the "
        f"same vocabularies and subword codes)"]


def test_init_from_and_resume_together_are_refused(trained_abs, tiny_model, tiny_bpe, capsys):
    assert run_cli(["train", "-i", tiny_bpe, "-o", tiny_model, "--resume", "--init-from",
                    trained_abs]) == 2
    assert "--init-from starts a new run from a trained model and --resume continues this " \
           "one: give one of them" in capsys.readouterr().err


def test_a_kept_scheme_keeps_what_it_learned_from_the_trained_models_data(tiny_bpe, trees,
                                                                          tmp_path, capsys):
    """abs+gps fine-tuned on other trees (other labels): the new run keeps the trained
    model's label vocabulary (the rows of its tables), so every weight is copied."""
    def labels(model) -> list[str]:
        config = json.loads((model / "config.json").read_text())
        return config["model"]["schemes"][1]["options"]["gps_labels"]

    def train(parse, out, *extra) -> int:
        return run_cli(["train", "-i", tiny_bpe, "-t", parse, "-o", out, *TINY_MODEL,
                        "--scheme", "abs+gps", "--max-steps", "1", *extra])

    assert train(trees, tmp_path / "gps") == 0
    other = import_random_trees(tiny_bpe, tmp_path, "parse-warm-other", ("en",),
                                ["amod", "case"], 5)
    capsys.readouterr()
    assert train(other, tmp_path / "tuned", "--init-from", tmp_path / "gps") == 0
    [line] = warm_lines(capsys.readouterr().err)
    assert re.search(r": (\d+) of \1 weights copied \(embeddings, encoder layer 0, decoder "
                     r"layer 0, scheme gps weights\)$", line), line
    assert labels(tmp_path / "tuned") == labels(tmp_path / "gps") != ["root", "amod", "case"]
