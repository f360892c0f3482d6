"""Warm starts: a new training run that begins from a trained model's weights
(``depnmt train --init-from MODEL``), to fine-tune it on new data or to add a scheme to it
(e.g. ``abs+dep+rel`` from a trained ``abs``).

Strict by default, as PyTorch's ``load_state_dict(strict=True)``: the new model must have the
trained model's architecture — d_model, heads, d_ff, layers, vocabularies, embedding sharing
and tying — but for the schemes added or removed. Every weight is then copied, except those
of a scheme the trained model lacks (new: they start as in a fresh run) and those of a scheme
the new model lacks (dropped). A scheme both have must have the same options, and keeps the
options it learned from the trained model's data (GPS's label vocabulary: the rows of its
table), as ``--resume`` does. Anything else — a weight of another shape, one the new model
would leave new or drop that no scheme explains — is refused by :func:`check_warm_start`,
before the run writes its model folder, in one line naming the first weights and how many
(Hugging Face's loaders likewise list missing and unexpected keys and refuse a size
mismatch).

``--init-partial`` starts from part of a model on purpose: it copies the weights whose name
and role match and names, by group, what it left new or dropped. A weight's role is its name
for the layers' weights (``encoder.3.ffn.0.weight``), with the tensors it is tied to for the
embeddings (a separate source embedding is not a shared one), and for a scheme's weights
(``schemes.parts.I.REST``) the scheme's name and options with ``REST`` (the scheme's place in
the stack may change: abs+rel's relative tables go to abs+dep+rel's). Other dimensions
(d_model, heads, d_ff, vocabulary sizes) are refused in both modes: no weight of another shape
or head split is ever copied.

The optimizer, schedule, data order and step count start afresh. The trained model's
vocabularies and subword codes must be the data's byte for byte: the copied embeddings are
rows of its vocabulary.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

import torch
from torch import nn

from depnmt.core.errors import DepnmtError
from depnmt.core.log import info
from depnmt.storage.modeldir import (check_parameters, check_same_subwords, checkpoint_dir,
                                     default_checkpoint, read_config)

PARTIAL_FLAG = "--init-partial"
DIMS = ("d_model", "n_heads", "d_ff", "src_vocab_size", "tgt_vocab_size")
STRUCTURE = ("encoder_layers", "decoder_layers", "tie_decoder_embeddings",
             "share_all_embeddings")
EMBEDDINGS = {"src_embed.weight": "source embedding", "tgt_embed.weight": "target embedding",
              "output.weight": "output projection"}
SCHEME_WEIGHT = re.compile(r"schemes\.parts\.(\d+)\.(.+)")
LAYER_WEIGHT = re.compile(r"(encoder|decoder)\.(\d+)\.")
NAMED = 3                                   # weights an error names before "and N more"

Shapes = dict[str, torch.Size]


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


# -- roles and the plan ------------------------------------------------------------------------
def tie_groups(model: dict[str, Any]) -> dict[str, tuple[str, ...]]:
    """Each embedding weight of ``model`` (a ModelConfig dict) -> the names of its tensor."""
    if model.get("share_all_embeddings"):
        groups = [tuple(EMBEDDINGS)]
    elif model.get("tie_decoder_embeddings"):
        groups = [("src_embed.weight",), ("tgt_embed.weight", "output.weight")]
    else:
        groups = [(name,) for name in EMBEDDINGS]
    return {name: group for group in groups for name in group}


def scheme_options(entry: dict[str, Any]) -> str:
    """A scheme entry's options, every declared one present (an older config's missing ones
    at their defaults), as comparable text."""
    from depnmt.model.schemes.options import make_options, options_dict
    from depnmt.model.schemes.registry import SCHEMES, load_builtin_schemes
    load_builtin_schemes()
    options = options_dict(make_options(SCHEMES[entry["name"]].Options, entry["options"]))
    return json.dumps(options, sort_keys=True, default=str)


def roles(model: dict[str, Any], names: Iterable[str]) -> dict[str, tuple]:
    """The role of each weight ``names`` of ``model`` (module docstring)."""
    ties = tie_groups(model)
    options = [scheme_options(e) for e in model["schemes"]]
    out = {}
    for name in names:
        scheme = SCHEME_WEIGHT.fullmatch(name)
        if scheme:
            i = int(scheme[1])
            out[name] = ("scheme", model["schemes"][i]["name"], options[i], scheme[2])
        else:
            out[name] = ("weight", name, ties.get(name))
    return out


@dataclass
class Plan:
    """What a warm start copies from a trained model (``source``) into a new one."""

    copied: dict[str, str] = field(default_factory=dict)   # new model's name -> trained's
    new: list[str] = field(default_factory=list)         # no weight of that role there
    other_role: list[str] = field(default_factory=list)  # of that name, in another role
    dropped: list[str] = field(default_factory=list)     # the trained model's, not copied
    other_shape: list[tuple[str, tuple, tuple]] = field(default_factory=list)   # name, there, here


def make_plan(source: tuple[dict, Shapes], target: tuple[dict, Shapes]) -> Plan:
    """The weights of ``target`` (model dict, weight shapes) copied from ``source``'s of the
    same role, and those left new, dropped or of another shape."""
    (src_model, src_shapes), (tgt_model, tgt_shapes) = source, target
    by_role = {role: name for name, role in roles(src_model, src_shapes).items()}
    plan = Plan()
    for name, role in roles(tgt_model, tgt_shapes).items():
        found = by_role.get(role)
        if found is None:
            (plan.other_role if name in src_shapes else plan.new).append(name)
        elif tuple(src_shapes[found]) != tuple(tgt_shapes[name]):
            plan.other_shape.append((name, tuple(src_shapes[found]), tuple(tgt_shapes[name])))
        else:
            plan.copied[name] = found
    taken = set(plan.copied.values())
    plan.dropped = [name for name in src_shapes if name not in taken]
    return plan


# -- the check before the run writes anything ----------------------------------------------------
def check_warm_start(init_from: Path | None, data_dir: Path, cfg: Any, schemes: list,
                     partial: bool = False) -> None:
    """``--init-from``: refuse, before anything is written, a trained model whose subwords are
    not the data's or whose weights do not go into the model ``cfg`` describes (a
    :class:`~depnmt.model.transformer.ModelConfig`, its vocabulary sizes set, learned options
    not yet; module docstring). The schemes both models have take the trained model's learned
    options, in ``cfg`` and in ``schemes`` (the run's built schemes, which the learn step then
    leaves as they are). Reads ``config.json`` and computes shapes (:mod:`~.model.shapes`):
    the checkpoint itself is read when the weights are copied (:func:`warm_start`)."""
    if init_from is None:
        return
    folder, path = source_checkpoint(init_from)
    check_same_subwords(data_dir, folder, "--init-from")
    source = read_config(folder)["model"]
    inherit_learned(cfg, schemes, source["schemes"])
    target = cfg.to_dict()
    check_plan(path, source, target,
               make_plan((source, model_shapes(source)), learned_part(target)), partial)


def inherit_learned(cfg: Any, schemes: list, trained: list[dict[str, Any]]) -> None:
    """The learned options of ``trained``'s schemes into ``cfg``'s entries of the same name
    that have none, and into the built ``schemes``."""
    from depnmt.model.schemes.options import make_options
    from depnmt.model.schemes.registry import with_learned
    cfg.schemes = with_learned(cfg.schemes, trained)
    for scheme, entry in zip(schemes, cfg.schemes):
        scheme.options = make_options(scheme.Options, entry["options"])


def learned_part(model: dict[str, Any]) -> tuple[dict, Shapes]:
    """``model`` without the schemes whose options are still to be learned (a scheme the
    trained model lacks: all its weights are new, whatever their shapes), and its shapes."""
    from depnmt.model.schemes.options import is_learned
    from depnmt.model.schemes.registry import SCHEMES

    def complete(entry: dict) -> bool:
        return all(entry["options"].get(f.name) is not None
                   for f in fields(SCHEMES[entry["name"]].Options) if is_learned(f))
    part = {**model, "schemes": [e for e in model["schemes"] if complete(e)]}
    return part, model_shapes(part)


def model_shapes(model: dict[str, Any]) -> Shapes:
    from depnmt.model.shapes import state_shapes
    return state_shapes(model)


def check_plan(path: Path, source: dict, target: dict, plan: Plan, partial: bool) -> None:
    """A :class:`DepnmtError` when ``plan`` copies weights of another shape or head split, or
    (strict) leaves new or drops any weight that no added or removed scheme explains."""
    dims = differences(source, target, DIMS)
    if plan.other_shape or dims:
        shapes = [f"{name} {list(there)} there, {list(here)} here"
                  for name, there, here in plan.other_shape]
        raise DepnmtError(
            f"--init-from {path}: {'; '.join(dims)}"
            + (f"; {len(shapes)} weights would have other shapes ({listed(shapes, '; ')})"
               if shapes else "")
            + "; a warm start copies weights into the same dimensions (d_model, heads, d_ff, "
              "vocabularies)")
    if partial:
        return
    kept = {e["name"] for e in source["schemes"]} & {e["name"] for e in target["schemes"]}
    target_roles = roles(target, plan.new + plan.other_role)
    source_roles = roles(source, plan.dropped)
    unexplained = [name for name, role in (*target_roles.items(), *source_roles.items())
                   if role[0] != "scheme" or role[1] in kept]
    if unexplained:
        why = differences(source, target, STRUCTURE) + scheme_differences(source, target)
        raise DepnmtError(
            f"--init-from {path}: not this run's architecture: {'; '.join(why)}; "
            f"{len(set(unexplained))} weights would be left new or dropped "
            f"({listed(list(dict.fromkeys(unexplained)))}); pass {PARTIAL_FLAG} to copy only "
            f"the weights whose name and role match")


def differences(source: dict, target: dict, keys: Iterable[str]) -> list[str]:
    """``KEY X there, Y here`` for each of ``keys`` on which the two model dicts differ; the
    embedding sharing in words."""
    out = []
    for key in keys:
        there, here = source.get(key), target.get(key)
        if there == here:
            continue
        if key == "share_all_embeddings":
            out.append(f"embeddings {'shared' if there else 'separate'} there, "
                       f"{'shared' if here else 'separate'} here (--share-all-embeddings)")
        elif key == "tie_decoder_embeddings":
            out.append(f"decoder embedding and output projection {'tied' if there else 'apart'}"
                       f" there, {'tied' if here else 'apart'} here (--tie-embeddings)")
        else:
            out.append(f"{key} {there} there, {here} here")
    return out


def scheme_differences(source: dict, target: dict) -> list[str]:
    """``scheme NAME: other options`` for each scheme both model dicts have, with other
    options."""
    theirs = {e["name"]: scheme_options(e) for e in source["schemes"]}
    return [f"scheme {e['name']}: other options" for e in target["schemes"]
            if e["name"] in theirs and theirs[e["name"]] != scheme_options(e)]


def listed(items: list[str], sep: str = ", ") -> str:
    """The first :data:`NAMED` of ``items``, and how many more."""
    more = len(items) - NAMED
    return sep.join(items[:NAMED]) + (f" and {more} more" if more > 0 else "")


# -- the copy --------------------------------------------------------------------------------------
def warm_start(model: nn.Module, source: Path, data_dir: Path) -> Plan:
    """Copy into ``model`` the weights of the trained model ``source`` (see
    :func:`source_checkpoint`) whose name and role match (:func:`make_plan`; the run checked
    the start with :func:`check_warm_start`) and print what was copied, left new and dropped,
    by group. ``data_dir``: the run's data (its subwords were checked)."""
    from depnmt.storage.checkpoint import load_checkpoint
    folder, path = source_checkpoint(source)
    trained_model = read_config(folder)["model"]
    trained = load_checkpoint(path).get("model")
    check_parameters(path, trained, trained_model)
    own = model.state_dict()
    plan = make_plan((trained_model, {n: t.shape for n, t in trained.items()}),
                     (model.cfg.to_dict(), {n: t.shape for n, t in own.items()}))
    check_plan(path, trained_model, model.cfg.to_dict(), plan, partial=True)
    model.load_state_dict({name: trained[found] for name, found in plan.copied.items()},
                          strict=False)
    for line in summary(path, plan, model.cfg.to_dict(), trained_model, len(own)):
        info(line)
    return plan


def summary(path: Path, plan: Plan, model: dict, trained: dict, total: int) -> list[str]:
    """The lines that say what a warm start copied, left new and dropped, by group."""
    lines = [f"warm start from {path}: {len(plan.copied)} of {total} weights copied"
             + (f" ({groups(plan.copied, model)})" if plan.copied else "")]
    other_role = "not copied, another role there (tied otherwise, other scheme options)"
    for what, names, of in (("new, as in a fresh run", plan.new, model),
                            (other_role, plan.other_role, model),
                            ("dropped", plan.dropped, trained)):
        if names:
            lines.append(f"warm start: {what}: {groups(names, of)} ({len(names)} weights)")
    return lines


def groups(names: Iterable[str], model: dict) -> str:
    """``names`` of ``model``'s weights as groups: ``embeddings`` (or which of them),
    ``encoder layers 0-2``, ``decoder layer 0``, ``scheme dep+rel weights``."""
    embeddings, layers, schemes, other = [], {"encoder": [], "decoder": []}, [], []
    for name in names:
        layer, scheme = LAYER_WEIGHT.match(name), SCHEME_WEIGHT.fullmatch(name)
        if name in EMBEDDINGS:
            embeddings.append(EMBEDDINGS[name])
        elif layer:
            layers[layer[1]].append(int(layer[2]))
        elif scheme:
            schemes.append(model["schemes"][int(scheme[1])]["name"])
        else:
            other.append(name.split(".")[0])
    out = ["embeddings"] if len(set(embeddings)) == len(EMBEDDINGS) else \
        list(dict.fromkeys(embeddings))
    for side, numbers in layers.items():
        if numbers:
            numbers = sorted(set(numbers))
            out.append(f"{side} layer{'s' if len(numbers) > 1 else ''} {ranges(numbers)}")
    if schemes:
        out.append(f"scheme {'+'.join(dict.fromkeys(schemes))} weights")
    return ", ".join(out + list(dict.fromkeys(other)))


def ranges(numbers: list[int]) -> str:
    """``[0, 1, 2, 4]`` -> ``0-2, 4``."""
    runs: list[list[int]] = []
    for n in numbers:
        if runs and n == runs[-1][-1] + 1:
            runs[-1].append(n)
        else:
            runs.append([n])
    return ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)
