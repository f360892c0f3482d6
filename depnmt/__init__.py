"""depnmt: syntax-aware Transformer NMT toolkit.

The Python API (:mod:`depnmt.api`, imported on first use so that ``import depnmt`` stays
cheap)::

    import depnmt
    model_dir = depnmt.train_model({"data": "work/bpe", "model-dir": "work/model"})
    depnmt.Translator.load(model_dir).translate(["A man is riding a bike."])
"""

from depnmt.core.moved import install as _install_moved_paths
from depnmt.version import __version__

_install_moved_paths()                  # 0.2.0's module paths, with a warning (depnmt.core.moved)

__all__ = ["Translator", "Translation", "train_model", "__version__"]
_API = ("Translator", "train_model")


def __getattr__(name: str):
    """``depnmt.Translator`` and ``depnmt.train_model`` from :mod:`depnmt.api`, and
    ``depnmt.Translation`` (an n-best entry: text, score, logprob), imported on first use."""
    if name in _API:
        from depnmt import api
        return getattr(api, name)
    if name == "Translation":
        from depnmt.decoding.translate import Translation
        return Translation
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API, "Translation"])
