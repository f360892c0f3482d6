"""The picture of one sentence for ``depnmt inspect --png``: its dependency tree drawn as arcs
over the words (head → dependent, labelled, as displaCy and the GPS paper's Fig. 1 draw them)
and, below, the scheme's per-pair matrix (:func:`depnmt.evaluation.inspect.pair_cells`, exactly what
``inspect`` prints) as a heatmap with the tokens on both axes and each cell's value written in
it — Omote et al. 2019 Table 1 as a figure.

Numbers are coloured on a diverging scale centred at 0; the labels of ``deplabel`` that are not
numbers (``self``, ``sib``, ``non_dep``) are grey. For ``path`` (GPS, no matrix) each token's
root path is listed instead. With subwords the arcs stay over the words (each word centred over
its pieces) and the matrix is over the subwords.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from depnmt.core.subwords import word_spans
from depnmt.evaluation.figures import pyplot

CELL_INCHES = 0.5
TITLES = {"dep": "dep: depth(n_j) − depth(n_i)  (Omote et al. 2019, Eq. 16)",
          "deplabel": "deplabel: depth difference of ancestor/descendant pairs, self, sib, non_dep",
          "rel": "rel: j − i  (Shaw et al. 2018)",
          "structural": "structural: relative structural position rel(x_i, x_j)  (Wang et al. 2019)",
          "pascal": "pascal: N(j | p_i, σ²), p_i = the parent of i  (PASCAL)",
          "path": "path: root path of dependency labels (GPS)"}


def scheme_title(scheme: str) -> str:
    """A scheme without a title above: its name and its one-line help."""
    from depnmt.model.schemes.registry import SCHEMES
    return f"{scheme}: {SCHEMES[scheme].help}"


def cell_values(cells: Sequence[Sequence[str]]) -> list[list[float]]:
    """The heatmap's numbers: each cell as a number (a distance, PASCAL's scale), NaN for a
    label (``self``, ``sib``, ``non_dep``, ``none``)."""
    def value(cell: str) -> float:
        try:
            number = float(cell)
        except ValueError:
            return math.nan
        return number if math.isfinite(number) else math.nan
    return [[value(c) for c in row] for row in cells]


def word_positions(tokens: Sequence[str]) -> list[float]:
    """x position of each word over the token axis: the middle of its subwords' columns."""
    return [(start + end - 1) / 2 for start, end in word_spans(list(tokens))]


def arc_height(i: float, j: float) -> float:
    """Height of the arc between x positions ``i`` and ``j``: longer arcs rise higher, so nested
    arcs (and their labels) do not overlap."""
    return 0.5 + 0.5 * abs(i - j)


def draw_arcs(ax: Any, words: Sequence[str], heads: Sequence[int], deprels: Sequence[str],
              xs: Sequence[float]) -> None:
    """The tree as arcs above the words: one half-ellipse per dependent from its head, an
    arrowhead on the dependent and the relation on top; the root gets a vertical ``root``
    arrow."""
    from matplotlib.patches import Arc

    top = 1.0
    for dep, (head, label) in enumerate(zip(heads, deprels)):
        x = xs[dep]
        if head == 0:
            y = arc_height(0, len(words) * 0.7)
            ax.annotate("", xy=(x, 0.05), xytext=(x, y), arrowprops={"arrowstyle": "-|>",
                                                                    "color": "#333333"})
            ax.text(x, y, label, ha="center", va="bottom", fontsize=8, color="#aa3377")
            top = max(top, y + 0.4)
            continue
        hx = xs[head - 1] + math.copysign(0.12, x - xs[head - 1])   # beside the head's centre
        height = arc_height(x, hx)
        ax.add_patch(Arc(((x + hx) / 2, 0.05), abs(x - hx), 2 * height, theta1=0, theta2=180,
                         color="#4477aa", linewidth=1.2))
        ax.plot([x], [0.12], marker="v", color="#4477aa", markersize=5)
        ax.text((x + hx) / 2, height + 0.05, label, ha="center", va="center", fontsize=7,
                color="#aa3377", bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none"})
        top = max(top, height + 0.4)
    spacing = min((b - a for a, b in zip(xs, xs[1:])), default=1.0)
    slanted = max(map(len, words), default=0) * 0.075 > CELL_INCHES * spacing   # would touch
    for x, word in zip(xs, words):
        ax.text(x, -0.15, word, fontsize=9, va="top", ha="right" if slanted else "center",
                rotation=35 if slanted else 0, rotation_mode="anchor")
    ax.set_ylim(-2.2 if slanted else -0.9, top)
    ax.axis("off")


def draw_matrix(ax: Any, tokens: Sequence[str], cells: Sequence[Sequence[str]]) -> Any:
    """The cells as a heatmap (row i, column j = the pair (i, j)) with the value in each cell;
    returns the image."""
    import numpy as np

    plt = pyplot()
    values = np.ma.masked_invalid(np.array(cell_values(cells), dtype=float))
    bound = (float(np.abs(values).max()) if values.count() else 0.0) or 1.0
    cmap = plt.get_cmap("RdBu_r").with_extremes(bad="#dddddd")      # labels: grey
    image = ax.imshow(values, cmap=cmap, vmin=-bound, vmax=bound)
    n = len(tokens)
    for i, row in enumerate(cells):
        for j, cell in enumerate(row):
            label = bool(values.mask[i, j])
            strong = not label and abs(values[i, j]) > 0.6 * bound
            ax.text(j, i, cell, ha="center", va="center", fontsize=7 if label else 9,
                    color="white" if strong else "black")
    ax.set_xticks(range(n), tokens, rotation=90 if max(map(len, tokens), default=0) > 4 else 0)
    ax.set_yticks(range(n), tokens)
    ax.xaxis.tick_top()
    ax.tick_params(length=0)
    return image


def sentence_figure(scheme: str, tree: Any, tokens: Sequence[str],
                    cells: Sequence[Sequence[str]] | None, paths: Sequence[str] | None = None,
                    title: str = "") -> Any:
    """The figure of one sentence: arcs of ``tree`` (words, heads, deprels) over ``tokens`` and
    the matrix ``cells`` (or, for ``path``, the lines ``paths``)."""
    plt = pyplot()
    n = len(tokens)
    width = max(5.0, CELL_INCHES * n + 2.0)
    xs = word_positions(tokens)
    arc_rows = max([arc_height(xs[d], xs[h - 1]) for d, h in enumerate(tree.heads) if h]
                   + [arc_height(0, n * 0.7)]) + 2.6
    below = CELL_INCHES * n + 1.5 if cells is not None else 0.25 * n + 0.6
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(width, 0.45 * arc_rows + below),
                                      height_ratios=[0.45 * arc_rows, below])
    draw_arcs(top, tree.words, tree.heads, tree.deprels, xs)
    top.set_xlim(-0.5, n - 0.5)
    if cells is not None:
        draw_matrix(bottom, tokens, cells)
    else:
        bottom.axis("off")
        for k, line in enumerate(paths or []):
            bottom.text(0.0, 1 - k / max(n, 1), line.replace("\t", "  "), fontsize=9, va="top",
                        transform=bottom.transAxes, family="monospace")
    what = (TITLES.get(scheme) or scheme_title(scheme)) + ("" if cells is None else "  [row i, column j]")
    fig.suptitle(f"{title}\n{what}" if title else what, fontsize=9)
    fig.tight_layout()
    return fig


def figure_cells(fig: Any) -> list[list[str]]:
    """The cell texts of a :func:`sentence_figure` heatmap, row by row (for tests and tools)."""
    ax = fig.axes[1]
    n = len(ax.get_yticks())
    texts = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text()
             for t in ax.texts}
    return [[texts[i, j] for j in range(n)] for i in range(n)]


def png_paths(path: Path, count: int) -> list[Path]:
    """``path`` for one figure; ``NAME-1.png``, ``NAME-2.png``, … (1-based sentence numbers)
    for several."""
    if count == 1:
        return [path]
    return [path.with_name(f"{path.stem}-{k}{path.suffix}") for k in range(1, count + 1)]
