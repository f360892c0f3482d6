"""Matplotlib without a display: the pyplot module on the Agg backend, and PNGs written
atomically (a reader never sees half a file)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from depnmt.core.textio import atomic_open


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (no display needed; imported on first use)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_png(fig: Any, path: str | Path, dpi: int = 150) -> None:
    """Write ``fig`` to ``path`` as a PNG (atomically) and close it."""
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=dpi)
    pyplot().close(fig)
