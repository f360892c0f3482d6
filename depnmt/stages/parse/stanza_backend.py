"""The stanza backend: UD trees from stanza's neural pipeline, in pretokenized mode.

stanza is given our tokens (``tokenize_pretokenized=True``: one sentence per line, no multiword
expansion), so its words are exactly ours. Models are never downloaded implicitly (parsing
stays offline and reproducible): they are read from the resources folder (the ``resources_dir``
setting, else ``$STANZA_RESOURCES_DIR``, else stanza's own default, its user cache folder
``~/.cache/stanza/<resources version>/resources`` on Linux — ``DEFAULT_MODEL_DIR`` of
``stanza.resources.common``). When they are missing the error names the command that fetches
them, ``depnmt models download LANG`` (:func:`download_models`).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

from depnmt.core.conllu import Sentence
from depnmt.core.errors import DepnmtError
from depnmt.core.optionspec import Folder, check_options, option
from depnmt.stages.parse.parser import Parser

PROCESSORS = "tokenize,pos,lemma,depparse"


def default_resources_dir() -> str:
    """``$STANZA_RESOURCES_DIR`` or stanza's default folder (its user cache folder)."""
    env = os.environ.get("STANZA_RESOURCES_DIR")
    if env:
        return env
    try:
        from stanza.resources.common import DEFAULT_MODEL_DIR
    except ImportError:  # pragma: no cover - stanza is a dependency
        return os.path.expanduser("~/stanza_resources")
    return DEFAULT_MODEL_DIR


def download_command(lang: str, package: str | None, folder: str) -> str:
    """The ``depnmt models download`` command line that fetches what :func:`load_pipeline`
    loads."""
    return " ".join(["depnmt models download", shlex.quote(lang),
                     *(["--package", shlex.quote(package)] if package else []),
                     "--stanza-dir", shlex.quote(folder)])


def missing_models_message(lang: str, folder: str, package: str | None = None) -> str:
    """The one-line error for models that are not in ``folder``, naming the command that
    fetches them."""
    return (f"stanza models for '{lang}' not found in {folder}; download them once (needs "
            f"internet) with: {download_command(lang, package, folder)}")


def download_models(lang: str, package: str | None, folder: str) -> None:
    """Fetch the models :func:`load_pipeline` needs (``PROCESSORS`` of ``package`` for ``lang``)
    into ``folder`` with ``stanza.download``. Files already there with the right checksum are
    kept, and an existing ``resources.json`` (stanza's model index) is reused, so running it
    again offline succeeds once everything is there."""
    try:
        import stanza
    except ImportError:
        raise DepnmtError("downloading stanza models needs stanza: pip install stanza") from None
    reuse_index = os.path.exists(os.path.join(folder, "resources.json"))
    try:
        stanza.download(lang, model_dir=folder, package=package or "default",
                        processors=PROCESSORS, logging_level="INFO",
                        download_json=not reuse_index)
    except Exception as exc:  # network errors, unknown language or package: one line
        raise DepnmtError(f"downloading stanza models for '{lang}' into {folder} failed: "
                          f"{type(exc).__name__}: {exc}") from None


FOLDER_HELP = ("stanza resources folder  [default: $STANZA_RESOURCES_DIR, else stanza's own "
               "default, ~/.cache/stanza/<resources version>/resources on Linux]")


@dataclass
class DownloadSettings:
    """The options of ``depnmt models download`` (:func:`download_models`), each a field
    (:func:`~depnmt.core.optionspec.option`)."""

    package: str | None = option(None, "stanza package (e.g. gsd, ewt; what `parse --backend "
                                 "stanza --model` takes)  [default: the language's default "
                                 "package]", str, metavar="NAME")
    stanza_dir: str | None = option(None, FOLDER_HELP, Folder(text=True))

    def __post_init__(self):
        check_options(self)

    def folder(self) -> str:
        """The resources folder the models go to: ``stanza_dir``, else
        :func:`default_resources_dir`."""
        return self.stanza_dir or default_resources_dir()


def load_pipeline(lang: str, package: str | None, folder: str) -> Any:
    """A stanza pipeline reading models from ``folder`` only; DepnmtError when they are missing."""
    try:
        import stanza
    except ImportError:
        raise DepnmtError("the stanza backend needs stanza: pip install stanza") from None
    try:
        return stanza.Pipeline(lang, dir=folder, package=package or "default",
                               processors=PROCESSORS, tokenize_pretokenized=True,
                               download_method=None, logging_level="WARN", use_gpu=False)
    except FileNotFoundError:
        raise DepnmtError(missing_models_message(lang, folder, package)) from None
    except ValueError as exc:  # language or package not listed in the folder's resources.json
        raise DepnmtError(f"{missing_models_message(lang, folder, package)} ({exc})") from None


def sentence_from_stanza(sentence: Any) -> Sentence:
    """A stanza ``Sentence`` (its syntactic words) as our Sentence (sent_ids all 0)."""
    words = sentence.words
    return Sentence([w.text for w in words], [int(w.head or 0) for w in words],
                    [w.deprel or "dep" for w in words], [w.upos or "X" for w in words],
                    [0] * len(words))


class StanzaParser(Parser):
    """Parse pretokenized lines with stanza; see the module docstring."""

    def __init__(self, lang: str | None, model: str | None = None,
                 resources_dir: str | None = None):
        if not lang:
            raise DepnmtError("the stanza backend needs a language code (e.g. 'en', 'de', 'ja')")
        self.settings = {"backend": "stanza", "lang": lang, "model": model,
                         "resources_dir": resources_dir}
        self.pipeline = load_pipeline(lang, model, resources_dir or default_resources_dir())

    def describe(self) -> str:
        return f"stanza {self.settings['lang']} ({self.settings['model'] or 'default'} package)"

    def analyse(self, batch: list[list[str]]) -> list[Sentence]:
        doc = self.pipeline(batch)
        return [sentence_from_stanza(s) for s in doc.sentences]
