"""Named corpora that ``depnmt prepare --corpus NAME`` knows how to find (or download).

Where the files are looked for, first match wins (a folder ``<dir>/<corpus name>/`` holding all
of the corpus's files):

1. ``$DEPNMT_DATA_DIR`` if that variable is set;
2. ``../shared/data`` relative to the current directory;
3. ``shared/data`` beside the repository root (``<repo>/../shared/data``);
4. the download cache ``~/.cache/depnmt/<corpus>``, filled from the corpus's public home on
   first use (this needs internet access; without it a one-line error says where to put the
   files instead).
"""

from __future__ import annotations

import os
import shutil
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from depnmt.core.errors import DepnmtError
from depnmt.core.log import info
from depnmt.core.textio import atomic_open

SPLITS = ("train", "dev", "test")


@dataclass(frozen=True)
class Corpus:
    """A parallel corpus with a train/dev/test split in two languages.

    ``stems`` maps our split names to the corpus's file stems; files are named
    ``<stem>.<lang><suffix>``. ``remote_parts`` lists, for a stem whose download is split into
    several files, the part suffixes to concatenate (e.g. ``.000``..``.004``).
    """

    name: str
    langs: tuple[str, str]  # default direction (src, tgt)
    stems: dict[str, str]
    base_url: str
    description: str
    suffix: str = ""
    tokenizer: str | None = None  # default tokenizer kind for both sides (None: by language)
    remote_parts: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def filename(self, split: str, lang: str) -> str:
        """The local file name of one side of one split, e.g. ``val.de.gz``."""
        return f"{self.stems[split]}.{lang}{self.suffix}"

    def filenames(self) -> list[str]:
        """Every file the corpus consists of."""
        return [self.filename(split, lang) for split in SPLITS for lang in self.langs]

    def urls(self, split: str, lang: str) -> list[str]:
        """The download URL(s) whose concatenation is the file of ``split`` / ``lang``."""
        name = self.filename(split, lang)
        parts = self.remote_parts.get(split, ("",))
        return [f"{self.base_url}/{name}{part}" for part in parts]


CORPORA: dict[str, Corpus] = {
    "multi30k": Corpus(
        name="multi30k", langs=("en", "de"), suffix=".gz",
        stems={"train": "train", "dev": "val", "test": "test_2016_flickr"},
        base_url="https://raw.githubusercontent.com/multi30k/dataset/HEAD/data/task1/raw",
        description="Multi30k task 1, En-De image captions, raw text: train 29,000 pairs, "
                    "dev (val) 1,014, test (test_2016_flickr) 1,000"),
    "small_parallel_enja": Corpus(
        name="small_parallel_enja", langs=("ja", "en"), tokenizer="keep",
        stems={"train": "train", "dev": "dev", "test": "test"},
        base_url="https://raw.githubusercontent.com/odashi/small_parallel_enja/HEAD",
        remote_parts={"train": (".000", ".001", ".002", ".003", ".004")},
        description="50k Ja-En pairs from the Tanaka corpus, already tokenized (KyTea / "
                    "Stanford) with lowercased English: train 50,000, dev 500, test 500"),
}


def get_corpus(name: str) -> Corpus:
    """The corpus called ``name``; a :class:`DepnmtError` lists the known ones otherwise."""
    if name not in CORPORA:
        raise DepnmtError(f"unknown corpus '{name}' (known: {', '.join(CORPORA)})")
    return CORPORA[name]


def data_dirs() -> list[Path]:
    """Folders searched for local copies of the corpora, in order (see the module docstring)."""
    env = os.environ.get("DEPNMT_DATA_DIR")
    dirs = [Path(env)] if env else []
    dirs += [Path.cwd().parent / "shared" / "data",
             Path(__file__).resolve().parents[1].parent / "shared" / "data"]
    return dirs


def cache_dir(corpus: Corpus) -> Path:
    """Where a downloaded corpus is kept: ``~/.cache/depnmt/<corpus>``."""
    return Path.home() / ".cache" / "depnmt" / corpus.name


def has_files(folder: Path, corpus: Corpus) -> bool:
    """Whether ``folder`` holds every file of ``corpus``."""
    return all((folder / name).is_file() for name in corpus.filenames())


def locate(corpus: Corpus) -> Path:
    """The folder holding ``corpus``'s files, downloading them into the cache if needed."""
    for base in data_dirs():
        if has_files(base / corpus.name, corpus):
            return base / corpus.name
    cache = cache_dir(corpus)
    if not has_files(cache, corpus):
        download(corpus, cache)
    return cache


def download(corpus: Corpus, folder: Path) -> None:
    """Download every missing file of ``corpus`` into ``folder`` (each file written atomically)."""
    info(f"downloading {corpus.name} into {folder}")
    for split in SPLITS:
        for lang in corpus.langs:
            target = folder / corpus.filename(split, lang)
            if not target.is_file():
                fetch(corpus.urls(split, lang), target, corpus)


def fetch(urls: list[str], target: Path, corpus: Corpus) -> None:
    """Write the concatenation of ``urls`` to ``target``; one-line error when it fails."""
    with atomic_open(target, "wb") as out:
        for url in urls:
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    shutil.copyfileobj(response, out)
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise DepnmtError(
                    f"cannot download {url} ({reason}); without internet access, put the "
                    f"{corpus.name} files ({', '.join(corpus.filenames())}) into "
                    f"{target.parent} or into $DEPNMT_DATA_DIR/{corpus.name}") from None


def corpus_files(corpus: Corpus, src_lang: str, tgt_lang: str) -> dict[str, tuple[Path, Path]]:
    """``{split: (src_file, tgt_file)}`` for ``corpus`` translated ``src_lang`` → ``tgt_lang``.

    Raises :class:`DepnmtError` if the languages are not the corpus's pair.
    """
    if sorted((src_lang, tgt_lang)) != sorted(corpus.langs):
        pair = "/".join(corpus.langs)
        raise DepnmtError(f"corpus {corpus.name} is {pair}; --src-lang and --tgt-lang must be "
                          f"{corpus.langs[0]} and {corpus.langs[1]} (either direction), got "
                          f"{src_lang} and {tgt_lang}")
    folder = locate(corpus)
    return {split: (folder / corpus.filename(split, src_lang),
                    folder / corpus.filename(split, tgt_lang)) for split in SPLITS}
