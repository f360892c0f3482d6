"""Checkpoint averaging (``depnmt/training/average.py``) and model selection
(``trainvalidation.improved``)."""

from __future__ import annotations

import pytest
import torch

from depnmt.core.errors import DepnmtError
from depnmt.training.average import average_state_dicts
from depnmt.training.checkpoints import Progress, snapshots
from depnmt.training.validation import improved as is_improved


def test_average_is_the_mean_of_known_state_dicts():
    shared = torch.tensor([3.0, 6.0])
    states = [
        {"w": torch.tensor([[1.0, 2.0], [3.0, 4.0]]), "emb": shared, "out": shared,
         "count": torch.tensor([4]), "h": torch.tensor([1.0], dtype=torch.float16)},
        {"w": torch.tensor([[3.0, 2.0], [1.0, 0.0]]), "emb": shared * 2, "out": shared * 2,
         "count": torch.tensor([7]), "h": torch.tensor([2.0], dtype=torch.float16)},
        {"w": torch.tensor([[5.0, 5.0], [5.0, 5.0]]), "emb": shared * 3, "out": shared * 3,
         "count": torch.tensor([9]), "h": torch.tensor([4.0], dtype=torch.float16)},
    ]
    mean = average_state_dicts(states)
    assert list(mean) == ["w", "emb", "out", "count", "h"]
    assert torch.equal(mean["w"], torch.tensor([[3.0, 3.0], [3.0, 3.0]]))
    assert torch.equal(mean["emb"], torch.tensor([6.0, 12.0])) and torch.equal(mean["out"],
                                                                                mean["emb"])
    assert torch.equal(mean["count"], torch.tensor([6]))              # integer: floor (20 // 3)
    assert mean["h"].dtype == torch.float32 and mean["h"].item() == pytest.approx(7 / 3)
    assert torch.equal(shared, torch.tensor([3.0, 6.0]))              # inputs untouched
    with pytest.raises(DepnmtError, match="parameters differ"):
        average_state_dicts([states[0], {"w": states[1]["w"]}])


def test_snapshots_are_sorted_by_update(tmp_path):
    for name in ("step10.pt", "step9.pt", "step100.pt", "stepx.pt", "best.pt"):
        (tmp_path / name).write_bytes(b"")
    assert [p.name for p in snapshots(tmp_path)] == ["step9.pt", "step10.pt", "step100.pt"]


def improved(metric: str, results: list[dict], progress: Progress | None = None):
    """``improved`` over a sequence of validations: the flags and the final progress."""
    progress = progress or Progress()
    flags = []
    for r in results:
        flags.append(is_improved(progress, metric, r))
        progress.history.append(r)
    return flags, progress


VALIDATIONS = [{"dev_nll": 3.0, "dev_acc": 40.0, "dev_bleu": 10.0},
               {"dev_nll": 2.5, "dev_acc": 39.0, "dev_bleu": 12.0},
               {"dev_nll": 2.6, "dev_acc": 45.0, "dev_bleu": 11.0},
               {"dev_nll": 2.4, "dev_acc": 44.0, "dev_bleu": 11.5}]


def test_selection_metric_picks_best_and_counts_patience():
    flags, p = improved("acc", VALIDATIONS)
    assert flags == [True, False, True, False] and p.bad_validations == 1 and p.best == 45.0
    assert improved("loss", VALIDATIONS)[0] == [True, True, False, True]
    assert improved("bleu", VALIDATIONS)[0] == [True, True, False, False]
    no_refs = [{k: v for k, v in r.items() if k != "dev_bleu"} for r in VALIDATIONS]
    assert improved("bleu", no_refs)[0] == [True, True, False, True]   # falls back to the loss


def test_changing_the_metric_on_resume_rebuilds_the_best_from_history():
    _, p = improved("loss", VALIDATIONS[:3])          # best dev_nll 2.5
    flags, p = improved("acc", VALIDATIONS[3:], p)    # acc 44 < 45 seen at the 3rd validation
    assert flags == [False] and p.best == 45.0 and p.best_metric == "dev_acc"


def test_changing_the_metric_on_resume_counts_patience_by_it(capsys):
    """The validations since the new metric's best, not the old metric's count, go on: by
    loss the 3rd validation was the first without improvement (count 1), by accuracy it was
    the best (count 0), so the 4th, worse by accuracy, makes the count 1, not 2."""
    p, flags = Progress(), []
    for i, r in enumerate(VALIDATIONS):               # updates 10, 20, 30, then resumed: 40
        p.step = 10 * (i + 1)
        flags.append(is_improved(p, "loss" if i < 3 else "acc", r))
        if i == 2:
            assert p.bad_validations == 1 and p.best_step == 20
        p.history.append({"step": p.step, **r})
    assert flags[3] is False and p.bad_validations == 1 and p.best == 45.0
    assert p.best_step == 20                           # best.pt: still the loss's pick
    assert "best.pt holds update 20, the best by dev_nll; by dev_acc the best so far is " \
           "update 30's" in capsys.readouterr().err
