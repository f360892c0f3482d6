"""What a scheme can be told: a small dataclass of options per scheme.

Each scheme declares its options as a dataclass (``Scheme.Options``), one field per option
(:func:`depnmt.core.optionspec.option`: a default, its help text, the values it takes)::

    @dataclass
    class ShawOptions:
        rel_k: int = option(2, "rel: maximum relative distance k (Eq. 15)", IntRange(min=0))

A field's name is at once its ``depnmt train`` flag (``rel_k`` -> ``--rel-k``, made by the
command layer, :mod:`depnmt.commands.fields`) and its key in ``config.json``, where a model
records, per scheme, only the options that scheme declares: ``"schemes": [{"name": "rel",
"options": {"rel_k": 2, ...}}]``. Options several schemes share (the subword rule of the tree
schemes, Shaw's ``k`` in ``deplabel_rel``) are declared once, in a shared options class the
schemes' classes inherit from; the registry refuses two *different* declarations of one name
(:func:`depnmt.model.schemes.registry.register`).

:func:`learned` fields have no flag: the scheme learns them from the training data before the
model is built (:meth:`~depnmt.model.schemes.base.Scheme.learn_options`, e.g. GPS's label
vocabulary) and the model config records them with the others.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from depnmt.core.optionspec import Choice, FloatRange, IntRange, is_learned, learned, option
from depnmt.core.trees import CHAIN_HEADS, SUBWORD_RULES

__all__ = ["Choice", "FloatRange", "IntRange", "NoOptions", "SubwordTreeOptions", "is_learned",
           "learned", "make_options", "option", "options_dict", "pick_options"]


@dataclass
class NoOptions:
    """The options of a scheme that has none."""


def make_options(cls: type, values: dict[str, Any]) -> Any:
    """``cls`` from ``values`` (missing or None ones take the field's default); a key ``cls``
    does not declare is a TypeError."""
    unknown = sorted(set(values) - {f.name for f in fields(cls)})
    if unknown:
        raise TypeError(f"{cls.__name__} has no option(s) {', '.join(unknown)}")
    return cls(**{k: v for k, v in values.items() if v is not None})


def pick_options(cls: type, values: dict[str, Any]) -> Any:
    """``cls`` from the entries of ``values`` that it declares (a wider set of values, e.g. every
    flag of ``depnmt train`` or an old model's flat options)."""
    names = {f.name for f in fields(cls)}
    return make_options(cls, {k: v for k, v in values.items() if k in names})


def options_dict(options: Any) -> dict[str, Any]:
    return asdict(options)


@dataclass
class SubwordTreeOptions:
    """How a word tree reaches subwords (:func:`depnmt.core.trees.project_tree`); shared by the
    schemes that read source trees as per-pair labels."""

    subword_tree: str = option("chain", "tree schemes on BPE: chain (a word's pieces form a "
                               "chain to its last piece, Deguchi et al. Fig. 4) or inherit "
                               "(every piece takes its word's node)", Choice(SUBWORD_RULES))
    chain_head: str = option("last", "chain rule: a word's arc lands on the head word's last or "
                             "first piece", Choice(CHAIN_HEADS))
