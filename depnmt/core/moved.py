"""The import paths of depnmt 0.2.0's modules, which now live in packages by concern: a
script's ``import depnmt.forced`` or ``from depnmt.parse.conllu import read_conllu`` still works
in this release, with one ``FutureWarning`` per path, and gives the module where it lives now
(``depnmt.decoding.forced``, ``depnmt.core.conllu``: the same module object, not a copy).

:func:`install` (called by ``depnmt/__init__.py``) appends :class:`MovedModules` to
``sys.meta_path``, after the regular finders, so only a name that no longer exists reaches it.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# a 0.2.0 module (or package) under depnmt -> where it is now (``depnmt.data`` and
# ``depnmt.training``, 0.2.0's batching module and training job, are packages now: not aliased)
MOVED: dict[str, str] = {
    "analyze": "evaluation.analyze", "archive": "evaluation.archive", "aspec": "stages.aspec",
    "attachment": "evaluation.attachment", "average": "training.average",
    "board": "training.board", "bpe": "stages.bpe", "bpefrom": "stages.bpefrom",
    "bpelearn": "stages.bpelearn", "checkpoint": "storage.checkpoint", "compat": "core.compat",
    "contrastive": "evaluation.contrastive", "contrastivestats": "evaluation.contrastivestats",
    "corpora": "stages.corpora", "ct2translate": "decoding.ct2translate",
    "curves": "evaluation.curves", "datacache": "data.cache",
    "datarecord": "data.record", "device": "core.device", "distributed": "training.distributed",
    "ensemble": "decoding.ensemble", "errors": "core.errors", "export": "decoding.export",
    "figures": "evaluation.figures", "forced": "decoding.forced", "heap": "core.heap",
    "inspect": "evaluation.inspect", "langid": "stages.langid", "layerlists": "core.layerlists",
    "likelihood": "decoding.likelihood", "loader": "data.loader", "log": "core.log",
    "manifest": "core.manifest", "minimalpairs": "evaluation.minimalpairs",
    "modeldir": "storage.modeldir", "multitask": "stages.multitask",
    "optionspec": "core.optionspec", "parse": "stages.parse", "parse.conllu": "core.conllu",
    "prepare": "stages.prepare", "provenance": "training.provenance",
    "report": "evaluation.report", "runconfig": "training.config", "runs": "evaluation.runs",
    "schemename": "core.schemename", "score": "evaluation.score", "search": "decoding.search",
    "searchlimits": "core.searchlimits", "significance": "evaluation.significance",
    "stagedir": "core.stagedir", "stopsignals": "core.stopsignals", "subwords": "core.subwords",
    "textio": "core.textio", "tokenize": "stages.tokenize", "train": "training.loop",
    "trainrun": "training.setup", "translate": "decoding.translate",
    "treefigure": "evaluation.treefigure", "trees": "core.trees", "vocab": "core.vocab",
    "warmstart": "training.warmstart", "wordtable": "core.wordtable", "workers": "core.workers",
}
_WARNED: set[str] = set()


def new_name(old: str) -> str | None:
    """Where the 0.2.0 module ``depnmt.OLD`` is now (``OLD`` without the ``depnmt.``), by its
    longest moved prefix (``parse.conllu`` -> ``core.conllu``, ``parse.stage`` ->
    ``stages.parse.stage``); None for a name that did not move."""
    parts = old.split(".")
    for k in range(len(parts), 0, -1):
        prefix = ".".join(parts[:k])
        if prefix in MOVED:
            return ".".join([MOVED[prefix], *parts[k:]])
    return None


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``depnmt.OLD`` for a moved module and loads it as the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        if not fullname.startswith("depnmt."):
            return None
        new = new_name(fullname[len("depnmt."):])
        return None if new is None else importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        return None                                  # a placeholder, replaced in exec_module

    def exec_module(self, module) -> None:
        old = module.__name__
        new = "depnmt." + new_name(old[len("depnmt."):])
        if old not in _WARNED:
            from depnmt.core.compat import deprecation_message
            _WARNED.add(old)
            warnings.warn(deprecation_message(f"import path {old}", new), FutureWarning,
                          stacklevel=2)
        sys.modules[old] = importlib.import_module(new)   # what the import statement returns


def install() -> None:
    """Put :class:`MovedModules` last on ``sys.meta_path`` (once)."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.append(MovedModules())
