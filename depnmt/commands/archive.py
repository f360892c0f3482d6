"""``depnmt archive``: a campaign's results without its checkpoints (see ``depnmt/archive.py``)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("archive")
@click.argument("folders", nargs=-1, required=True,
                type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("-o", "--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="archive folder: OUT/<FOLDER's name>/models/NAME/ and hyps/")
def command(folders: tuple[Path, ...], out: Path) -> None:
    """Copy what the results table of finished runs is computed from — each run's
    config.json, manifest.json and metrics.jsonl and its test hypotheses, no checkpoints
    (a few hundred KB a run instead of ~200 MB) — out of the comparison recipes' results
    FOLDERS (models/NAME, hyps/NAME.LANG; one folder per seed) into OUT/<FOLDER's name>/.
    `depnmt report -f` and `depnmt plot` then give the same table and curves from the archive,
    on a machine that never had the models. Archiving again adds the runs finished since;
    unfinished runs are skipped with a warning.

    \b
      depnmt archive work/multi30k-en-de/compare-plateau work/multi30k-en-de/compare-plateau-seed2 \\
        -o results/multi30k-en-de
      depnmt report -r work/multi30k-en-de/prepare/test.raw.de -b abs \\
        -f results/multi30k-en-de/compare-plateau -f results/multi30k-en-de/compare-plateau-seed2
    """
    from ..archive import archive
    from ..log import info

    archived = archive(list(folders), out)
    info(f"archived {len(archived)} run(s) into {out}")
