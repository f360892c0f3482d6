"""train --keep-last, --early-stop-metric acc, `depnmt average` and translate --checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from depnmt.storage.checkpoint import load_checkpoint

from .conftest import TINY_MODEL, run_cli


@pytest.fixture(scope="module")
def kept_model(tmp_path_factory, tiny_bpe):
    """12 updates, validated every 3 by token accuracy, the last 2 snapshots kept."""
    model = tmp_path_factory.mktemp("keep") / "m"
    assert run_cli(["train", "-i", tiny_bpe, "-o", model, *TINY_MODEL, "--max-steps", "12",
                    "--valid-every", "3", "--keep-last", "2", "--early-stop-metric", "acc"]) == 0
    return model


def valid_records(model):
    return [r for r in map(json.loads, (model / "metrics.jsonl").read_text().splitlines())
            if r["event"] == "valid"]


def test_keep_last_prunes_to_the_newest_snapshots(kept_model):
    ckpt = kept_model / "checkpoints"
    assert sorted(p.name for p in ckpt.glob("step*.pt")) == ["step12.pt", "step9.pt"]
    snap = load_checkpoint(ckpt / "step9.pt")
    assert snap["progress"]["step"] == 9 and "optimizer" not in snap     # model only
    last = load_checkpoint(ckpt / "last.pt")["model"]
    assert all(torch.equal(last[k], v) for k, v in load_checkpoint(ckpt / "step12.pt")["model"].items())


def test_accuracy_is_validated_and_selects_best(kept_model):
    records = valid_records(kept_model)
    assert [r["step"] for r in records] == [3, 6, 9, 12]
    assert all(0 <= r["dev_acc"] <= 100 for r in records)
    best_so_far = -1.0
    for r in records:                                  # best follows dev_acc, not BLEU or loss
        assert r["best"] == (r["dev_acc"] > best_so_far)
        best_so_far = max(best_so_far, r["dev_acc"])
    selected = max(records, key=lambda r: (r["dev_acc"], -r["step"]))
    best = load_checkpoint(kept_model / "checkpoints" / "best.pt")
    assert best["progress"]["step"] == selected["step"]


def test_average_writes_the_mean_and_translate_uses_it(kept_model, tiny_bpe, capsys):
    ckpt = kept_model / "checkpoints"
    assert run_cli(["average", "-m", kept_model, "--last", "2", "-o", "avg2"]) == 0
    avg = load_checkpoint(ckpt / "avg2.pt")
    a, b = (load_checkpoint(ckpt / n)["model"] for n in ("step9.pt", "step12.pt"))
    assert avg["averaged_from"] == ["step9.pt", "step12.pt"]
    files = json.loads((kept_model / "config.json").read_text())["files"]
    assert avg["files"] == files == load_checkpoint(ckpt / "step9.pt")["files"]
    for k in a:
        assert torch.allclose(avg["model"][k], (a[k] + b[k]) / 2), k
    src = tiny_bpe.parent / "prepare" / "test.raw.en"
    capsys.readouterr()
    assert run_cli(["translate", "-m", kept_model, "-i", src, "--beam", "1",
                    "--checkpoint", "avg2"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 30
    (ckpt / "broken.pt").write_bytes(b"not a checkpoint")      # the name picks this very file
    for name, message in (("broken", "broken.pt: not a depnmt checkpoint"),
                          (str(ckpt / "broken.pt"), "broken.pt: not a depnmt checkpoint"),
                          ("avg9", "no checkpoint named 'avg9'"),
                          ("avg9", "avg2, best, broken, last, step12, step9"),
                          ("elsewhere/avg2.pt", "elsewhere/avg2.pt: no such checkpoint file")):
        assert run_cli(["translate", "-m", kept_model, "-i", src, "--checkpoint", name]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err
    (ckpt / "broken.pt").unlink()


def test_average_best_and_its_errors(kept_model, capsys):
    assert run_cli(["average", "-m", kept_model, "--best", "1", "-o", "best1"]) == 0
    records = {r["step"]: r["dev_acc"] for r in valid_records(kept_model)}
    chosen = load_checkpoint(kept_model / "checkpoints" / "best1.pt")["averaged_from"]
    assert chosen == [f"step{max((9, 12), key=lambda s: records[s])}.pt"]
    capsys.readouterr()
    for args, message in ((["--last", "3", "-o", "x"], "2 snapshot(s) to choose from, 3 asked"),
                          (["--last", "2", "-o", "best"], "other than last, best"),
                          (["-o", "x"], "give one of --last N or --best N")):
        assert run_cli(["average", "-m", kept_model, *args]) == 2
        assert message in capsys.readouterr().err


def test_average_replaces_only_an_earlier_average(kept_model, capsys):
    """-o NAME replaces NAME.pt when it is an earlier average; a checkpoint of another kind at
    that name (a copy of best.pt kept by hand, a file that is no checkpoint) is one error naming
    it and stays as it was."""
    import shutil
    ckpt = kept_model / "checkpoints"
    for _ in range(2):                                  # the second replaces the first
        assert run_cli(["average", "-m", kept_model, "--last", "2", "-o", "again"]) == 0
    shutil.copy(ckpt / "best.pt", ckpt / "mine.pt")
    (ckpt / "notes.pt").write_text("not a checkpoint", encoding="utf-8")
    capsys.readouterr()
    for name in ("mine", "notes.pt"):
        kept = (ckpt / f"{name.removesuffix('.pt')}.pt").read_bytes()
        assert run_cli(["average", "-m", kept_model, "--last", "2", "-o", name]) == 2
        err = capsys.readouterr().err
        assert err == (f"error: {ckpt / name.removesuffix('.pt')}.pt: exists and is not an "
                       f"average (depnmt average replaces only its own): give -o another name, "
                       f"or move the file away\n"), err
        assert (ckpt / f"{name.removesuffix('.pt')}.pt").read_bytes() == kept
