"""The options of the commands that decode with trained models, declared once as fields
(:func:`~depnmt.core.optionspec.option`): :class:`DecodingSettings`, the models and the hardware
that ``translate``, ``rescore`` and ``contrastive`` share and :meth:`depnmt.Translator.load`
takes as keywords; :class:`TranslateSettings`, ``translate``'s own; :class:`RescoreSettings`,
``rescore``'s own. Each field gives a flag, its help and default, and the check of its value on
the command line and from Python; the search options are :mod:`depnmt.core.searchlimits`'. No
torch here, so that ``--help`` stays quick."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from depnmt.core.errors import DepnmtError
from depnmt.core.optionspec import (COUNT, POSITIVE, PRECISION, Choice, File, Folder, OnlyWith,
                                    Param, check_options, field_params, option, option_fields)
from depnmt.storage.modeldir import default_model_dir

QUANTIZATIONS = ("none", "int8")
INPUT_FORMATS = ("text", "conllu")


def default_model_dirs() -> tuple[Path, ...]:
    """The model directory a command decodes with when given none: ``$DEPNMT_MODEL``, else
    ./model."""
    return (default_model_dir(),)


def scoring_batch_option() -> Any:
    """``--max-tokens`` of the commands that score given pairs (``rescore``, ``contrastive``):
    one declaration, a fresh field for each settings class."""
    return option(None, "pairs of similar length are scored together in batches of at most "
                  "this many source and target subwords (padding included)", POSITIVE,
                  show_default="8000 on the CPU, 32000 on a GPU")


@dataclass
class DecodingSettings:
    """The models a command decodes with and on what (``translate``, ``rescore`` and
    ``contrastive`` share these flags; every field but ``model_dirs``, which is its first
    argument, is a keyword of :meth:`depnmt.Translator.load`). A help's ``{several}``,
    ``{items}`` and ``{precision}`` are each command's words (:func:`decoding_params`)."""

    model_dirs: tuple[Path, ...] = option(default_model_dirs, "model directory written by "
                                          "`depnmt train`; {several}", Folder(),
                                          flag=("-m", "--model"), multiple=True,
                                          show_default="$DEPNMT_MODEL or ./model")
    batch_size: int = option(0, "at most this many {items} per batch (0: no limit)", COUNT)
    device: str = option("auto", "auto, cpu, cuda or cuda:N", str)
    precision: str = option("auto", "arithmetic of the {precision}", PRECISION)

    def __post_init__(self):
        check_options(self)

    def keywords(self) -> dict[str, Any]:
        """The settings as the keywords of the library's loaders
        (:meth:`depnmt.decoding.translate.Translator.from_model_dir`, :mod:`.ensemble`,
        :mod:`.forced`): every field but ``model_dirs``."""
        return {name: getattr(self, name) for name in decoding_keywords()}


def decoding_keywords() -> tuple[str, ...]:
    """The names of :class:`DecodingSettings`' fields that are keywords of the loaders and of
    :meth:`depnmt.Translator.load` (all but ``model_dirs``)."""
    return tuple(f.name for f in option_fields(DecodingSettings) if f.name != "model_dirs")


def decoding_params(**words: str) -> list[Param]:
    """The flags of :class:`DecodingSettings` in a command: each help with the command's
    ``words`` filled in (``several``: what it does with more than one model, ``items``: what a
    batch holds, ``precision``: what ``--precision`` sets, after "arithmetic of the")."""
    return [replace(p, help=p.help.format(**words)) for p in field_params(DecodingSettings)]


def check_quantize(quantize: str) -> str:
    """``quantize`` when it is one of :data:`QUANTIZATIONS`, else a :class:`DepnmtError`."""
    if quantize not in QUANTIZATIONS:
        raise DepnmtError(f"quantize {quantize!r}: choose one of {', '.join(QUANTIZATIONS)}")
    return quantize


@dataclass
class TranslateSettings:
    """``depnmt translate``'s own options (the models, the hardware and the search options are
    :class:`DecodingSettings`' and :class:`~depnmt.core.searchlimits.SearchConfig`'s); the
    fields of :data:`LOADING` are keywords of :meth:`depnmt.Translator.load` too."""

    checkpoint: str | None = option(
        None, "checkpoint: a name in MODEL/checkpoints (best, last, stepN of train --keep-last, "
        "or the -o NAME of `depnmt average`) or a .pt file [default: best, else last]", str,
        flag=("-c", "--checkpoint"), metavar="NAME|FILE")
    input_path: Path | None = option(None, "read this file instead of standard input", File(),
                                     flag=("-i", "--input"))
    input_format: str = option(
        "text", "text: raw sentences; conllu: pre-parsed sentences (their trees as they are, "
        "their words normalised and lowercased as the model's training text was)",
        Choice(INPUT_FORMATS))
    output_path: Path | None = option(
        None, "write the translations to this file instead of standard output, all or nothing: "
        "they go to a temporary file next to it that replaces FILE once every line is "
        "translated, so a failed or killed run leaves no partial FILE", File(),
        flag=("-o", "--output"))
    nbest: int | None = option(
        None, "write the N best hypotheses of each input line's beam (N at most the beam size), "
        "best first, one per line: `SENT_ID ||| hypothesis ||| score ||| logprob`, SENT_ID the "
        "input line's index counted from 0 (as Moses), score the length-normalised "
        "log-probability that ranks them (log p / lp(|Y|), lp of --length-penalty), logprob "
        "the log-probability, |Y| the target subwords scored (EOS included). An empty line "
        "gives one empty hypothesis scored 0; fewer than N only where the length limit leaves "
        "fewer", POSITIVE, metavar="N", show_default="one translation per line")
    max_tokens: int | None = option(
        None, "sentences of similar length are decoded together in batches of at most this many "
        "source subwords × beam (padding included; a longer sentence is decoded alone): larger "
        "batches are faster and take more memory", POSITIVE,
        show_default="8000 on the CPU and with --ct2, 32000 on a GPU")
    quantize: str = option(
        "none", "int8: decode on the CPU with int8 weights and activations in most linear layers "
        "(the output projection, feed-forward layers, attention outputs and cross-attention), "
        "the rest at --precision (auto: fp32); faster, BLEU within a few tenths. Activations "
        "share one scale per batch, so a sentence's output can depend on the sentences decoded "
        "with it", Choice(QUANTIZATIONS))
    ct2_dir: Path | None = option(
        None, "translate with this CTranslate2 export (`depnmt export`) instead of a model "
        "directory: the export's own tokenizer, BPE and search defaults; text input only",
        Folder(), flag="--ct2")
    threads: int = option(0, "with --ct2: CTranslate2's intra-op threads (0: its default)",
                          COUNT, only=OnlyWith("ct2_dir"))
    induced_trees: Path | None = option(
        None, "also write the source trees the model's encoder parse head induces (DBSA(Enc) "
        "models; no parser needed) to this CoNLL-U file: one tree per input line over the "
        "words translated, maximum spanning tree of the word-level head scores", File())
    induced_target_trees: Path | None = option(
        None, "also write the trees the decoder's parse head induces over each translation "
        "(DBSA(Dec) models) to this CoNLL-U file: one teacher-forced pass over the hypothesis "
        "(--nbest: the best one), maximum spanning tree of its word-level head scores", File())
    dbsa_gold_arcs: bool = option(
        False, "DBSA(Enc) models: the parse head attends to each source token's gold head from "
        "the input trees (needs --input-format conllu) instead of its own prediction, to "
        "measure what a perfect parse would give")

    def __post_init__(self):
        check_quantize(self.quantize)
        check_options(self)

    def loading(self) -> dict[str, Any]:
        """The fields of :data:`LOADING`, as keywords of the library's loaders."""
        return {name: getattr(self, name) for name in LOADING}

    def check_ct2(self, models: int, precision: str = "auto") -> None:
        """With ``--ct2``, a DepnmtError for what an export does not do: an ensemble
        (``models`` folders, -m), a checkpoint, trees, CoNLL-U input, int8 on top, another
        ``precision`` than ``auto`` (it computes in the export's own type)."""
        if self.ct2_dir is None:
            return
        if models > 1:
            raise DepnmtError("--ct2 translates with one export; an ensemble (-m given more "
                              "than once) needs the model folders without --ct2")
        if self.checkpoint or self.induced_trees or self.induced_target_trees \
                or self.input_format != "text":
            raise DepnmtError("--ct2 translates raw text only (no --checkpoint, --induced-trees, "
                              "--induced-target-trees or --input-format conllu)")
        if self.quantize != "none":
            raise DepnmtError("--ct2 computes in the export's own type: for int8, export with "
                              "depnmt export --quantization int8, or drop --ct2")
        if precision != "auto":
            raise DepnmtError(f"--ct2 computes in the export's own type (depnmt export "
                              f"--quantization), not --precision {precision}: drop --precision, "
                              f"or drop --ct2")

    def check_gold_arcs(self) -> None:
        """``--dbsa-gold-arcs`` reads the gold trees of CoNLL-U input; a DepnmtError
        otherwise."""
        if self.dbsa_gold_arcs and self.input_format != "conllu":
            raise DepnmtError("--dbsa-gold-arcs takes the gold trees from the input: give "
                              "--input-format conllu")


# the search options a greedy search (beam 1) does not use for its output: it ranks no hypotheses
GREEDY_UNUSED = ("alpha", "length_penalty", "at_limit")


def warn_unused_by_greedy(search: dict[str, Any], beam: int, nbest: int | None) -> None:
    """A warning naming each search option given in ``search`` (name -> value, None: not
    given) that does not change the output of a search of ``beam`` 1 (greedy) without
    ``nbest``: ``--alpha``, ``--length-penalty`` and ``--at-limit`` rank hypotheses or score
    them, and greedy search has one, ended at EOS or the length limit alike; with ``--nbest``
    they change its score column."""
    from depnmt.core.log import warn
    from depnmt.core.optionspec import flag_name
    unused = [f"{flag_name(name)} {search[name]}" for name in GREEDY_UNUSED
              if search.get(name) is not None]
    if beam == 1 and not nbest and unused:
        warn(f"{', '.join(unused)}: no effect with beam 1 (greedy search ranks no hypotheses; "
             f"it would change only --nbest scores)")


# translate's own options that :meth:`depnmt.Translator.load` takes as keywords too
LOADING = ("max_tokens", "quantize")


def load_keywords() -> tuple[str, ...]:
    """The keywords of :meth:`depnmt.Translator.load` besides ``checkpoint`` and the search
    options: :func:`decoding_keywords`, then :data:`LOADING`."""
    return (*decoding_keywords(), *LOADING)


def load_settings(model_dirs: Sequence[Path], options: dict[str, Any]
                  ) -> tuple[DecodingSettings, TranslateSettings]:
    """The settings :meth:`depnmt.Translator.load` loads ``model_dirs`` with: ``options``
    (keywords of :func:`load_keywords`, each checked as its flag), the defaults for the
    others."""
    decoding = DecodingSettings(tuple(model_dirs), **{name: options[name] for name in
                                                      decoding_keywords() if name in options})
    own = TranslateSettings(**{name: options[name] for name in LOADING if name in options})
    return decoding, own


@dataclass
class RescoreSettings:
    """``depnmt rescore``'s own options (:mod:`depnmt.decoding.forced`; the models, the
    hardware and the score's search options are :class:`DecodingSettings`' and
    :class:`~depnmt.core.searchlimits.SearchConfig`'s)."""

    checkpoint: str | None = option(
        None, "checkpoint: a name in MODEL/checkpoints (in each, for an ensemble) or a .pt file  "
        "[default: best, else last]", str, flag=("-c", "--checkpoint"), metavar="NAME|FILE")
    src_path: Path | None = option(None, "the source sentences, one per line", File(),
                                   flag="--src", required=True)
    src_format: str = option(
        "text", "text: raw sentences; conllu: parsed sentences (their words, and their trees "
        "for tree schemes)", Choice(INPUT_FORMATS))
    tgt_path: Path | None = option(None, "the translations to score, raw text, one per source "
                                   "line", File(), flag="--tgt", required=True)
    output_path: Path | None = option(
        None, "write the scores to this file (all or nothing) instead of standard output",
        File(), flag=("-o", "--output"))
    per_token: bool = option(False, "add a column: each subword's log-probability, the "
                             "end-of-sentence token last, separated by spaces")
    max_tokens: int | None = scoring_batch_option()

    def __post_init__(self):
        check_options(self)
