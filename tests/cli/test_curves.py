"""Watching training: `train --tensorboard` writes the metrics.jsonl records as TensorBoard
scalars, and `depnmt plot` draws dev loss and BLEU of several runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from depnmt.core.errors import DepnmtError
from depnmt.evaluation.curves import Run, curves_figure, load_run, validation_records

from .conftest import TINY_MODEL, run_cli


def tensorboard_scalars(log_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar tag of the event files in ``log_dir``: [(step, value), …]."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(str(log_dir))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.fixture(scope="module")
def board_run(tmp_path_factory, tiny_bpe):
    """A tiny model trained 4 updates with --tensorboard (logs every 2, validates every 2)."""
    root = tmp_path_factory.mktemp("board")
    assert run_cli(["train", "-i", tiny_bpe, "-o", root / "m", *TINY_MODEL, "--max-steps",
                    "4", "--valid-every", "2", "--tensorboard", root / "tb"]) == 0
    return root


def test_tensorboard_has_the_training_and_dev_scalars_of_metrics_jsonl(board_run):
    pytest.importorskip("tensorboard")
    scalars = tensorboard_scalars(board_run / "tb")
    for tag in ("train/loss", "train/lr", "train/tgt_tokens_per_s", "train/src_tokens_per_s",
                "dev/nll", "dev/ppl", "dev/bleu"):
        assert tag in scalars, sorted(scalars)
    records = [json.loads(l) for l in (board_run / "m" / "metrics.jsonl").read_text().splitlines()]
    valid = [r for r in records if r["event"] == "valid"]
    assert [s for s, _ in scalars["dev/bleu"]] == [r["step"] for r in valid] == [2, 4]
    assert [v for _, v in scalars["dev/nll"]] == pytest.approx([r["dev_nll"] for r in valid])
    train = [r for r in records if r["event"] == "train"]
    assert [v for _, v in scalars["train/lr"]] == pytest.approx([r["lr"] for r in train])


def test_tensorboard_missing_is_a_clear_error(tiny_bpe, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)   # import fails
    assert run_cli(["train", "-i", tiny_bpe, "-o", tmp_path / "m", *TINY_MODEL,
                    "--max-steps", "1", "--tensorboard", tmp_path / "tb"]) == 2
    err = capsys.readouterr().err
    assert "--tensorboard needs the tensorboard package" in err and "Traceback" not in err
    assert not (tmp_path / "m").exists()                 # refused before any work


def test_plot_draws_one_line_per_run_in_each_panel(board_run, tiny_model, tmp_path):
    runs = [load_run(board_run / "m"), load_run(tiny_model, "tiny")]
    fig = curves_figure(runs)
    assert len(fig.axes) == 4
    for ax in fig.axes:
        assert [line.get_label() for line in ax.get_lines()] == ["m", "tiny"]
    loss_vs_updates = fig.axes[0].get_lines()[0]
    assert list(loss_vs_updates.get_xdata()) == [2, 4]
    assert list(loss_vs_updates.get_ydata()) == [r["dev_nll"] for r in runs[0].valid]
    out = tmp_path / "curves.png"
    assert run_cli(["plot", "-m", board_run / "m", "-m", tiny_model, "--label", "a", "--label", "b",
                    "-o", out]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_a_resumed_run_replaces_repeated_steps():
    records = [{"event": "valid", "step": s, "dev_nll": v}
               for s, v in ((2, 5.0), (4, 4.0), (6, 3.5), (4, 4.1), (6, 3.4), (8, 3.0))]
    records.insert(3, {"event": "start", "step": 4})
    assert [(r["step"], r["dev_nll"]) for r in validation_records(records)] == \
        [(2, 5.0), (4, 4.1), (6, 3.4), (8, 3.0)]


def test_plot_errors_name_the_file_and_line(tmp_path, capsys):
    model = tmp_path / "m"
    model.mkdir()
    (model / "metrics.jsonl").write_text('{"event": "start", "step": 0}\n{"event": "valid",\n')
    assert run_cli(["plot", "-m", model, "-o", tmp_path / "c.png"]) == 2
    assert f"{model / 'metrics.jsonl'}:2: not valid JSON" in capsys.readouterr().err
    (model / "metrics.jsonl").write_text('{"event": "start", "step": 0}\n')
    with pytest.raises(DepnmtError, match="no validation records"):
        load_run(model)
    assert run_cli(["plot", "-m", model, "--label", "a", "--label", "b", "-o", tmp_path / "c.png"]) == 2
    assert not (tmp_path / "c.png").exists()


def test_a_run_without_dev_bleu_leaves_its_panel_empty_with_a_note():
    fig = curves_figure([Run("x", [{"step": 1, "time": 60, "dev_nll": 3.0}])])
    assert len(fig.axes[0].get_lines()) == 1 and not fig.axes[2].get_lines()
    assert "no dev_bleu logged" in [t.get_text() for t in fig.axes[2].texts]


def test_comparison_recipes_plot_the_curves_next_to_the_results(tmp_path):
    """recipes/lib/compare.sh report_systems writes curves.png beside the results, one curve per
    system and seed (a results folder with a space in it)."""
    out = tmp_path / "compare run"
    for i, system in enumerate(("abs", "dep+rel")):
        (out / "models" / system).mkdir(parents=True)
        (out / "models" / system / "metrics.jsonl").write_text("".join(
            json.dumps({"time": 30.0 * s, "event": "valid", "step": s, "dev_nll": 4.0 - s / 10 - i,
                        "dev_bleu": 2.0 * s + i}) + "\n" for s in (1, 2, 3)))
    repo = Path(__file__).resolve().parents[2]
    script = f"""
        set -e
        . {repo}/recipes/lib/compare.sh
        depnmt() {{ if [ "$1" = plot ]; then "{sys.executable}" -m depnmt.cli "$@"; fi; }}
        TGT_LANG=de WORK=unused SEEDS=1
        report_systems "{out}" abs dep+rel
    """
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                            env={**os.environ, "DEPNMT_NO_PROGRESS": "1"})
    assert result.returncode == 0, result.stderr
    assert "wrote" in result.stderr and "(2 run(s))" in result.stderr
    assert (out / "curves.png").stat().st_size > 10_000
