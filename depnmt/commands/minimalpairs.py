"""``depnmt minimal-pairs``: a contrastive set made from a test set's own English references
(see ``depnmt/evaluation/minimalpairs.py``); its flags are the fields of
:class:`depnmt.evaluation.minimalpairs.MinimalPairsSettings`."""

from __future__ import annotations

import click

from depnmt.commands.fields import click_options
from depnmt.core.optionspec import field_params, from_options
from depnmt.evaluation.minimalpairs import MinimalPairsSettings

HELP = """Minimal pairs from a test set's English references, for `depnmt contrastive`.

\b
Reads  --src and --ref: a test set's source lines and their English reference translations
Writes -o FILE: a contrastive set (tsv) `source TAB reference TAB contrastive TAB category
       TAB linear_distance TAB tree_distance`, a line per variant, with a header line
Prints per category on stderr how many variants were made and how many places were skipped

Each reference is parsed with spaCy's English pipeline (offline) and varied by one targeted
edit that makes it ungrammatical in one known way: subject-verb (the verb's number flipped:
is/are, has/have, -s), determiner (this/these, that/those, or the noun after a/every/many in
the other number), negation (not/n't taken out, do-support undone, or not put in after the
auxiliary or with do-support) and adjective-noun (a prenominal adjective swapped with its
noun). Nothing else changes. The distances are those between the two words the edit puts in
conflict (subject and verb, ...): in tokens, and in dependency arcs. Places whose edit cannot
be made cleanly (an unknown subject number, a question, a contraction) are skipped.

English references only: other languages (German) would need a parser and inflection tables
of their own, which are not shipped.
"""


@click.command("minimal-pairs", help=HELP, context_settings={"show_default": True})
@click_options(field_params(MinimalPairsSettings))
def command(**values) -> None:
    from collections import Counter

    from depnmt.core.log import info
    from depnmt.core.stagedir import check_output_files
    from depnmt.core.textio import atomic_open
    from depnmt.evaluation.minimalpairs import CATEGORIES, make_pairs, read_parallel, tsv_lines
    settings = from_options(MinimalPairsSettings, values)
    src_path, ref_path, output_path = settings.src_path, settings.ref_path, settings.output_path
    check_output_files({"output": output_path}, [("--src file", src_path),
                                                 ("--ref file", ref_path)])
    settings.language()
    sources, references = read_parallel(src_path, ref_path)
    counts: Counter = Counter()
    pairs = make_pairs(references, counts=counts)
    with atomic_open(output_path) as fh:
        fh.writelines(tsv_lines(sources, references, pairs))
    dropped = sum(len(p) for s, p in zip(sources, pairs) if not s.strip())
    for category in CATEGORIES:
        info(f"{category}: {counts[category, 'made']} pairs "
             f"({counts[category, 'skipped']} places skipped: no clean edit)")
    if dropped:
        info(f"{dropped} pairs left out: their source line is empty")
    info(f"wrote {output_path}")
