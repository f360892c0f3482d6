"""``depnmt inspect``: print the per-pair matrices a relative scheme sees (see
depnmt/evaluation/inspect.py);
its flags are the fields of :class:`depnmt.evaluation.inspect.InspectSettings`."""

from __future__ import annotations

from pathlib import Path

import click

from depnmt.commands.fields import click_options
from depnmt.commands.options import usage_errors
from depnmt.core.optionspec import field_params, from_options
from depnmt.evaluation.inspect import InspectSettings


@click.command("inspect", context_settings={"show_default": True})
@click_options(field_params(InspectSettings))
def command(**values) -> None:
    """Print, for each tree of a CoNLL-U file, the per-pair matrix SCHEME uses.

    \b
    Row i, column j is the value for the pair (i, j), as in the papers' tables.
    First a row of a tab then the tokens, then one row per token (the token, then one cell per
    column, tab-separated); a blank line between sentences. --png also draws each sentence:
    its arcs over the words and the matrix as a heatmap.
    """
    from depnmt.core.conllu import read_conllu_input
    from depnmt.core.errors import DepnmtError
    from depnmt.core.textio import iter_lines, write_stdout
    from depnmt.evaluation.inspect import check_tokens, format_matrix, format_paths, pair_cells
    from depnmt.stages.bpe import Segmenter

    with usage_errors():
        settings = from_options(InspectSettings, values)
    scheme, bpe_codes, input_path = settings.part(), settings.bpe_codes, settings.input_path
    sentence, png = settings.sentence, settings.png
    segmenter = None
    if bpe_codes is not None:
        segmenter = Segmenter("\n".join(iter_lines(bpe_codes)) + "\n", source=bpe_codes)
    trees = list(read_conllu_input(input_path))
    if sentence is not None:
        if sentence > len(trees):
            raise DepnmtError(f"--sentence {sentence}: the input has {len(trees)} tree(s)")
        trees = trees[sentence - 1:sentence]
    blocks, pictures = [], []
    for number, tree in enumerate(trees, start=sentence or 1):
        tokens = segmenter.segment(tree.words) if segmenter else list(tree.words)
        check_tokens(tree, tokens, number)
        if scheme == "path":                       # GPS: token<TAB>root>…>label lines
            blocks.append(format_paths(tree, tokens))
            pictures.append((tree, tokens, None, blocks[-1].splitlines()))
            continue
        cells = pair_cells(scheme, tree.heads, tokens, settings.clip, settings.subword_tree,
                           settings.chain_head, tree.sent_ids)
        blocks.append(format_matrix(tokens, cells))
        pictures.append((tree, tokens, cells, None))
    write_stdout("\n".join(blocks))
    if png is not None:
        _draw(scheme, pictures, png, sentence, [("input", input_path),
                                                ("--bpe-codes file", bpe_codes)])


def _draw(scheme: str, pictures: list, png: Path, sentence: int | None,
          reads: list[tuple[str, Path | None]]) -> None:
    """One PNG per sentence (see depnmt/evaluation/treefigure.py); an empty sentence gets none (a
    warning).
    No PNG may replace a file of ``reads`` (the command's inputs)."""
    from depnmt.core.log import info, warn
    from depnmt.core.stagedir import check_output_files
    from depnmt.evaluation.figures import save_png
    from depnmt.evaluation.treefigure import png_paths, sentence_figure

    files = png_paths(png, len(pictures))
    check_output_files({f"--png file {path}": path for path in files}, reads)
    for k, ((tree, tokens, cells, paths), path) in enumerate(zip(pictures, files), 1):
        if not tokens:
            warn(f"sentence {sentence or k} is empty: no {path}")
            continue
        save_png(sentence_figure(scheme, tree, tokens, cells, paths,
                                 title=f"sentence {sentence or k}"), path)
        info(f"wrote {path}")

