"""Translate raw text with a CTranslate2 export (``depnmt translate --ct2 DIR``).

The same steps as :mod:`depnmt.decoding.translate`, with CTranslate2 in place of the torch model:
the
export's own tokenizer (``depnmt-export.json``) and BPE (``bpe.json``), truncation to
``max_src_len`` subwords with a warning, batches cut by length exactly as depnmt cuts them, de-BPE
and detokenization; exactly one output line per input line (empty lines stay empty).

Decoding is depnmt's ``--at-limit cut`` search (:mod:`depnmt.decoding.search`) as far as CTranslate2
allows: end of sentence allowed from the first step (``min_decoding_length=0``); each sentence's
output limited to its own ``L − 1 = ceil(a·|x| + b) − 1`` tokens (CTranslate2 takes one
``max_decoding_length`` per call, so a batch is decoded in groups of equal limit; at the limit
CTranslate2 ends the beam's best continuations as they are — it cannot force EOS, so depnmt's
default ``--at-limit eos`` has no CTranslate2 equivalent); its length penalty is log p / |Y|^α,
depnmt's ``--length-penalty power`` (CTranslate2 4.x ``finalize_hypothesis_score`` in
src/decoding.cc: ``score /= pow(length, length_penalty)``, length = the hypothesis's tokens,
EOS included when it has one, also without ``return_end_token``, which only drops EOS from the
returned tokens; depnmt's default ``gnmt`` penalty has no CTranslate2 equivalent). So the export
decodes as depnmt's search with ``--length-penalty power --at-limit cut`` (up to float32
rounding between two nearly equal hypotheses). Greedy search gives depnmt's tokens (EOS forced
or not, the tokens before it are the same).

``nbest``: CTranslate2's ``num_hypotheses`` best of the beam with their scores
(``return_scores``): ``score`` is CTranslate2's ranking score log p / |Y|^α (greedy search
too), ``logprob`` = score · |Y|^α.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from depnmt.core.errors import DepnmtError
from depnmt.core.log import warn
from depnmt.core.subwords import merge_subwords
from depnmt.core.textio import read_json
from depnmt.core.vocab import BOS, EOS, PAD, SPECIALS
from depnmt.decoding.export import EXPORT_CONFIG, EXPORT_FORMAT, import_ctranslate2
from depnmt.decoding.search import (SearchConfig, check_at_limit, check_length_penalty,
                                    length_penalty)
from depnmt.decoding.translate import (CHUNK_LINES, EMPTY, MAX_TOKENS, Translation, check_batching,
                                       length_batches, one_line)
from depnmt.stages.bpe import Segmenter
from depnmt.stages.multitask import check_tagged, model_tags
from depnmt.storage.modeldir import SECTIONS, check_sections

DROPPED = {SPECIALS[PAD], SPECIALS[BOS], SPECIALS[EOS]}   # depnmt's Vocab.decode drops these too
CT2_SEARCH = {"at_limit": "cut", "length_penalty": "power"}   # what CTranslate2's beam search does


def check_ct2_search(given: dict) -> None:
    """A one-line error when the search settings ``given`` ask for what CTranslate2 cannot do:
    force EOS at the length limit (``at_limit`` eos) or the GNMT length penalty."""
    if check_at_limit(given.get("at_limit", "cut")) != "cut":
        raise DepnmtError("--at-limit eos: CTranslate2 cannot force EOS at the length limit; "
                          "it ends hypotheses there as they are (--at-limit cut)")
    if check_length_penalty(given.get("length_penalty", "power")) != "power":
        raise DepnmtError("--length-penalty gnmt: CTranslate2 divides log p by |Y|^alpha only "
                          "(--length-penalty power)")


def read_export(export_dir: Path) -> dict:
    """``depnmt-export.json`` of an export folder, with a clear error for other folders."""
    path = export_dir / EXPORT_CONFIG
    record = read_json(path, f"{export_dir}: not a CTranslate2 export of depnmt (no "
                             f"{EXPORT_CONFIG}); write one with `depnmt export --format "
                             f"ctranslate2 -m MODEL -o DIR`")
    if record.get("export_format") != EXPORT_FORMAT:
        raise DepnmtError(f"{path}: export format {record.get('export_format')} is not readable "
                          f"by this depnmt (format {EXPORT_FORMAT})")
    hint = f"(not a {EXPORT_CONFIG} written by `depnmt export`?)"
    check_sections(path, record, {name: SECTIONS[name] for name in ("tokenizers", "search")},
                   hint)
    if not isinstance(record.get("max_src_len"), int) or record["max_src_len"] < 1:
        raise DepnmtError(f"{path}: \"max_src_len\" should be a positive integer, found "
                          f"{record.get('max_src_len')!r} {hint}")
    return record


class CT2Translator:
    """A CTranslate2 model with the tokenizer, BPE and search settings it was exported with.
    ``source_name``: what an error about an input line names as its file."""

    source_name: str = "<input>"    # translate --ct2 sets --input or <stdin>

    def __init__(self, model, record: dict, segmenter: Segmenter, search_cfg: SearchConfig,
                 max_tokens: int = MAX_TOKENS, batch_size: int = 0):
        from depnmt.stages.tokenize import make_tokenizer
        check_batching(max_tokens, batch_size)
        self.model, self.record, self.segmenter = model, record, segmenter
        self.search_cfg, self.max_tokens, self.batch_size = search_cfg, max_tokens, batch_size
        self.src_tokenizer = make_tokenizer(record["tokenizers"]["src"])
        self.tgt_tokenizer = make_tokenizer(record["tokenizers"]["tgt"])
        self.max_src_len = int(record["max_src_len"])
        self.task_tags = model_tags(record)     # a multitask model's: every source begins with one

    @classmethod
    def from_dir(cls, export_dir: Path | str, device: str = "cpu", threads: int = 0,
                 compute_type: str = "default", max_tokens: int | None = None,
                 batch_size: int = 0, **search_overrides) -> "CT2Translator":
        """Load an export; ``threads`` = CTranslate2's intra_threads (0: its default);
        ``max_tokens`` (None: 8,000 on every device), ``batch_size``: depnmt's batches
        (``translate.length_batches``)."""
        given = {k: v for k, v in search_overrides.items() if v is not None}
        check_ct2_search(given)
        export_dir = Path(export_dir)
        record = read_export(export_dir)
        ct2 = import_ctranslate2()
        if device == "auto":
            device = "cuda" if ct2.get_cuda_device_count() else "cpu"
        kind, _, index = device.partition(":")
        try:
            model = ct2.Translator(str(export_dir), device=kind, device_index=int(index or 0),
                                   compute_type=compute_type, inter_threads=1,
                                   intra_threads=threads)
        except (RuntimeError, ValueError) as exc:
            raise DepnmtError(f"{export_dir}: CTranslate2 cannot load this model on {device} "
                              f"({exc})") from None
        search_cfg = SearchConfig(**{**record.get("search", {}), **given, **CT2_SEARCH})
        return cls(model, record, Segmenter.from_dir(export_dir, "src"), search_cfg,
                   MAX_TOKENS if max_tokens is None else max_tokens, batch_size)

    def limit(self, n_subwords: int) -> int:
        """depnmt's output limit ``ceil(a·|x| + b)`` (EOS included) for a source of n subwords."""
        return max(1, math.ceil(n_subwords * self.search_cfg.max_len_a + self.search_cfg.max_len_b))

    def translate_subwords(self, sources: Sequence[list[str]]) -> list[list[str]]:
        """Output subwords (no specials) for source subwords, decoded in depnmt's batches."""
        return [hyps[0][0] for hyps in self.nbest_subwords(sources, 1)]

    def nbest_subwords(self, sources: Sequence[list[str]], nbest: int
                       ) -> list[list[tuple[list[str], float, float]]]:
        """The ``nbest`` best hypotheses of each source (subwords), best first, as (output
        subwords without specials, score, log-probability), decoded in depnmt's batches."""
        out: list[list] = [[] for _ in sources]
        beam = max(1, self.search_cfg.beam)
        for batch in length_batches([len(s) + 1 for s in sources], beam, self.max_tokens,
                                    self.batch_size):
            groups: dict[int, list[int]] = {}
            for i in batch:
                groups.setdefault(self.limit(len(sources[i])), []).append(i)
            for limit, rows in groups.items():
                results = self.model.translate_batch(
                    [sources[i] for i in rows], beam_size=beam,
                    length_penalty=self.search_cfg.alpha, max_decoding_length=max(1, limit - 1),
                    min_decoding_length=0, max_input_length=0, return_end_token=True,
                    num_hypotheses=nbest, return_scores=True)
                for i, result in zip(rows, results):      # limit 1: one step, nothing kept
                    out[i] = [self._scored(hyp, score, limit)
                              for hyp, score in zip(result.hypotheses, result.scores)]
        return out

    def _scored(self, hyp: list[str], score: float, limit: int) -> tuple[list[str], float, float]:
        """A CTranslate2 hypothesis (EOS included when it ended) as (output subwords, score,
        log-probability): its score is log p / |Y|^α, |Y| its tokens (at least 1)."""
        length = length_penalty(len(hyp), self.search_cfg.alpha, "power")
        return [t for t in hyp if t not in DROPPED][: limit - 1], score, score * length

    def translate_words(self, words: Sequence[list[str]], first_line: int = 1,
                        nbest: int = 0) -> list:
        """Translate tokenized sentences; empty ones give empty lines without decoding. With
        ``nbest`` ≥ 1 a list of ``nbest`` :class:`~depnmt.decoding.translate.Translation` per
        sentence,
        best first (an empty one: ``[EMPTY]``) instead of a text. A multitask model's export
        refuses a sentence without its task tag (:func:`~depnmt.stages.multitask.check_tagged`,
        naming :attr:`source_name`)."""
        check_tagged(words, self.task_tags, self.source_name,
                     range(first_line, first_line + len(words)),
                     self.record.get("src_lang") or "SRC")
        keep = [i for i, w in enumerate(words) if w]
        sources = []
        for i in keep:
            subwords = self.segmenter.segment(words[i])
            if len(subwords) > self.max_src_len:
                warn(f"input line {first_line + i}: {len(subwords)} subwords, truncated to "
                     f"{self.max_src_len}")
                subwords = subwords[: self.max_src_len]
            sources.append(subwords)
        out: list = [[EMPTY] if nbest else ""] * len(words)
        for i, hyps in zip(keep, self.nbest_subwords(sources, max(nbest, 1))):
            texts = [Translation(self.tgt_tokenizer.detokenize(merge_subwords(subwords)),
                                 score, logprob) for subwords, score, logprob in hyps]
            out[i] = one_line(texts if nbest else texts[0].text)
        return out

    def translate_lines(self, lines: Iterable[str], nbest: int = 0) -> Iterator:
        """Translate raw lines, streaming in chunks; yields exactly one result per input line
        (as :meth:`translate_words`)."""
        chunk: list[str] = []
        first = 1
        for line in lines:
            chunk.append(line)
            if len(chunk) >= CHUNK_LINES:
                yield from self.translate_words([self.src_tokenizer.tokenize(l) for l in chunk],
                                                first, nbest)
                first += len(chunk)
                chunk = []
        if chunk:
            yield from self.translate_words([self.src_tokenizer.tokenize(l) for l in chunk], first,
                                            nbest)
