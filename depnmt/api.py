"""The Python API: what ``depnmt train`` and ``depnmt translate`` do, called from Python.

Both are thin façades over the code the commands run, so a result is the command's:

- :func:`train_model` trains the run a dict (keys as in ``depnmt train``'s YAML file: the
  flags without their dashes) or a YAML file describes, as ``depnmt train --config`` does
  (:mod:`depnmt.training.config`, :func:`depnmt.training.job.train`), and returns the model
  directory;
- :class:`Translator` loads a model directory as ``depnmt translate -m`` does and translates
  raw sentences to raw sentences (the model's own tokenizer, parser when its scheme reads
  source trees, BPE, search settings).

``import depnmt`` stays cheap: ``depnmt.Translator`` and ``depnmt.train_model`` import this
module (and torch) on first use.

Example::

    import depnmt

    model = depnmt.train_model({"input": "work/bpe", "output": "work/model",
                                "scheme": "abs", "layers": 3, "max-minutes": 20})
    translator = depnmt.Translator.load(model, device="cpu")
    translator.translate(["A man is riding a bike.", "Two dogs play."], beam=5)
    translator.translate(["A man is riding a bike."], beam=5, nbest=3)   # n-best lists
    ensemble = depnmt.Translator.load(["work/model", "work/model-seed2"])  # an ensemble
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

if TYPE_CHECKING:
    from depnmt.decoding.translate import Translation

def train_model(config: dict[str, Any] | str | Path) -> Path:
    """Train a model exactly as ``depnmt train --config FILE`` does; returns the model
    directory (``output``).

    ``config``: a dict of ``depnmt train`` options (keys as the flags without dashes,
    ``max-tokens`` or ``max_tokens``; values of the option's type) or the path of such a YAML
    file (e.g. a model's own ``train.yaml``). ``input`` and ``output`` are required. An
    unknown option or a bad value raises :class:`~depnmt.core.errors.DepnmtError` with the
    command's message; ``resume: true`` continues a model as ``--resume`` does;
    ``check-settings: true`` trains nothing and raises a DepnmtError naming each setting given
    that differs from those ``output``'s model was trained with, as ``--check-settings`` does.

    >>> model_dir = train_model({"input": "work/bpe", "output": "work/model",
    ...                          "max-steps": 1000, "device": "cpu"})   # doctest: +SKIP
    """
    from depnmt.training.config import check_settings, from_params, load_params
    from depnmt.training.job import train
    params, given = load_params(config)
    if params["check_settings"]:
        check_settings(params, given)
        return Path(params["model_dir"])
    run = from_params(params, given)
    train(run)
    return Path(run.model_dir)


class Translator:
    """A trained model directory, ready to translate raw sentences as ``depnmt translate``
    does (the same output for the same model, input and options).

    >>> translator = Translator.load("work/model", device="cpu")           # doctest: +SKIP
    >>> translator.translate(["A man is riding a bike."], beam=5)           # doctest: +SKIP
    ['Ein Mann fährt Fahrrad.']
    """

    def __init__(self, translator: Any):
        """Wraps a :class:`depnmt.decoding.translate.Translator`; use :meth:`load`."""
        self._translator = translator

    @classmethod
    def load(cls, model_dir: str | Path | Sequence[str | Path],
             checkpoint: str | Path | None = None, *positional: Any,
             **options: Any) -> "Translator":
        """Load ``model_dir`` (written by ``depnmt train``), as ``depnmt translate`` does with
        the same options; a list of model directories translates as their ensemble
        (``translate -m A -m B``, :mod:`depnmt.decoding.ensemble`). ``checkpoint``: a name in
        ``MODEL_DIR/checkpoints`` (``best``, ``last``, ``stepN``, an average's name; for an
        ensemble, in each directory) or a ``.pt`` file (default: best, else last); an ensemble
        given a file raises a DepnmtError (:func:`model_checkpoints`).
        ``options``, each checked as its flag of ``depnmt translate`` and defaulting as it
        (:func:`depnmt.decoding.settings.load_keywords`): ``device`` auto, cpu, cuda or
        cuda:N; ``precision`` auto, fp32, bf16 or fp16; ``batch_size`` (0: no limit) and
        ``max_tokens`` (default: 8,000 on the CPU, 32,000 on a GPU) bound a batch;
        ``quantize`` none or int8 (CPU only: most linear layers in int8); and the default
        search options of :meth:`translate` (the fields of
        :class:`~depnmt.core.searchlimits.SearchConfig`: ``beam``, ``alpha``, ``max_len_a``,
        ``max_len_b``, ``at_limit``, ``length_penalty``; default: the model's). Given by
        position after ``checkpoint``, settings are read in the order of earlier releases,
        :data:`LOAD_POSITIONS`."""
        from depnmt.decoding.settings import load_settings
        options = {**positional_options(positional, options), **options}
        search = load_options(options)
        dirs = model_dirs(model_dir)
        decoding, own = load_settings(dirs, options)
        ckpts = model_checkpoints(dirs, None if checkpoint is None else str(checkpoint),
                                  "checkpoint=")
        return cls(load_translator(dirs, ckpts, **decoding.keywords(), **own.loading(),
                                   **search))

    @property
    def search(self):
        """The default search settings (:class:`depnmt.decoding.search.SearchConfig`)."""
        return self._translator.search_cfg

    def translate(self, sentences: Iterable[str], *, nbest: int | None = None,
                  **search: Any) -> list[str] | list[list[Translation]]:
        """One translation (raw text) per sentence (raw text) of ``sentences``, in order; an
        empty sentence gives ``""``. ``search`` overrides the defaults of :meth:`load` for
        this call only: ``beam`` (1 = greedy), ``alpha``, ``max_len_a``, ``max_len_b``,
        ``at_limit`` (``eos`` or ``cut``), ``length_penalty`` (``gnmt`` or ``power``). Not for
        concurrent calls on one Translator.

        ``nbest`` (1 to the beam size): instead of a text, each sentence gives a list of its
        ``nbest`` best hypotheses, best first, each a
        :class:`~depnmt.decoding.translate.Translation`
        ``(text, score, logprob)`` as ``depnmt translate --nbest`` writes them: ``score`` the
        length-normalised log-probability that ranks them, ``logprob`` the log-probability;
        the first text is the one ``translate()`` without ``nbest`` gives. An empty sentence
        gives ``[("", 0.0, 0.0)]``; a list is shorter than ``nbest`` only when the length
        limit leaves fewer hypotheses.

        >>> translator.translate(["A man is riding a bike."], beam=5, nbest=2)  # doctest: +SKIP
        [[Translation(text='Ein Mann fährt Fahrrad.', score=-2.32, logprob=-3.52), ...]]
        """
        from depnmt.decoding.search import check_nbest
        from depnmt.decoding.settings import warn_unused_by_greedy
        if isinstance(sentences, str):
            raise TypeError("translate() takes a list of sentences; wrap a single one: "
                            "translate([sentence])")
        sentences = list(sentences)
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str):
                raise TypeError(f"translate(): sentence {i} is {type(sentence).__name__}, "
                                f"not str")
        check_search_options(search)
        impl = self._translator
        defaults = impl.search_cfg
        impl.search_cfg = replace(defaults, **{k: v for k, v in search.items() if v is not None})
        try:
            if nbest is not None:
                check_nbest(nbest, impl.search_cfg.beam)
            warn_unused_by_greedy(search, impl.search_cfg.beam, nbest)
            return list(impl.translate_lines(sentences, nbest=nbest or 0))
        finally:
            impl.search_cfg = defaults


# Translator.load's settings after ``checkpoint`` in the order earlier releases took them by
# position (``Translator.load(dir, None, "cpu", "fp32")``)
LOAD_POSITIONS = ("device", "precision", "max_tokens", "batch_size", "quantize")


def positional_options(values: Sequence[Any], keywords: dict[str, Any]) -> dict[str, Any]:
    """``values`` given by position to :meth:`Translator.load` as keywords, by
    :data:`LOAD_POSITIONS`; a ``TypeError`` as Python's for too many or a setting given twice."""
    if len(values) > len(LOAD_POSITIONS):
        raise TypeError(f"load() takes at most {len(LOAD_POSITIONS) + 2} positional arguments "
                        f"after the class ({len(values) + 2} given)")
    named = dict(zip(LOAD_POSITIONS, values))
    twice = sorted(set(named) & set(keywords))
    if twice:
        raise TypeError(f"load() got multiple values for argument {twice[0]!r}")
    return named


def load_translator(model_dirs: Sequence[Path], checkpoints: Sequence[Path | None],
                    device: str = "auto", precision: str = "auto", **options: Any) -> Any:
    """The :class:`depnmt.decoding.translate.Translator` of one model folder, or the
    :class:`~depnmt.decoding.ensemble.EnsembleTranslator` of several, each with its checkpoint
    (None:
    its default), as ``depnmt translate -m`` and :meth:`Translator.load` load them;
    ``options``: ``max_tokens``, ``batch_size``, ``quantize`` and the search options (None:
    the model's)."""
    if len(model_dirs) > 1:
        from depnmt.decoding.ensemble import EnsembleTranslator
        return EnsembleTranslator.from_model_dirs(model_dirs, checkpoints, device, precision,
                                                  **options)
    from depnmt.decoding.translate import Translator as ModelTranslator
    return ModelTranslator.from_model_dir(model_dirs[0], checkpoints[0], device, precision,
                                          **options)


def model_checkpoints(model_dirs: Sequence[Path], checkpoint: str | None,
                      option: str = "--checkpoint ") -> list[Path | None]:
    """Each model folder's checkpoint ``checkpoint`` names (None: its default), as
    :func:`~depnmt.storage.modeldir.named_checkpoint` finds it. An ensemble (several folders)
    takes a name each folder has: a file (a path, or a ``.pt`` file that exists here) would
    load the same weights into every member, an "ensemble" of one model, so it is a
    DepnmtError naming ``option`` (``--checkpoint `` of the commands, ``checkpoint=`` of
    :meth:`Translator.load`)."""
    from depnmt.core.errors import DepnmtError
    from depnmt.storage.modeldir import checkpoint_file, named_checkpoint
    if checkpoint and len(model_dirs) > 1 and checkpoint_file(checkpoint):
        raise DepnmtError(f"{option}{checkpoint}: an ensemble takes a checkpoint name (best, "
                          f"last, stepN, an average's name) that each model folder has, not a "
                          f"file (every member would load the same weights)")
    return [named_checkpoint(d, checkpoint) if checkpoint else None for d in model_dirs]


def model_dirs(model_dir: Any) -> list[Path]:
    """:meth:`Translator.load`'s ``model_dir`` (a folder or a list of them) as a list of
    paths; a TypeError for anything else."""
    if isinstance(model_dir, (str, os.PathLike)):
        return [Path(model_dir)]
    if isinstance(model_dir, (list, tuple)) and model_dir and all(
            isinstance(d, (str, os.PathLike)) for d in model_dir):
        return [Path(d) for d in model_dir]
    raise TypeError(f"load() needs a model directory (or a list of them), not {model_dir!r}")


def load_options(options: dict[str, Any]) -> dict[str, Any]:
    """The search options among :meth:`Translator.load`'s keyword ``options``; a TypeError
    naming each that is neither a search option nor a setting of
    :func:`depnmt.decoding.settings.load_keywords`."""
    from depnmt.core.searchlimits import search_names
    from depnmt.decoding.settings import load_keywords
    names = (*load_keywords(), *search_names())
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise TypeError(f"unknown option(s) {', '.join(unknown)} of load(); expected "
                        f"{', '.join(names)}")
    return {name: value for name, value in options.items() if name in search_names()}


def check_search_options(search: dict[str, Any]) -> None:
    """A TypeError naming each key of ``search`` that is no search option
    (:func:`depnmt.core.searchlimits.search_names`)."""
    from depnmt.core.searchlimits import search_names
    names = search_names()
    unknown = sorted(set(search) - set(names))
    if unknown:
        raise TypeError(f"unknown search option(s) {', '.join(unknown)}; expected "
                        f"{', '.join(names)}")
