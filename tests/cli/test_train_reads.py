"""A training run is one object from its configuration to the trainer: ``config.json`` is read
at most once per ``depnmt train`` (a ``--resume`` included: the run's settings, its learned
options, its data's provenance and trees folder all come from that one read; the trainer's
validation decodes with the configuration it wrote, not read back), and the saved model config
is upgraded to today's form once, where it is read."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import depnmt
import depnmt.model.schemes.upgrade as upgrade

from .conftest import TINY_MODEL, run_cli

RUN = [*TINY_MODEL, "--valid-every", "1"]        # validation decodes the dev set (BLEU)


def count_reads(monkeypatch, model: Path) -> dict[str, int]:
    """From now on, counts of the reads of ``model``'s ``config.json`` (``reads``) and of the
    upgrades of its model config as that file holds it now (``upgrades``)."""
    counts = {"reads": 0, "upgrades": 0}
    config = (model / "config.json").resolve()
    saved = json.loads(config.read_text()) if config.exists() else {}
    read_bytes = Path.read_bytes

    def counting_read(self):
        if self.resolve() == config:
            counts["reads"] += 1
        return read_bytes(self)

    real_upgrade = upgrade.upgrade_model_config

    def counting_upgrade(model_config):
        counts["upgrades"] += model_config == saved.get("model")
        return real_upgrade(model_config)

    monkeypatch.setattr(Path, "read_bytes", counting_read)
    for module in [upgrade, *sys.modules.values()]:      # wherever it is imported by name
        if getattr(module, "upgrade_model_config", None) is real_upgrade:
            monkeypatch.setattr(module, "upgrade_model_config", counting_upgrade)
    return counts


def test_a_fresh_run_does_not_read_back_the_config_it_wrote(tiny_bpe, tmp_path, monkeypatch):
    model = tmp_path / "m"
    counts = count_reads(monkeypatch, model)
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *RUN, "--max-steps", "2"]) == 0
    assert counts["reads"] == 0 and (model / "config.json").is_file()
    assert '"dev_bleu"' in (model / "metrics.jsonl").read_text()     # it validated, decoding


@pytest.mark.parametrize("how", ["cli", "api"])
def test_resume_reads_config_json_once_and_upgrades_it_once(tiny_bpe, tmp_path, monkeypatch,
                                                            how):
    """The model config of a model saved before one of its scheme's options existed (here:
    ``rel_k`` taken out of its config.json) is upgraded (the option takes its default) where
    config.json is read, once; the run continues with it and records it."""
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *RUN, "--scheme", "abs+rel",
                    "--max-steps", "2"]) == 0
    config = json.loads((model / "config.json").read_text())
    (rel,) = [s for s in config["model"]["schemes"] if s["name"] == "rel"]
    rel_k = rel["options"].pop("rel_k")
    (model / "config.json").write_text(json.dumps(config))
    counts = count_reads(monkeypatch, model)
    if how == "cli":
        assert run_cli(["train", "-o", model, "--resume", "--max-steps", "3"]) == 0
    else:
        assert depnmt.train_model({"output": str(model), "resume": True, "max-steps": 3}) == model
    assert counts == {"reads": 1, "upgrades": 1}
    assert '"step": 3' in (model / "metrics.jsonl").read_text()
    config = json.loads((model / "config.json").read_text())
    assert [s["options"]["rel_k"] for s in config["model"]["schemes"]
            if s["name"] == "rel"] == [rel_k]


def test_a_fresh_run_over_a_killed_runs_folder_reads_its_config_once(tiny_bpe, tmp_path,
                                                                     monkeypatch):
    """A run killed before its first ``last.pt`` leaves a ``config.json`` that the next
    fresh run recognises (and replaces): read once, before the folder's lock is taken."""
    model = tmp_path / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *RUN, "--max-steps", "1"]) == 0
    (model / "checkpoints" / "last.pt").unlink()
    (model / "checkpoints" / "best.pt").unlink()
    counts = count_reads(monkeypatch, model)
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *RUN, "--max-steps", "1"]) == 0
    assert counts["reads"] == 1
