"""Warm starts: a new training run that begins from a trained model's weights
(``depnmt train --init-from MODEL``), to fine-tune it on new data or to add a scheme to it
(e.g. ``abs+dep+rel`` from a trained ``abs``).

Every parameter of the new model whose name and shape match one of the trained model's is
copied; the others (a new scheme's tables, a layer the trained model lacks) start as they do in
a fresh run. The optimizer, schedule, data order and step count start afresh. The trained
model's vocabularies and subword codes must be the data's byte for byte: the copied
embeddings are rows of its vocabulary.
"""

from __future__ import annotations

from pathlib import Path

from torch import nn

from .errors import DepnmtError
from .log import info
from .modeldir import check_same_subwords, checkpoint_dir, default_checkpoint


def source_checkpoint(source: Path) -> tuple[Path, Path]:
    """``(model folder, checkpoint)`` of ``--init-from``: a model folder (its ``best.pt``,
    else ``last.pt``) or a checkpoint file inside one (``MODEL/checkpoints/NAME.pt``)."""
    source = Path(source)
    if source.is_dir():
        return source, default_checkpoint(source)
    if source.is_file() and source.parent.name == checkpoint_dir(Path()).name:
        return source.parent.parent, source
    raise DepnmtError(f"--init-from {source}: expected a model folder of `depnmt train` or a "
                      f"checkpoint in its checkpoints/ folder")


def warm_start(model: nn.Module, source: Path, data_dir: Path) -> tuple[list[str], list[str]]:
    """Copy into ``model`` every weight of the trained model ``source`` (see
    :func:`source_checkpoint`) whose name and shape match; returns the names copied and the
    names left as initialised. A :class:`DepnmtError` when its vocabularies or codes are not
    those of ``data_dir``."""
    from .checkpoint import load_checkpoint
    folder, path = source_checkpoint(source)
    check_same_subwords(data_dir, folder, "--init-from")
    trained = load_checkpoint(path).get("model")
    if not isinstance(trained, dict):
        raise DepnmtError(f"{path}: holds no model weights")
    own = model.state_dict()
    copied = [n for n, t in own.items() if n in trained and trained[n].shape == t.shape]
    model.load_state_dict({n: trained[n] for n in copied}, strict=False)
    new = [n for n in own if n not in set(copied)]
    info(f"warm start from {path}: {len(copied)} of {len(own)} weights copied"
         + (f"; new: {', '.join(new)}" if new else ""))
    return copied, new
