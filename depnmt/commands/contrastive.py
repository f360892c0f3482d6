"""``depnmt contrastive``: accuracy of models on a contrastive test set; its own flags are the
fields of :class:`depnmt.evaluation.contrastive.ContrastiveSettings`, -m and the hardware options
those of :class:`depnmt.decoding.settings.DecodingSettings` (as translate's and rescore's)."""

from __future__ import annotations

from pathlib import Path

import click

from depnmt.commands.fields import GivenPath, click_options
from depnmt.core.optionspec import field_params, from_options
from depnmt.decoding.settings import DecodingSettings, decoding_params
from depnmt.evaluation.contrastive import ContrastiveSettings

HELP = """Contrastive evaluation: how often a model prefers a correct translation to a minimally
wrong one.

\b
Reads  SET: source, reference and contrastive variants (--format)
Prints a table of accuracy (%) with its 95 % Wilson interval, per category and for all items,
       one column per model (-m given more than once: e.g. seeds), their mean ± sd, and a
       paired test of each model's decisions against the first's (McNemar's exact test, or a
       sign-flip permutation test over source sentences where items share them; intervals
       then over the effective number of items); with --ensemble,
       one column: the models scoring as one ensemble (as `depnmt rescore -m A -m B`)

Every translation is scored by forced decoding (as `depnmt rescore`: log p(translation |
source)); an item is decided correctly when its reference scores strictly higher than every
one of its variants. Formats: tsv (`source TAB reference TAB contrastive [TAB category]`, an
item a line), lingeval97 (LingEval97's lingeval97.json: an item per error, category its
type), contrapro (ContraPro's contrapro.json with --src/--tgt, the text its
json2text_and_context.pl extracts: an item per entry, category `src pronoun:ref pronoun`).
A tsv set with distance columns (`depnmt minimal-pairs` writes them) adds a table per linear
and tree distance: accuracy per category and distance bucket (1, 2–3, 4–6, 7+).

--compare A.json --compare B.json (result files of -o, each a system with its runs, on SET)
scores nothing: it compares each system with the first, their accuracies pooled over runs,
overall, per category and per linear-distance bucket, by approximate randomization over source
sentences (a sentence's items shuffled together) stratified over runs, with Holm's adjustment
over all the tests; where the files record each item's margin (log p(reference) − log p(best
variant); -o writes them), their mean margins are compared the same way. Each run must be a
training of its own: a model folder given twice, or two runs scored with one checkpoint, is
refused; systems scored with checkpoints of different names (best, an average) are compared
with a warning.
"""


@click.command("contrastive", help=HELP,
               context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.argument("set_path", metavar="SET", type=GivenPath(path_type=Path, dir_okay=False))
@click_options(decoding_params(
    several="give it more than once to compare models (each evaluated alone) or, with "
            "--ensemble, to evaluate their ensemble",
    items="pairs", precision="matrix multiplies, as translate --precision"))
@click_options(field_params(ContrastiveSettings))
def command(set_path: Path, **values) -> None:
    import json

    from depnmt.commands.translate import input_progress
    from depnmt.core.stagedir import check_output_files
    from depnmt.core.textio import atomic_open, write_stdout
    from depnmt.decoding.forced import ForcedScorer
    from depnmt.evaluation.contrastive import (check_distinct_runs, evaluate, read_set,
                                               scored_pairs)
    from depnmt.evaluation.contrastivestats import (evaluation_dict, evaluation_markdown,
                                                    items_digest, set_digest, trained_record)
    from depnmt.storage.modeldir import default_checkpoint, model_reads, named_checkpoint
    decoding = from_options(DecodingSettings, values)
    settings = from_options(ContrastiveSettings, values)
    model_dirs = decoding.model_dirs
    output_path, src_path, tgt_path = settings.output_path, settings.src_path, settings.tgt_path
    compare_paths, checkpoint = settings.compare_paths, settings.checkpoint
    check_output_files({"output": output_path}, [("set", set_path), ("--src file", src_path),
                                                 ("--tgt file", tgt_path),
                                                 *model_reads(model_dirs),
                                                 *(("--compare file", p) for p in compare_paths)])
    fmt = settings.set_format(set_path)
    items = read_set(set_path, fmt, src_path, tgt_path)
    if compare_paths:
        return compare_systems(set_path, items, compare_paths, output_path)
    settings.check_scoring(model_dirs)
    groups = [list(model_dirs)] if settings.ensemble else [[d] for d in model_dirs]
    checkpoints = [[named_checkpoint(d, checkpoint) if checkpoint else default_checkpoint(d)
                    for d in group] for group in groups]
    check_distinct_runs(checkpoints)
    used: dict[str, list[str]] = {}         # each model's checkpoints, recorded in -o's JSON
    trained: dict[str, list[dict]] = {}     # ... and its trees and seeds (--compare checks them)

    def scorers(advance):
        for group, ckpts in zip(groups, checkpoints):
            scorer = ForcedScorer.from_model_dirs(group, ckpts, **decoding.keywords(),
                                                  max_tokens=settings.max_tokens)
            scorer.progress = advance
            name = " + ".join(str(d) for d in group)
            used[name] = [str(Path(c).resolve()) for c in ckpts]   # (--compare checks them)
            trained[name] = trained_record(group)
            yield name, scorer
    with input_progress("scoring", lambda: len(scored_pairs(items)) * len(groups),
                        streams_stdout=False) as advance:
        result = evaluate(items, scorers(advance), settings.normalized)
    if output_path is not None:
        with atomic_open(output_path) as fh:
            fh.write(json.dumps({"set": str(set_path), "format": fmt,
                                 "normalized": settings.normalized,
                                 "set_sha256": set_digest(set_path),
                                 "items_sha256": items_digest(items), "checkpoints": used,
                                 "trained": trained,
                                 **evaluation_dict(result)},
                                indent=1) + "\n")
    write_stdout(evaluation_markdown(result), flush=True)


SCORING_OPTIONS = {"model_dirs": "-m", "ensemble": "--ensemble", "checkpoint": "--checkpoint",
                   "normalized": "--normalized"}


def compare_systems(set_path: Path, items: list, result_paths: tuple[Path, ...],
                    output_path: Path | None) -> None:
    """``--compare``: the systems of ``result_paths`` compared on ``items``
    (:func:`depnmt.evaluation.contrastivestats.compare`); the table on stdout, and with ``-o`` as
    JSON."""
    import json

    from click.core import ParameterSource

    from depnmt.core.errors import DepnmtError
    from depnmt.core.textio import atomic_open, write_stdout
    from depnmt.evaluation.contrastivestats import (compare, comparison_markdown, items_digest,
                                                    read_system, set_digest)
    from depnmt.evaluation.significance import DEFAULT_SEED, DEFAULT_SHUFFLES
    ctx = click.get_current_context()
    given = [flag for name, flag in SCORING_OPTIONS.items()
             if ctx.get_parameter_source(name) == ParameterSource.COMMANDLINE]
    if given:
        raise DepnmtError(f"--compare compares result files and scores nothing: leave out "
                          f"{', '.join(given)}")
    if len(result_paths) < 2 or len(set(map(str, result_paths))) < len(result_paths):
        raise DepnmtError("--compare: give two or more different result files (a baseline "
                          "first, then the systems to compare with it)")
    digest, scored = set_digest(set_path), items_digest(items)
    systems = [read_system(p, len(items), digest, scored) for p in result_paths]
    rows = compare(items, systems)
    if output_path is not None:
        with atomic_open(output_path) as fh:
            fh.write(json.dumps({"set": str(set_path), "set_sha256": digest,
                                 "baseline": systems[0].name, "runs": len(systems[0].runs),
                                 "tests": {"shuffles": DEFAULT_SHUFFLES, "seed": DEFAULT_SEED},
                                 "comparisons": rows}, indent=1) + "\n")
    write_stdout(comparison_markdown(rows, systems[0].name, len(systems[0].runs)), flush=True)
