"""``depnmt models``: parser models that are fetched only when asked (stanza's)."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.core.optionspec import field_params, from_options
from depnmt.stages.parse.stanza_backend import DownloadSettings


@click.group("models", context_settings={"help_option_names": ["-h", "--help"]})
def command() -> None:
    """Fetch the parser models `depnmt parse --backend stanza` reads.

    Parsing never downloads anything (runs stay offline and reproducible, and a missing model
    is an error that names the command below). spaCy and GiNZA pipelines are Python packages
    instead: `pip install 'depnmt[parsers]'`.
    """


@command.command("download", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("langs", nargs=-1, required=True, metavar="LANG...")
@click_options(field_params(DownloadSettings))
def download(langs: tuple[str, ...], **values) -> None:
    """Download stanza's tokenize, pos, lemma and depparse models of each LANG (e.g. en de ja)
    into the folder `depnmt parse` reads them from (then parse with --backend stanza, and the
    same --stanza-dir if you give one here).

    Files already there (right checksum) are kept and an existing resources.json is reused, so
    running it again offline succeeds once everything is there.
    """
    from depnmt.core.log import info
    from depnmt.stages.parse.stanza_backend import download_models

    settings = from_options(DownloadSettings, values)
    folder = settings.folder()
    for lang in langs:
        download_models(lang, settings.package, folder)
        info(f"stanza models for '{lang}' are in {folder}")
