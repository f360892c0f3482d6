"""`depnmt runs`: the state of every run under a campaign folder, built from copies of a tiny
trained model put into each state by hand."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess

from .conftest import run_cli


def test_runs_reports_every_state(tiny_model, tmp_path, capsys):
    models = tmp_path / "camp" / "models"
    for name in ("done", "early", "stopped", "live", "fresh"):
        shutil.copytree(tiny_model, models / name)
    (tmp_path / "camp" / "hyps").mkdir()
    (tmp_path / "camp" / "hyps" / "done.de").write_text("ein Hund\n")
    config = json.loads((models / "early" / "config.json").read_text())
    config["training"]["patience"] = 2
    (models / "early" / "config.json").write_text(json.dumps(config))
    manifest = json.loads((models / "early" / "manifest.json").read_text())
    manifest["progress"]["bad_validations"] = 2
    (models / "early" / "manifest.json").write_text(json.dumps(manifest))
    dead = subprocess.Popen(["true"])
    dead.wait()                                         # its pid names no live process now
    for name in ("stopped", "live", "fresh"):
        (models / name / "manifest.json").unlink()
        (models / name / ".lock").write_text(f"{dead.pid}\n")     # as a killed trainer left it
    holder = os.open(models / "live" / ".lock", os.O_RDWR)
    fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)            # as a running trainer holds it
    for ckpt in (models / "fresh" / "checkpoints").glob("*.pt"):
        ckpt.unlink()
    shutil.copy(models / "done" / "checkpoints" / "last.pt",
                models / "done" / "checkpoints" / "avg2.pt")       # as `depnmt average -o avg2`

    capsys.readouterr()
    try:
        assert run_cli(["runs", tmp_path / "camp", "--json"]) == 0
    finally:
        os.close(holder)
    rows = {os.path.basename(r["run"]): r
            for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert {k: r["state"] for k, r in rows.items()} == {
        "done": "finished: update cap", "early": "finished: early stop",
        "stopped": "stopped (resumable)", "live": f"training (process {os.getpid()})",
        "fresh": "not saved"}
    assert rows["done"]["hypothesis"] is True and rows["early"]["hypothesis"] is False
    assert rows["done"]["averages"] == ["avg2"] and rows["early"]["averages"] == []
    valid = [json.loads(line) for line in (tiny_model / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in valid if r["event"] == "valid"]
    selected = [r for r in valid if r.get("best")][-1]
    metric = rows["done"]["metric"]
    assert metric == "dev_bleu"                               # train's default selection
    assert (rows["done"]["best"], rows["done"]["best_step"]) == (selected[metric],
                                                                 selected["step"])
    assert rows["done"]["last"] == valid[-1][metric] and rows["done"]["updates"] == 12

    assert run_cli(["runs", tmp_path / "camp"]) == 0           # the table, paths relative
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| run | scheme | seed | state |")
    assert any(line.startswith("| models/done | abs | ") and "| finished: update cap |" in line
               and line.endswith("| avg2 | yes |") for line in table)


def test_runs_without_model_directories_is_a_clear_error(tmp_path, capsys):
    assert run_cli(["runs", tmp_path]) == 2
    assert "no model directories" in capsys.readouterr().err


def test_minutes_per_epoch_leaves_out_resumes():
    """Validations at epochs 1–4 of one process, a resume, then epochs 5–6: the spans are
    2, 4, 3 (epochs 2–4) and 5 (epoch 6) minutes; the span over the resume is not one; the
    median of the last three is 4."""
    from depnmt.evaluation.runs import minutes_per_epoch

    def valid(epoch, minute):
        return {"event": "valid", "epoch": epoch, "time": 60.0 * minute}
    records = [{"event": "start"}, valid(1, 10), valid(2, 12), valid(3, 16), valid(4, 19),
               {"event": "start"}, valid(5, 100), valid(6, 105)]
    assert minutes_per_epoch(records) == 4.0
    assert minutes_per_epoch(records, last=1) == 5.0
    assert minutes_per_epoch(records[:2]) is None


def test_minutes_left_to_the_epoch_cap():
    """In epoch 4 of at most 10 at 3 min/epoch: 7 epochs (4–10) × 3 = 21 minutes at most."""
    from depnmt.evaluation.runs import minutes_left
    assert minutes_left(4, {"max_epochs": 10}, 3.0) == 21.0
    assert minutes_left(12, {"max_epochs": 10}, 3.0) == 0.0
    assert minutes_left(4, {"max_epochs": None}, 3.0) is None
    assert minutes_left(4, {"max_epochs": 10}, None) is None
