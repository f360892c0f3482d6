"""Raw text in, raw text out, with a model directory's own preprocessing.

For each input line: normalise + tokenize (the prepare stage's tokenizer settings), parse when
the model's scheme needs source trees (the parse stage's parser settings), segment into
subwords, decode (greedy or beam), de-BPE and detokenize. Exactly one output line per input
line, in order: an empty (or whitespace-only) line gives an empty line without running the
model; a line longer than ``max_src_len`` subwords is truncated with a warning naming the line.

``nbest``: instead of one text per line, the ``nbest`` best hypotheses of its beam, best first,
as :class:`Translation` (text and scores; :func:`depnmt.decoding.search.search_nbest`); an empty
line
gives one empty translation scored 0.

A model trained on control trees (``depnmt controls``) gets the same control's trees at test
time: its parser applies the control (:func:`depnmt.stages.parse.make_parser`), and so does
:meth:`Translator.examples` to given trees (``--input-format conllu``), which should be the
parser's.

``trees_out``: a model that induces source trees (an encoder parse head, DBSA(Enc)) can also
return them, one :class:`~depnmt.stages.parse.Sentence` per input line over the words it translated
(an empty tree for an empty line); no parser is involved.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterable, Iterator, NamedTuple, Sequence

import torch

from depnmt.core.device import (autocast, out_of_memory_as, resolve_device, search_attention,
                                train_precision)
from depnmt.core.errors import DepnmtError, InputError
from depnmt.core.log import warn
from depnmt.core.searchlimits import search_config
from depnmt.core.subwords import merge_subwords
from depnmt.core.trees import truncate_tree
from depnmt.core.vocab import BOS, EOS, Vocab
from depnmt.data.batches import Batch, Example, add_features, collate, encode_source, pad_2d
from depnmt.decoding.search import Hypothesis, SearchConfig, search, search_nbest
from depnmt.decoding.settings import check_quantize
from depnmt.model.packed import pack_linears
from depnmt.model.quantize import check_int8, quantize_int8
from depnmt.model.schemes import Extras
from depnmt.model.transformer import ModelConfig, TransformerNMT
from depnmt.stages.bpe import Segmenter
from depnmt.stages.multitask import check_tagged, model_tags
from depnmt.storage.modeldir import (check_subword_files, default_checkpoint, load_model_checkpoint,
                                     load_vocabs, named_checkpoint, read_config)

CHUNK_LINES = 2000   # lines read, translated and written at a time (streaming)
MAX_TOKENS = 8000    # default bound of a batch on the CPU: source subwords (padded) × beam
MAX_TOKENS_GPU = 32000   # on a GPU: decoding is bound by the host's kernel launches per step,
# so larger batches pay off (the quickstart model on an H200: 2.1× the sentences/s of 8,000)


class Translation(NamedTuple):
    """One entry of an n-best list: the translation (raw text), its ``score`` (the
    length-normalised log-probability that ranks the list) and ``logprob`` (the hypothesis's
    log-probability; :class:`depnmt.decoding.search.Hypothesis`)."""

    text: str
    score: float
    logprob: float


EMPTY = Translation("", 0.0, 0.0)    # an empty input line: nothing decoded, log p = 0


class Translator:
    """A loaded model with everything needed to go from raw text to raw text. ``progress``:
    called with the number of input lines (sentences) done, after each batch decoded and for
    the empty lines, when set (``translate``'s progress bar on a terminal). ``source_name``:
    what an error about an input line names as its file (``translate`` sets the input's path)."""

    progress: Callable[[int], None] | None = None
    source_name: str = "<input>"    # the API's sentences; translate sets --input or <stdin>

    def __init__(self, model: TransformerNMT, config: dict, src_vocab: Vocab, tgt_vocab: Vocab,
                 segmenter: Segmenter | None, device: torch.device, search_cfg: SearchConfig,
                 max_tokens: int = MAX_TOKENS, amp: torch.dtype | None = None,
                 batch_size: int = 0):
        """``max_tokens``, ``batch_size``: how sentences are batched (:func:`length_batches`).
        The Translator decodes with ``model`` from then on: in eval mode and, on the CPU, with
        its linear layers' weights packed (:func:`~depnmt.model.packed.pack_linears`: the same
        parameters and state dict)."""
        from depnmt.stages.tokenize import make_tokenizer
        check_batching(max_tokens, batch_size)
        self.model, self.config = model.eval(), config
        if device.type == "cpu":        # decoding from now on: weights packed once (CPU only)
            pack_linears(model)
        self.src_vocab, self.tgt_vocab, self.segmenter = src_vocab, tgt_vocab, segmenter
        self.device, self.search_cfg, self.max_tokens = device, search_cfg, max_tokens
        self.batch_size = batch_size
        self.schemes = model.schemes.schemes          # the model's own (one SchemeStack)
        self.needs_trees = model.schemes.needs_source_trees
        self.src_tokenizer = make_tokenizer(config["tokenizers"]["src"])
        self.tgt_tokenizer = make_tokenizer(config["tokenizers"]["tgt"])
        self.max_src_len = int(config.get("max_src_len", 250))
        self.amp = amp            # autocast dtype of the decoder's matrix multiplies (None: fp32)
        self._parser = None
        self.control = source_control(config)
        self.task_tags = model_tags(config)     # multitask data's: every source begins with one

    @classmethod
    def from_model_dir(cls, model_dir: Path, checkpoint: Path | None = None, device: str = "auto",
                       precision: str = "auto", max_tokens: int | None = None, batch_size: int = 0,
                       quantize: str = "none", **search_overrides) -> "Translator":
        """``precision`` as ``train --precision`` (:func:`depnmt.core.device.train_precision`):
        ``auto`` decodes with bf16 autocast on CPUs with native bf16 matrix multiplies and
        bf16/fp16 AMP on CUDA, fp32 elsewhere. ``quantize`` ``int8``: most linear layers in
        int8 (:mod:`depnmt.model.quantize`, CPU only), the rest at ``precision``, where
        ``auto`` is fp32 (casting between the int8 layers' fp32 and bf16 costs more than bf16
        saves). ``max_tokens`` (source subwords × beam; None: :func:`default_max_tokens` of the
        device) and ``batch_size`` (sentences, 0 = no limit) bound a batch
        (:func:`length_batches`). ``checkpoint``: a name in ``MODEL_DIR/checkpoints`` or a
        ``.pt`` file, as ``--checkpoint`` (:func:`~depnmt.storage.modeldir.named_checkpoint`;
        None: :func:`~depnmt.storage.modeldir.default_checkpoint`)."""
        check_quantize(quantize)
        config = read_config(model_dir)
        check_subword_files(model_dir, config)
        model_cfg = ModelConfig.from_dict(config["model"])
        ckpt_path = (named_checkpoint(model_dir, str(checkpoint)) if checkpoint  # name or file
                     else default_checkpoint(model_dir))
        state = load_model_checkpoint(ckpt_path, model_cfg.to_dict(), config.get("files"))
        dev = resolve_device(device)
        if quantize == "int8":
            check_int8(dev)
        model = TransformerNMT(model_cfg)
        try:
            model.assign_state(state["model"])
        except RuntimeError as exc:
            raise DepnmtError(f"{ckpt_path}: does not fit this model "
                              f"({str(exc).strip().splitlines()[0]})") from None
        if quantize == "int8":
            quantize_int8(model.eval())
        search_cfg = search_config(**{**config.get("search", {}),
                                     **{k: v for k, v in search_overrides.items() if v is not None}})
        src_vocab, tgt_vocab = load_vocabs(model_dir)
        return cls(model.to(dev), config, src_vocab, tgt_vocab, Segmenter.from_dir(model_dir, "src"),
                   dev, search_cfg, batch_size=batch_size,
                   max_tokens=default_max_tokens(dev) if max_tokens is None else max_tokens,
                   amp=train_precision(dev, "fp32" if quantize == "int8" and precision == "auto"
                                       else precision))

    def use_gold_arcs(self) -> None:
        """``translate --dbsa-gold-arcs``: DBSA(Enc)'s parse head attends to each source token's
        gold head (from the input trees) instead of its predicted distribution — how much a
        perfect parse would give (the DBSA plugin's ``gold_dependency``)."""
        from depnmt.model.schemes.dbsa import DBSAModule
        heads = [p for p in self.model.schemes.parts
                 if isinstance(p, DBSAModule) and p.side == "src"]
        if not heads:
            raise DepnmtError("--dbsa-gold-arcs needs a model with a source parse head "
                              "(DBSA(Enc), scheme dbsa_enc)")
        for head in heads:
            head.gold_arcs = True

    # -- source side -----------------------------------------------------------------------
    @property
    def parser(self):
        """The model's own source parser, loaded on first use (only for tree schemes)."""
        if self._parser is None:
            self._parser = source_parser(self.config["parser"]["src"])
        return self._parser

    def parse_words(self, words: Sequence[list[str]],
                    line_numbers: Sequence[int] | None = None) -> list:
        """:attr:`parser`'s trees of tokenized sentences (None for an empty one). A sentence
        whose analysis makes no tree is an :class:`InputError` naming :attr:`source_name` and
        its line (``line_numbers[i]``, else ``i + 1``)."""
        from depnmt.stages.parse.parser import AnalysisError
        nonempty = [i for i, w in enumerate(words) if w]
        try:
            parsed = self.parser.parse([words[i] for i in nonempty])
        except AnalysisError as exc:
            i = nonempty[exc.item]
            raise InputError(self.source_name, line_numbers[i] if line_numbers else i + 1,
                             exc.message) from None
        trees: list = [None] * len(words)
        for i, tree in zip(nonempty, parsed):
            trees[i] = tree
        return trees

    def examples(self, words: Sequence[list[str]], trees: Sequence | None = None,
                 line_numbers: Sequence[int] | None = None, quiet: bool = False) -> list[Example]:
        """Examples for tokenized source sentences (with word-level trees for tree schemes);
        ``quiet``: no warning for the sentences truncated to the model's source limit. A model
        trained on multitask data refuses a sentence without its task tag first
        (:meth:`check_source`)."""
        self.check_source(words, line_numbers)
        if self.needs_trees and trees is None:
            trees = self.parse_words(words, line_numbers)
        elif trees is not None and self.control is not None:     # given: the parser's trees
            trees = [self.control.apply(t) if t is not None else None for t in trees]
        out = []
        for i, ws in enumerate(words):
            subwords = self.segmenter.segment(ws)
            if len(subwords) > self.max_src_len:
                where = line_numbers[i] if line_numbers else i + 1
                if not quiet:
                    warn(f"input line {where}: {len(subwords)} subwords, truncated to "
                         f"{self.max_src_len}")
                subwords = subwords[: self.max_src_len]
                if trees is not None:     # parsed here, or given (--input-format conllu)
                    trees[i] = truncate_tree(trees[i], len(merge_subwords(subwords)))
            ex = Example(i, encode_source(subwords, self.src_vocab), [], subwords,
                         trees[i] if trees is not None else None)
            out.append(ex)
        add_features(out, self.schemes)
        return out

    def check_source(self, words: Sequence[list[str]],
                     line_numbers: Sequence[int] | None = None) -> None:
        """Every non-empty tokenized sentence begins with one of :attr:`task_tags` when the
        model has them, else an :class:`InputError` naming :attr:`source_name` and its line
        (:func:`~depnmt.stages.multitask.check_tagged`)."""
        if self.task_tags:
            check_tagged(words, self.task_tags, self.source_name, line_numbers,
                         self.config.get("src_lang", "SRC"))

    # -- decoding --------------------------------------------------------------------------
    def to_text(self, ids: list[int]) -> str:
        return self.tgt_tokenizer.detokenize(merge_subwords(self.tgt_vocab.decode(ids)))

    @torch.no_grad()
    def translate_examples(self, examples: Sequence[Example], trees_out: list | None = None,
                           target_trees_out: list | None = None, nbest: int = 0) -> list:
        """Decode examples batched by length; results in the order given: a text each, or
        (``nbest`` ≥ 1) a list of ``nbest`` :class:`Translation` each, best first. Induced
        source trees are appended to ``trees_out``, and the trees DBSA(Dec) induces over each
        (best) hypothesis to ``target_trees_out``, in the same order, when they are lists."""
        results: list = [""] * len(examples)
        trees: list = [None] * len(examples)
        targets: list = [None] * len(examples)
        for rows in length_batches([len(ex.src) for ex in examples], self.search_cfg.beam,
                                   self.max_tokens, self.batch_size):
            batch = self.collate([examples[i] for i in rows])
            extras = Extras() if trees_out is not None else None   # parse scores, for trees
            with self._out_of_memory(len(rows)):
                hyps, texts = self._search(batch, extras, nbest)
            for i, result in zip(rows, texts):
                results[i] = result
            self.advance(len(rows))
            if target_trees_out is not None:
                for i, tree in zip(rows, self.target_trees(batch, hyps)):
                    targets[i] = tree
            if trees_out is not None:
                induced = self.model.schemes.induced_source_trees(extras,
                                                                  [examples[i] for i in rows])
                if induced is None:
                    raise DepnmtError("this model induces no source trees (it has no encoder "
                                      "parse head: train with DBSA(Enc), scheme dbsa_enc)")
                for i, tree in zip(rows, induced):
                    trees[i] = tree
        if trees_out is not None:
            trees_out.extend(trees)
        if target_trees_out is not None:
            target_trees_out.extend(targets)
        return results

    def advance(self, lines: int) -> None:
        """Report ``lines`` more done to :attr:`progress`, if set."""
        if self.progress is not None and lines:
            self.progress(lines)

    def collate(self, examples: Sequence[Example]) -> Batch:
        """A batch of ``examples`` on the device, with the model's features."""
        return collate(examples, self.schemes).to(self.device)

    def _out_of_memory(self, sentences: int):
        """The device running out of memory while searching a batch of ``sentences`` as a
        one-line error naming what to lower (:func:`~depnmt.core.device.out_of_memory_as`)."""
        return out_of_memory_as(lambda: (
            f"out of memory on {self.device} searching a batch of {sentences} sentences "
            f"(--beam {self.search_cfg.beam}, --max-tokens {self.max_tokens}, "
            f"--batch-size {self.batch_size or 'unlimited'}): lower --max-tokens or --beam"))

    def _search(self, batch, extras: Extras | None, nbest: int) -> tuple[list[list[int]], list]:
        """Search ``batch``: each sentence's best hypothesis (target ids) and its result, the
        text or (``nbest`` ≥ 1) the n-best list of :class:`Translation`."""
        with autocast(self.device, self.amp), search_attention(self.device):
            if not nbest:
                hyps = search(self.model, batch.src, batch.src_feats, self.search_cfg, extras)
                return hyps, [self.to_text(ids) for ids in hyps]
            lists = search_nbest(self.model, batch.src, batch.src_feats, self.search_cfg, nbest,
                                 extras)
        return [hyps[0].tokens for hyps in lists], [self.nbest_list(hyps) for hyps in lists]

    def nbest_list(self, hyps: list[Hypothesis]) -> list[Translation]:
        """The search's hypotheses as translations (raw text and scores)."""
        return [Translation(self.to_text(h.tokens), h.score, h.logprob) for h in hyps]

    @torch.no_grad()
    def target_trees(self, batch, hyps: list[list[int]]) -> list:
        """The trees the decoder's parse head induces over the hypotheses ``hyps`` (target ids,
        no BOS/EOS) of ``batch``: one teacher-forced pass over ``[BOS] + hypothesis``, with the
        search's attention kernels (its shapes, like a search's, are new in every batch)."""
        ids = [[t for t in h if t != EOS] for h in hyps]
        pieces = [self.tgt_vocab.decode(h) for h in ids]
        tgt_in = pad_2d([[BOS] + h for h in ids])
        with autocast(self.device, self.amp), search_attention(self.device):
            _, extras = self.model(batch.src, tgt_in.to(self.device), batch.src_feats)
        induced = self.model.schemes.induced_target_trees(extras, pieces)
        if induced is None:
            raise DepnmtError("this model induces no target trees (it has no decoder parse "
                              "head: train with DBSA(Dec), scheme dbsa_dec)")
        return induced

    def translate_lines(self, lines: Iterable[str], trees_out: list | None = None,
                        target_trees_out: list | None = None, nbest: int = 0) -> Iterator:
        """Translate raw lines, streaming in chunks; yields exactly one result per input line
        (a text, or with ``nbest`` ≥ 1 an n-best list: :meth:`translate_examples`)."""
        chunk: list[str] = []
        first = 1
        for line in lines:
            chunk.append(line)
            if len(chunk) >= CHUNK_LINES:
                yield from self._translate_chunk(chunk, first, trees_out, target_trees_out, nbest)
                first += len(chunk)
                chunk = []
        if chunk:
            yield from self._translate_chunk(chunk, first, trees_out, target_trees_out, nbest)

    def _translate_chunk(self, lines: list[str], first_line: int, trees_out: list | None = None,
                         target_trees_out: list | None = None, nbest: int = 0) -> list:
        words = [self.src_tokenizer.tokenize(line) for line in lines]
        return self.translate_words(words, first_line=first_line, trees_out=trees_out,
                                    target_trees_out=target_trees_out, nbest=nbest)

    def translate_words(self, words: Sequence[list[str]], trees: Sequence | None = None,
                        first_line: int = 1, trees_out: list | None = None,
                        target_trees_out: list | None = None, nbest: int = 0,
                        line_numbers: Sequence[int] | None = None) -> list:
        """Translate tokenized sentences (results as :meth:`translate_examples`); empty ones
        give empty lines (``nbest``: one :data:`EMPTY` translation) and empty trees without
        decoding. Messages name sentence ``i`` as line ``line_numbers[i]`` of
        :attr:`source_name` (a CoNLL-U block's first line), else ``first_line + i``."""
        keep = [i for i, w in enumerate(words) if w]
        lines = line_numbers or range(first_line, first_line + len(words))
        out: list = [[EMPTY] if nbest else ""] * len(words)
        self.advance(len(words) - len(keep))
        induced: list | None = [] if trees_out is not None else None
        targets: list | None = [] if target_trees_out is not None else None
        if keep:
            exs = self.examples([words[i] for i in keep],
                                [trees[i] for i in keep] if trees is not None else None,
                                line_numbers=[lines[i] for i in keep])
            for i, result in zip(keep, self.translate_examples(exs, induced, targets, nbest)):
                out[i] = one_line(result)
        from depnmt.stages.parse import Sentence
        for collected, sink in ((induced, trees_out), (targets, target_trees_out)):
            if sink is not None:
                by_line = dict(zip(keep, collected or []))
                sink.extend(by_line.get(i, Sentence.empty()) for i in range(len(words)))
        return out


def source_parser(settings: dict):
    """The source parser of a model's parser ``settings`` (its control applied, if any)."""
    from depnmt.stages.parse import make_parser
    if settings.get("backend") == "conllu":
        raise DepnmtError("this model was trained on source trees read from CoNLL-U files "
                          "(parse --backend conllu), so it cannot parse raw text itself; "
                          "translate pre-parsed input with --input-format conllu")
    return make_parser(settings)


def source_control(config: dict):
    """The tree control (:class:`depnmt.stages.parse.controls.Control`) of a model trained on
    control trees, from its source parser settings; None for any other model."""
    settings = (config.get("parser") or {}).get("src") or {}
    if settings.get("control") is None:
        return None
    from depnmt.stages.parse.controls import Control
    return Control.from_dict(settings["control"])


def one_line(result: str | list[Translation]) -> str | list[Translation]:
    """A translation (or each of an n-best list) with its line breaks made spaces."""
    if isinstance(result, str):
        return result.replace("\n", " ")
    return [t._replace(text=t.text.replace("\n", " ")) for t in result]


def default_max_tokens(device: torch.device) -> int:
    """``translate --max-tokens``'s default on ``device``: :data:`MAX_TOKENS_GPU` on CUDA,
    :data:`MAX_TOKENS` elsewhere."""
    return MAX_TOKENS_GPU if device.type == "cuda" else MAX_TOKENS


def check_batching(max_tokens: int, batch_size: int) -> None:
    """``max_tokens`` ≥ 1 and ``batch_size`` ≥ 0 (0 = no limit), else a :class:`DepnmtError`."""
    if max_tokens < 1:
        raise DepnmtError(f"max_tokens {max_tokens}: expected at least 1")
    if batch_size < 0:
        raise DepnmtError(f"batch_size {batch_size}: expected at least 0 (0 = no limit)")


def length_batches(lengths: Sequence[int], beam: int, max_tokens: int,
                   max_sentences: int = 0) -> Iterator[list[int]]:
    """Indices of ``lengths`` sorted by length, cut into batches whose ``size × longest × beam``
    stays within ``max_tokens`` and whose size stays within ``max_sentences`` (0: no limit); a
    batch holds at least one sentence, so a sentence longer than ``max_tokens`` is decoded
    alone."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    cap = max_sentences or len(order)
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and end - start < cap \
                and (end - start + 1) * lengths[order[end]] * max(1, beam) <= max_tokens:
            end += 1
        yield order[start:end]
        start = end
