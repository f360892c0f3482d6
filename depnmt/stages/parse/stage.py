"""The ``parse`` stage: tokenized text of a ``prepare`` folder -> one CoNLL-U tree per line.

Inputs: ``PREPARE/{split}.{lang}`` (tokens separated by spaces) and ``PREPARE/manifest.json``.
Outputs: ``OUT/{split}.{lang}.conllu`` (block k is the tree of line k, with exactly its tokens)
and ``OUT/manifest.json`` (stage ``parse``; ``parser``: per side, the settings ``make_parser``
takes, or null for a side not parsed).

Sharding: ``--shard i/N`` parses the i-th of N contiguous blocks of every file (0-based; block i
is lines ``floor(n*i/N)+1 .. floor(n*(i+1)/N)``) into ``{split}.{lang}.conllu.shard-i-of-N``
and writes ``shard-i-of-N.json``. ``--merge`` checks that all N shards are there and agree,
concatenates them in order, validates every tree against its text line and writes the final
files and manifest into a new folder that replaces OUT, shard files included (all or nothing,
one writer: :func:`~depnmt.core.stagedir.stage_output`; so does a whole run).

``--jobs N`` (a whole run, stanza/spacy) is the same on one machine: N worker processes
(:mod:`depnmt.core.workers`), each loading the parser once, parse shard i/N of every file into the
stage's temporary folder, which is then merged and checked as ``--merge`` does; the output is
that of one process, manifest included (``jobs`` is not recorded).
"""

from __future__ import annotations

import json
import re
import shutil
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from depnmt.core.conllu import Sentence, read_conllu_numbered, write_conllu
from depnmt.core.errors import DepnmtError, InputError, UsageError
from depnmt.core.log import info, progress_bar
from depnmt.core.manifest import load_manifest, write_manifest
from depnmt.core.optionspec import (POSITIVE, Choice, Folder, OnlyWith, check_options,
                                    jobs_option, option)
from depnmt.core.stagedir import check_distinct, hold_lock, sibling, stage_output
from depnmt.core.textio import atomic_open, count_lines, iter_lines, make_dir, naming, read_json
from depnmt.core.workers import report, worker_pool
from depnmt.stages.parse import Parser, make_parser
from depnmt.stages.parse.parser import AnalysisError

SIDES = ("src", "tgt")
SPLITS = ("train", "dev", "test")
SHARD_MANIFEST = re.compile(r"^shard-(\d+)-of-(\d+)\.json$")
SHARD_FILE = re.compile(r"\.conllu\.shard-\d+-of-\d+$")
TREE_FILE = re.compile(r"^(train|dev|test)\.[^/]+\.conllu$")


@dataclass
class Job:
    """One file to parse: ``PREPARE/{split}.{lang}`` -> ``OUT/{split}.{lang}.conllu``."""

    split: str
    side: str
    lang: str
    text: Path
    out: Path


@dataclass
class ParseOptions:
    """Everything the stage needs (the CLI's options, resolved)."""

    prepare_dir: Path
    out_dir: Path
    sides: list[str]
    splits: list[str] | None = None  # None: every split the prepare folder has
    backend: str = "stanza"
    models: dict[str, str | None] | None = None  # per side
    langs: dict[str, str | None] | None = None  # per side, overrides the prepare manifest's
    stanza_dir: str | None = None
    conllu_dir: Path | None = None
    batch_size: int = 256
    shard: tuple[int, int] | None = None  # (i, N)
    jobs: int = 1                         # worker processes of a whole run (not recorded)


def check_shard(value: str | None) -> str | None:
    """``value`` when it is ``i/N`` (:func:`parse_shard`) or None; a ValueError otherwise."""
    if value is not None:
        try:
            parse_shard(value)
        except DepnmtError as exc:
            raise ValueError(str(exc).split(": ", 1)[-1]) from None
    return value


@dataclass
class ParseSettings:
    """The options of ``depnmt parse``, each a field (:func:`~depnmt.core.optionspec.option`), as
    given: :meth:`options` resolves them into the stage's :class:`ParseOptions`."""

    prepare_dir: Path | None = option(None, "Folder written by `depnmt prepare` (required, "
                                      "except with --merge).", Folder(), flag=("-i", "--input"))
    out_dir: Path | None = option(
        None, "Folder for the .conllu files and manifest.json, written all or nothing: it "
        "appears (or replaces a previous output) when the run or --merge completes; --shard "
        "writes its files into it.", Folder(), flag=("-o", "--output"), required=True)
    side: str = option("src", "Which side(s) of the corpus to parse.",
                       Choice(["src", "tgt", "both"]), show_default=True)
    splits: str | None = option(None, "Comma-separated splits, e.g. train,dev,test  [default: "
                                "all that exist]", str, metavar="LIST")
    backend: str = option("stanza", "Where the trees come from (see above).",
                          Choice(["stanza", "spacy", "conllu"]), show_default=True)
    models: tuple[str, ...] | None = option(
        None, "spaCy pipeline name/path, or stanza package; `src=NAME`/`tgt=NAME` for one side "
        "(repeatable).", str, flag="--model", multiple=True, metavar="NAME",
        only=OnlyWith("backend", "stanza", "spacy"))
    langs: tuple[str, ...] | None = option(
        None, "Parser language code if it differs from the prepare manifest's (`src=L`/`tgt=L` "
        "for one side).", str, flag="--lang", multiple=True, metavar="L")
    stanza_dir: str | None = option(None, "stanza resources folder  [default: "
                                    "$STANZA_RESOURCES_DIR, else ~/.cache/stanza/<resources "
                                    "version>/resources]", Folder(text=True),
                                    only=OnlyWith("backend", "stanza"))
    conllu_dir: Path | None = option(None, "For --backend conllu: folder holding "
                                     "{split}.{lang}.conllu.", Folder(),
                                     only=OnlyWith("backend", "conllu"))
    batch_size: int = option(256, "Lines given to the parser at once.", POSITIVE,
                             show_default=True)
    jobs: int = jobs_option("Parse (stanza, spacy)")
    shard: str | None = option(None, "Parse only block i (0-based) of N; writes "
                               "*.conllu.shard-i-of-N.", str, check=check_shard, metavar="i/N")
    merge: bool = option(False, "Merge the N shards found in OUT_DIR into the final files "
                         "(checks them).")

    def __post_init__(self):
        check_options(self)

    def check(self) -> None:
        """A :class:`~depnmt.core.errors.UsageError` for options that do not go together."""
        if self.jobs > 1 and (self.shard is not None or self.merge):
            raise UsageError("--jobs parses a whole run in N processes; with --shard run more "
                             "shards instead (--merge works in one process)")
        if self.merge and self.shard is not None:
            raise UsageError("--merge and --shard exclude each other")
        if not self.merge and self.prepare_dir is None:
            raise UsageError("missing option -i/--input PREPARE_DIR")

    def options(self) -> ParseOptions:
        """The stage's options (not for ``merge``): sides, splits, per-side models and
        languages, the shard as ``(i, N)``."""
        return ParseOptions(
            prepare_dir=self.prepare_dir, out_dir=self.out_dir,
            sides=["src", "tgt"] if self.side == "both" else [self.side],
            splits=[s.strip() for s in self.splits.split(",") if s.strip()] if self.splits
            else None, backend=self.backend, models=per_side(self.models or (), "--model"),
            langs=per_side(self.langs or (), "--lang"), stanza_dir=self.stanza_dir,
            conllu_dir=self.conllu_dir, batch_size=self.batch_size,
            shard=parse_shard(self.shard) if self.shard is not None else None, jobs=self.jobs)


# ---------------------------------------------------------------------------------------------
# Small helpers

def line_tokens(line: str) -> list[str]:
    """The tokens of a tokenized line (split on spaces; repeated spaces ignored)."""
    return [t for t in line.split(" ") if t]


def parse_shard(spec: str) -> tuple[int, int]:
    """``"i/N"`` -> ``(i, N)`` with 0 <= i < N."""
    match = re.fullmatch(r"\s*([0-9]+)\s*/\s*([0-9]+)\s*", spec)
    if not match or not int(match[1]) < int(match[2]):
        raise DepnmtError(f"--shard '{spec}': expected i/N with 0 <= i < N, e.g. 0/4")
    return int(match[1]), int(match[2])


def shard_range(n_lines: int, shard: tuple[int, int] | None) -> tuple[int, int]:
    """0-based ``[start, end)`` line range of a shard (the whole file without one)."""
    if shard is None:
        return 0, n_lines
    i, n = shard
    return n_lines * i // n, n_lines * (i + 1) // n


def shard_suffix(shard: tuple[int, int]) -> str:
    return f"shard-{shard[0]}-of-{shard[1]}"


def per_side(values: Iterable[str], option: str) -> dict[str, str | None]:
    """``--model NAME`` (every side) and/or ``--model src=NAME`` (one side) -> {side: value}.

    A side-specific value wins over a plain one, whatever their order.
    """
    plain = [v for v in values if v.partition("=")[0] not in SIDES or "=" not in v]
    if len(plain) > 1:
        raise DepnmtError(f"{option} given twice ({', '.join(plain)}); use {option} src=... and "
                          f"{option} tgt=... for different values per side")
    result: dict[str, str | None] = {side: plain[0] if plain else None for side in SIDES}
    for value in values:
        side, sep, rest = value.partition("=")
        if sep and side in SIDES:
            result[side] = rest
    return result


def side_langs(manifest: dict) -> dict[str, str]:
    """Source and target language codes recorded by ``prepare``."""
    options = manifest.get("options", {})
    langs = {side: manifest.get(f"{side}_lang") or options.get(f"{side}_lang") for side in SIDES}
    missing = [side for side, lang in langs.items() if not lang]
    if missing:
        raise DepnmtError(f"the prepare manifest records no {missing[0]}_lang")
    return langs  # type: ignore[return-value]


def plan_jobs(prepare_dir: Path, out_dir: Path, manifest: dict, sides: list[str],
              splits: list[str] | None) -> list[Job]:
    """The files to parse; DepnmtError when a requested split file does not exist."""
    langs = side_langs(manifest)
    chosen = splits or [s for s in SPLITS
                        if any((prepare_dir / f"{s}.{langs[side]}").exists() for side in sides)]
    jobs = []
    for split in chosen:
        for side in sides:
            text = prepare_dir / f"{split}.{langs[side]}"
            if not text.exists():
                raise DepnmtError(f"{text}: no such file (split '{split}', {side} side)")
            jobs.append(Job(split, side, langs[side], text,
                            out_dir / f"{split}.{langs[side]}.conllu"))
    if not jobs:
        raise DepnmtError(f"{prepare_dir}: no tokenized files for splits {', '.join(SPLITS)}")
    return jobs


# ---------------------------------------------------------------------------------------------
# Trees from a parser, and trees checked against the text

def parsed_trees(parser: Parser, text: Path, lines: Iterable[tuple[int, str]], batch_size: int,
                 advance: Callable[[int], None]) -> Iterator[Sentence]:
    """Parse numbered ``lines`` of ``text`` in batches of ``batch_size``, one tree per line; a
    token CoNLL-U cannot hold, or a parser's output for a line that makes no tree, is an
    :class:`InputError` naming its line."""
    lines = iter(lines)
    while batch := list(islice(lines, batch_size)):
        tokens = [line_tokens(line) for _, line in batch]
        for (lineno, _), words in zip(batch, tokens):
            bad = next((t for t in words if any(c in t for c in "\t\r\n")), None)
            if bad is not None:
                raise InputError(text, lineno, f"token {bad!r} contains a tab or line break, "
                                               f"which CoNLL-U cannot hold")
        try:
            trees = parser.parse(tokens)
        except AnalysisError as exc:
            raise InputError(text, batch[exc.item][0], exc.message) from None
        yield from trees
        advance(len(batch))


def token_mismatch(words: list[str], tokens: list[str]) -> str | None:
    """Why a tree's words are not the text line's tokens, or None."""
    if len(words) != len(tokens):
        return f"tree has {len(words)} words but the text line has {len(tokens)} tokens"
    for k, (word, token) in enumerate(zip(words, tokens), start=1):
        if word != token:
            return f"word {k} is '{word}' but token {k} of the text line is '{token}'"
    return None


def checked_trees(sources: list[Path], text: Path,
                  advance: Callable[[int], None] = lambda n: None) -> Iterator[Sentence]:
    """The trees of ``sources`` (read in order), each checked against its line of ``text``.

    Raises InputError naming the CoNLL-U file and line and the text file and line when a tree is
    malformed, its words differ from the line's tokens, or the counts differ.
    """
    lines = iter_lines(text)
    n = 0
    for source in sources:
        for first_line, tree in read_conllu_numbered(source):
            line = next(lines, None)
            n += 1
            if line is None:
                raise InputError(source, first_line, f"tree {n} has no line in {text}, which has "
                                                     f"only {n - 1} lines")
            problem = token_mismatch(tree.words, line_tokens(line))
            if problem:
                raise InputError(source, first_line, f"{problem} ({text}:{n})")
            advance(1)
            yield tree
    if next(lines, None) is not None:
        names = ", ".join(str(s) for s in sources)
        raise InputError(text, n + 1, f"no tree for this line: {names} hold(s) only {n} trees")


# ---------------------------------------------------------------------------------------------
# Manifests

def stage_manifest(out_dir: Path, prepare_dir: Path, jobs: list[Job], record: dict) -> dict:
    """Write ``OUT/manifest.json`` for finished ``jobs`` from the stage's ``record`` (its
    options, per-side parser settings, descriptions and model versions)."""
    sides = [s for s in SIDES if any(job.side == s for job in jobs)]
    return write_manifest(
        out_dir, "parse",
        inputs={"prepare": str(prepare_dir.resolve()),
                "files": sorted({job.text.name for job in jobs})},
        options=record["options"],
        outputs=[job.out.name for job in jobs],
        extra={"parser": record["parser"], "parser_models": record["parser_models"],
               "parser_versions": record.get("parser_versions") or full_sides({}),
               "prepare_dir": str(prepare_dir.resolve()), "sides": sides})


def model_version(settings: dict | None) -> dict | None:
    """The parser model's name and version for the manifest: a spaCy pipeline's package
    version (its ``meta.json``); for stanza, the library's, whose release its downloaded models
    are; None for imported trees (``conllu``) and sides not parsed."""
    backend = (settings or {}).get("backend")
    if backend == "spacy":
        from depnmt.stages.parse.spacy_backend import load_pipeline
        meta = load_pipeline(settings["model"]).meta          # loaded already: cached
        return {"model": settings["model"], "version": meta.get("version"),
                "spacy_version": meta.get("spacy_version")}
    if backend == "stanza":
        from importlib import metadata
        return {"model": f"{settings['lang']} ({settings.get('model') or 'default'} package)",
                "version": metadata.version("stanza")}
    return None


def shard_manifest_path(out_dir: Path, shard: tuple[int, int]) -> Path:
    return out_dir / f"{shard_suffix(shard)}.json"


def write_shard_manifest(out_dir: Path, shard: tuple[int, int], record: dict) -> None:
    """Write the small manifest of one shard (read back by ``--merge``)."""
    with atomic_open(shard_manifest_path(out_dir, shard)) as fh:
        json.dump(dict(record, shard=list(shard)), fh, indent=2, ensure_ascii=False)
        fh.write("\n")


# ---------------------------------------------------------------------------------------------
# The stage

def make_side_parsers(opts: ParseOptions, jobs: list[Job]) -> dict[str, Parser]:
    """One parser per side being parsed (models load once)."""
    parsers = {}
    for side in dict.fromkeys(job.side for job in jobs):
        lang = (opts.langs or {}).get(side) or next(j.lang for j in jobs if j.side == side)
        settings: dict[str, Any] = {"backend": opts.backend, "lang": lang,
                                    "model": (opts.models or {}).get(side)}
        if opts.backend == "stanza":
            settings["resources_dir"] = opts.stanza_dir
        parsers[side] = make_parser(settings)
    return parsers


def conllu_sources(opts: ParseOptions, jobs: list[Job]) -> dict[str, Path]:
    """For the conllu backend: the given CoNLL-U file of every job (by output name)."""
    if opts.conllu_dir is None:
        raise DepnmtError("--backend conllu needs --conllu-dir DIR holding {split}.{lang}.conllu")
    if opts.shard is not None:
        raise DepnmtError("--shard is for the stanza and spacy backends (conllu only validates)")
    sources = {}
    for job in jobs:
        path = opts.conllu_dir / job.out.name
        if not path.exists():
            raise DepnmtError(f"{path}: no such file (--conllu-dir must hold {job.out.name})")
        sources[job.out.name] = path
    return sources


def check_folders(prepare_dir: Path, out_dir: Path) -> None:
    """The output folder must not be, hold or lie inside the prepare folder
    (:func:`~depnmt.core.stagedir.check_distinct`)."""
    check_distinct(out_dir, {"prepare folder": prepare_dir})


def owns_tree_file(name: str) -> bool:
    """Whether ``name`` in a parse folder is a tree file a new parse run may replace."""
    return TREE_FILE.match(name) is not None


def owns_shard_or_tree_file(name: str) -> bool:
    """What ``--merge`` consumes or replaces in a parse folder: tree files and shard files."""
    return owns_tree_file(name) or bool(SHARD_FILE.search(name) or SHARD_MANIFEST.match(name))


def retarget(jobs: list[Job], folder: Path) -> list[Job]:
    """``jobs`` writing into ``folder`` instead (the stage's temporary output folder)."""
    return [replace(job, out=folder / job.out.name) for job in jobs]


def run_parse(opts: ParseOptions) -> dict:
    """Run the stage; return the manifest written (the stage's or the shard's). A whole run
    writes its folder all or nothing, as its one writer
    (:func:`~depnmt.core.stagedir.stage_output`); a shard writes its files into OUT, its
    ``shard-i-of-N.json`` last, holding ``PARENT/.OUT.shard-i-of-N.lock`` (one writer per
    shard; other shards run beside it)."""
    check_folders(opts.prepare_dir, opts.out_dir)
    manifest = load_manifest(opts.prepare_dir, "prepare")
    jobs = plan_jobs(opts.prepare_dir, opts.out_dir, manifest, opts.sides, opts.splits)
    if opts.shard is not None:
        make_dir(opts.out_dir)
        suffix = shard_suffix(opts.shard)
        with hold_lock(sibling(opts.out_dir, f"{suffix}.lock"), opts.out_dir,
                       f"another `depnmt parse --shard {opts.shard[0]}/{opts.shard[1]}` "
                       f"writes this shard"):
            record = parse_record(opts, jobs)
            write_shard_manifest(opts.out_dir, opts.shard, record)
        return record
    with stage_output(opts.out_dir, "parse", owns=owns_tree_file) as tmp:
        jobs = retarget(jobs, tmp)
        if opts.jobs > 1 and opts.backend != "conllu":
            return stage_manifest(tmp, opts.prepare_dir, jobs, parse_in_workers(opts, jobs))
        return stage_manifest(tmp, opts.prepare_dir, jobs, parse_record(opts, jobs))


def parse_in_workers(opts: ParseOptions, jobs: list[Job]) -> dict:
    """``--jobs N``: worker process i parses shard i/N of every job, as ``--shard i/N``
    would, into a folder beside the jobs' outputs (the stage's temporary folder); the shards
    are merged and checked as ``--merge`` does, then removed. Returns the run's record, the
    same as one process's."""
    count, folder = opts.jobs, make_dir(jobs[0].out.parent / "shards")
    shard_jobs = retarget(jobs, folder)
    tasks = [(replace(opts, out_dir=folder, shard=(i, count), jobs=1), shard_jobs)
             for i in range(count)]
    with progress_bar() as bar:
        bars = [bar.add_task(f"parse {job.text.name}", total=count_lines(job.text))
                for job in jobs]
        with worker_pool(count, on_progress=lambda i, k: bar.advance(bars[i], k)) as pool:
            for _ in pool.map(parse_shard_files, tasks):
                pass
    records = find_shards(folder)
    models = records[0]["parser_models"]
    join_shards(jobs, shard_files(shard_jobs, count),
                lambda job, n: f"{opts.out_dir / job.out.name}: {n} trees "
                               f"({models[job.side]}, {count} processes)")
    with naming(folder, "remove"):
        shutil.rmtree(folder)
    return records[0]


def parse_shard_files(state: None, task: tuple[ParseOptions, list[Job]]) -> None:
    """In a worker process of ``--jobs``: parse one shard of every job and write its
    ``shard-i-of-N.json``, reporting progress to the stage's process."""
    opts, jobs = task
    write_shard_manifest(opts.out_dir, opts.shard,  # type: ignore[arg-type]
                         parse_record(opts, jobs, report))


def parse_record(opts: ParseOptions, jobs: list[Job],
                 report: Callable[[int, int], None] | None = None) -> dict:
    """Parse (or import) every job; return the record of the run that manifests keep.
    ``report(job index, lines)``: progress of a worker process (no bar, no messages)."""
    if opts.backend == "conllu":
        settings, descriptions = import_trees(opts, jobs)
    else:
        settings, descriptions = parse_files(opts, jobs, report)
    return {"options": stage_options(opts), "prepare_dir": str(opts.prepare_dir.resolve()),
            "sides": opts.sides, "splits": list(dict.fromkeys(j.split for j in jobs)),
            "parser": full_sides(settings), "parser_models": full_sides(descriptions),
            "parser_versions": full_sides({side: model_version(s)
                                           for side, s in settings.items()})}


def import_trees(opts: ParseOptions, jobs: list[Job]) -> tuple[dict, dict]:
    """Backend conllu: check the given trees against the text and write them; return the
    per-side settings and descriptions for the manifest."""
    sources = conllu_sources(opts, jobs)
    with progress_bar() as bar:
        for job in jobs:
            task = bar.add_task(f"check {job.out.name}", total=count_lines(job.text))
            n = write_conllu(job.out, checked_trees([sources[job.out.name]], job.text,
                                                    lambda k: bar.advance(task, k)))
            info(f"{opts.out_dir / job.out.name}: {n} trees checked against {job.text}")
    given = str(opts.conllu_dir.resolve())  # type: ignore[union-attr]
    settings = {job.side: {"backend": "conllu", "lang": job.lang, "conllu_dir": given}
                for job in jobs}
    return settings, {side: f"conllu files from {given}" for side in settings}


def parse_files(opts: ParseOptions, jobs: list[Job],
                report: Callable[[int, int], None] | None = None) -> tuple[dict, dict]:
    """Backends stanza/spacy: parse every job (or its shard block); return the per-side
    settings and descriptions for the manifest."""
    parsers = make_side_parsers(opts, jobs)
    if report is not None:
        for index, job in enumerate(jobs):
            parse_job(job, parsers[job.side], opts, lambda k, i=index: report(i, k))
    else:
        with progress_bar() as bar:
            for job in jobs:
                block = shard_range(count_lines(job.text), opts.shard)
                task = bar.add_task(f"parse {job.text.name}", total=block[1] - block[0])
                out, n = parse_job(job, parsers[job.side], opts,
                                   lambda k: bar.advance(task, k), block)
                info(f"{opts.out_dir / out.name}: {n} trees ({parsers[job.side].describe()})")
    return ({side: p.settings for side, p in parsers.items()},
            {side: p.describe() for side, p in parsers.items()})


def parse_job(job: Job, parser: Parser, opts: ParseOptions, advance: Callable[[int], None],
              block: tuple[int, int] | None = None) -> tuple[Path, int]:
    """Parse one file (or its shard's ``block`` of lines) and write the CoNLL-U output; return
    the file written and its number of trees."""
    start, end = block or shard_range(count_lines(job.text), opts.shard)
    out = job.out if opts.shard is None else job.out.with_name(
        f"{job.out.name}.{shard_suffix(opts.shard)}")
    lines = islice(enumerate(iter_lines(job.text), start=1), start, end)
    return out, write_conllu(out, parsed_trees(parser, job.text, lines, opts.batch_size,
                                               advance))


def full_sides(per: dict[str, Any]) -> dict[str, Any]:
    """``{"src": ..., "tgt": ...}`` with None for sides not parsed."""
    return {side: per.get(side) for side in SIDES}


def stage_options(opts: ParseOptions) -> dict[str, Any]:
    """The options recorded in manifests."""
    return {"sides": opts.sides, "splits": opts.splits, "backend": opts.backend,
            "batch_size": opts.batch_size,
            "conllu_dir": str(opts.conllu_dir.resolve()) if opts.conllu_dir else None}


# ---------------------------------------------------------------------------------------------
# Merging shards

def find_shards(out_dir: Path) -> list[dict]:
    """The shard manifests of ``out_dir`` in order; DepnmtError if none, mixed or missing."""
    found: dict[int, dict[int, Path]] = {}
    for path in sorted(out_dir.glob("shard-*-of-*.json")):
        match = SHARD_MANIFEST.match(path.name)
        if match:
            found.setdefault(int(match[2]), {})[int(match[1])] = path
    if not found:
        raise DepnmtError(f"{out_dir}: no shard-i-of-N.json files; run `depnmt parse --shard i/N` "
                          f"for every i first")
    if len(found) > 1:
        counts = ", ".join(f"N={n}" for n in sorted(found))
        raise DepnmtError(f"{out_dir}: shards of different splittings ({counts}); remove the "
                          f"stale ones")
    (count, paths), = found.items()
    missing = [f"{i}/{count}" for i in range(count) if i not in paths]
    if missing:
        raise DepnmtError(f"{out_dir}: missing shard(s) {', '.join(missing)}; run `depnmt parse "
                          f"--shard {missing[0]}` (same options) and merge again")
    records = [read_json(paths[i], f"{paths[i]}: missing") for i in range(count)]
    for i, record in enumerate(records[1:], start=1):
        for key in ("parser", "parser_versions", "sides", "splits", "prepare_dir"):
            if record.get(key) != records[0].get(key):
                raise DepnmtError(f"{paths[i]}: '{key}' differs from shard 0/{count}; all shards "
                                  f"must be made with the same options")
    return records


def run_merge(prepare_dir: Path | None, out_dir: Path) -> dict:
    """Merge ``--shard i/N`` outputs in ``out_dir`` into the final files and manifest.

    ``prepare_dir`` defaults to the folder the shards were parsed from.
    """
    records = find_shards(out_dir)
    count = len(records)
    first = records[0]
    prepare_dir = prepare_dir or Path(first["prepare_dir"])
    if Path(first["prepare_dir"]).resolve() != prepare_dir.resolve():
        raise DepnmtError(f"the shards in {out_dir} were parsed from {first['prepare_dir']}, "
                          f"not from {prepare_dir}")
    check_folders(prepare_dir, out_dir)
    manifest = load_manifest(prepare_dir, "prepare")
    jobs = plan_jobs(prepare_dir, out_dir, manifest, first["sides"], first["splits"])
    shards = shard_files(jobs, count)
    absent = [str(p) for sources in shards.values() for p in sources if not p.exists()]
    if absent:
        raise DepnmtError(f"shard file(s) missing: {', '.join(absent)}")
    # the new folder replaces OUT as a whole: the shard files go with the old one
    with stage_output(out_dir, "parse", owns=owns_shard_or_tree_file) as tmp:
        jobs = retarget(jobs, tmp)
        merge_shards(jobs, shards, lambda job, n: f"{out_dir / job.out.name}: {n} trees "
                                                  f"merged from {count} shards")
        return stage_manifest(tmp, prepare_dir, jobs,
                              dict(first, options=dict(first["options"], merged_shards=count)))


def shard_files(jobs: list[Job], count: int) -> dict[str, list[Path]]:
    """Output name of each job -> its ``count`` shard files, in order."""
    suffixes = [shard_suffix((i, count)) for i in range(count)]
    return {job.out.name: [job.out.with_name(f"{job.out.name}.{s}") for s in suffixes]
            for job in jobs}


def join_shards(jobs: list[Job], shards: dict[str, list[Path]],
                message: Callable[[Job, int], str]) -> None:
    """``--jobs N``: each job's output is its shard files joined byte for byte. This run's
    workers wrote them, each tree over its line's own tokens and formatted as one process
    writes it, so reading and checking every tree again (what :func:`merge_shards` does with
    shards from elsewhere, and what took a sixth of a 2-process run) is left out; the count
    is checked: one tree per line of the text."""
    for job in jobs:
        trees = 0
        with atomic_open(job.out, "wb") as out:
            for shard in shards[job.out.name]:
                with naming(shard, "read"), open(shard, "rb") as fh:
                    for line in fh:
                        out.write(line)
                        trees += line == b"\n"
        lines = count_lines(job.text)
        if trees != lines:
            raise DepnmtError(f"{job.out}: the worker processes wrote {trees} trees for the "
                              f"{lines} lines of {job.text}")
        info(message(job, trees))


def merge_shards(jobs: list[Job], shards: dict[str, list[Path]],
                 message: Callable[[Job, int], str]) -> None:
    """Write each job's output from its shard files (:func:`shard_files`), every tree checked
    against its line of text (:func:`checked_trees`); ``message(job, trees)`` is printed."""
    with progress_bar() as bar:
        for job in jobs:
            task = bar.add_task(f"merge {job.out.name}", total=count_lines(job.text))
            n = write_conllu(job.out, checked_trees(shards[job.out.name], job.text,
                                                    lambda k: bar.advance(task, k)))
            info(message(job, n))
