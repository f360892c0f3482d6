"""``depnmt runs``: where every training run under some folders stands (see
``depnmt/evaluation/runs.py``);
its flags are the fields of :class:`depnmt.evaluation.runs.RunsSettings`."""

from __future__ import annotations

import json
from pathlib import Path

import click

from depnmt.commands.fields import GivenPath, click_options
from depnmt.core.optionspec import field_params, from_options
from depnmt.evaluation.runs import RunsSettings


@click.command("runs")
@click.argument("folders", nargs=-1, required=True,
                type=GivenPath(exists=True, file_okay=False, path_type=Path))
@click_options(field_params(RunsSettings))
def command(folders: tuple[Path, ...], **values) -> None:
    """Where every training run under FOLDERS stands: for a campaign stopped and continued
    over days.

    \b
    For each model directory (config.json + metrics.jsonl) at or below FOLDERS:
      state       training (a live process holds it) | finished: early stop, epoch cap,
                  update cap or time cap | stopped (resumable: `train --resume` or the
                  recipe again continues it) | not saved (no checkpoint yet)
      epoch, updates reached; minutes per epoch (median of the last 3 epochs between
      validations of one process); at most how many minutes are left to the epoch cap at that
      pace (--max-epochs; early stopping can end a run sooner); the selection metric
      (--early-stop-metric), its best value and the update it came from, its last value;
      the averaged checkpoints (`depnmt average`); in the comparison recipes' layout
      (models/NAME beside hyps/NAME.LANG) whether the test hypotheses are written; after
      the state, "data changed at update N" for a run resumed on other data on purpose
      (`train --resume-on-changed-data`), "settings changed at update N" for one resumed with
      other flags (--json lists what changed).
    """
    from depnmt.core.errors import DepnmtError
    from depnmt.evaluation.runs import markdown, model_dirs, run_state

    dirs = model_dirs(list(folders))
    if not dirs:
        raise DepnmtError(f"no model directories (config.json + metrics.jsonl) under "
                          f"{', '.join(map(str, folders))}")
    states = [run_state(d) for d in dirs]
    if from_options(RunsSettings, values).as_json:
        for state in states:
            click.echo(json.dumps(state))
    else:
        root = folders[0] if len(folders) == 1 else None
        click.echo(markdown(states, root))
