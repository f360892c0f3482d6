"""``depnmt archive``: a campaign's results without its checkpoints (see
``depnmt/evaluation/archive.py``)
and the identity of its data (``data.json``, see ``depnmt/data/record.py``); its flags are the
fields of :class:`depnmt.evaluation.archive.ArchiveSettings`."""

from __future__ import annotations

from pathlib import Path

import click

from depnmt.commands.fields import GivenPath, click_options
from depnmt.commands.options import deprecated_aliases, usage_errors
from depnmt.core.optionspec import field_params, from_options
from depnmt.evaluation.archive import ArchiveSettings


@deprecated_aliases("archive")
@click.command("archive")
@click.argument("folders", nargs=-1,
                type=GivenPath(exists=True, file_okay=False, path_type=Path))
@click_options(field_params(ArchiveSettings))
def command(folders: tuple[Path, ...], **values) -> None:
    """Copy what the results table of finished runs is computed from — each run's
    config.json, manifest.json and metrics.jsonl, its test hypotheses and, where the recipes
    wrote it, its test likelihood (hyps/NAME.LANG.ref-logprob: the log-probability of every test
    reference under the selected checkpoint, which needs the checkpoint to compute) and what
    it made the hypotheses with (hyps/NAME.LANG.settings, which a continued campaign checks), no
    checkpoints (a few hundred KB a run instead of ~200 MB) — out of the comparison recipes' results
    FOLDERS (models/NAME, hyps/NAME.LANG; one folder per seed) into OUT/<FOLDER's name>/.
    `depnmt report -f` and `depnmt plot` then give the same table and curves from the archive,
    on a machine that never had the models. Archiving again adds the runs finished since;
    unfinished runs, and runs a process is training, are skipped with a warning. Archives into
    one OUT at once (campaign jobs) run one after the other: each waits for the one writing OUT.

    OUT/data.json records the data the runs were trained on: for each data folder (prepare,
    parse, bpe, by name) its stage's options, library and parser versions and the sha256 of
    every file it wrote. Runs of one archive trained on different data are an error.
    --check-data DIR compares the data folders of a continued campaign (remade on another
    machine) with it: the first differing file is an error, before anything is trained.
    """
    from depnmt.core.log import info
    from depnmt.data.record import check_folders
    from depnmt.evaluation.archive import archive

    settings = from_options(ArchiveSettings, values)
    with usage_errors():
        settings.check_request(folders)
    out, check = settings.out, settings.check
    if check:
        checked = check_folders(list(check), out)
        if checked:
            info(f"data folders {', '.join(checked)} match {out / 'data.json'}")
    if folders:
        archived = archive(list(folders), out)
        info(f"archived {len(archived)} run(s) into {out}")
