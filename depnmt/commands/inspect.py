"""``depnmt inspect``: print the per-pair matrices a relative scheme sees (see depnmt/inspect.py)."""

from __future__ import annotations

from pathlib import Path

import click

from ..trees import CHAIN_HEADS, SUBWORD_RULES


def _inspected(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """click callback of ``--scheme``: the scheme name -> the part shown (``dep``, ``path``)."""
    from ..errors import DepnmtError
    from ..inspect import inspected_part
    try:
        return inspected_part(value)
    except DepnmtError as exc:
        raise click.BadParameter(str(exc)) from None


@click.command("inspect", context_settings={"show_default": True})
@click.option("--scheme", required=True, callback=_inspected,
              help="a scheme name as `depnmt train --scheme` takes it; shown is its tree or "
                   "pair part: dep (abs+dep): relative depth (Omote et al. Eq. 16); deplabel: "
                   "the Japanese paper's labels; rel: j − i; treedist: path length on the tree; "
                   "structural: relative structural position (Wang et al.); pascal: the scale of "
                   "key j around query i's parent; gps (abs+gps): each token's root path, one "
                   "line per token")
@click.option("--clip", type=click.IntRange(min=0), default=None,
              help="show the values clipped to K as the model uses them (deplabel: pairs "
                   "beyond K become non_dep)")
@click.option("--bpe-codes", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="subword-nmt codes: show the matrix over subwords after the tree projection")
@click.option("--subword-tree", type=click.Choice(SUBWORD_RULES), default="chain",
              help="how a tree reaches subwords (see `depnmt train --help`)")
@click.option("--chain-head", type=click.Choice(CHAIN_HEADS), default="last",
              help="chain rule: a word's arc lands on the head word's last or first piece")
@click.option("-i", "--input", "input_path", type=click.Path(exists=True, dir_okay=False,
              path_type=Path), help="CoNLL-U file to read instead of standard input")
@click.option("--sentence", type=click.IntRange(min=1), default=None, metavar="N",
              help="only the N-th tree of the input (1-based)")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="FILE", help="also draw each sentence: its tree as arcs over the words and "
              "the matrix as a labelled heatmap (FILE-1.png, FILE-2.png, … for several)")
def command(scheme: str, clip: int | None, bpe_codes: Path | None, subword_tree: str,
            chain_head: str, input_path: Path | None, sentence: int | None,
            png: Path | None) -> None:
    """Print, for each tree of a CoNLL-U file, the per-pair matrix SCHEME uses.

    \b
    Row i, column j is the value for the pair (i, j), as in the papers' tables.
    First a row of a tab then the tokens, then one row per token (the token, then one cell per
    column, tab-separated); a blank line between sentences. --png also draws each sentence:
    its arcs over the words and the matrix as a heatmap.
    """
    from ..bpe import Segmenter
    from ..errors import DepnmtError
    from ..inspect import check_tokens, clips, format_matrix, format_paths, pair_cells
    from ..parse.conllu import read_conllu_input
    from ..textio import iter_lines, write_stdout

    if clip is not None and not clips(scheme):
        shown = "gps's root paths" if scheme == "path" else scheme
        raise click.UsageError(f"--clip does not apply to {shown}: its values are no distances")
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
        cells = pair_cells(scheme, tree.heads, tokens, clip, subword_tree, chain_head)
        blocks.append(format_matrix(tokens, cells))
        pictures.append((tree, tokens, cells, None))
    write_stdout("\n".join(blocks))
    if png is not None:
        _draw(scheme, pictures, png, sentence, [("input", input_path),
                                                ("--bpe-codes file", bpe_codes)])


def _draw(scheme: str, pictures: list, png: Path, sentence: int | None,
          reads: list[tuple[str, Path | None]]) -> None:
    """One PNG per sentence (see depnmt/treefigure.py); an empty sentence gets none (a warning).
    No PNG may replace a file of ``reads`` (the command's inputs)."""
    from ..figures import save_png
    from ..log import info, warn
    from ..stagedir import check_output_files
    from ..treefigure import png_paths, sentence_figure

    files = png_paths(png, len(pictures))
    check_output_files({f"--png file {path}": path for path in files}, reads)
    for k, ((tree, tokens, cells, paths), path) in enumerate(zip(pictures, files), 1):
        if not tokens:
            warn(f"sentence {sentence or k} is empty: no {path}")
            continue
        save_png(sentence_figure(scheme, tree, tokens, cells, paths,
                                 title=f"sentence {sentence or k}"), path)
        info(f"wrote {path}")

