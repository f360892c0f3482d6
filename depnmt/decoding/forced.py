"""Forced decoding: the log-probability a model gives to given translations.

For each (source, translation) pair, the translation is prepared as the model's target side was
in training (the model directory's target tokenizer and BPE; unknown subwords become ``<unk>``)
and scored in one teacher-forced pass: ``log p(Y | x) = Σ_t log p(y_t | y_<t, x)`` over its
|Y| subwords and the end-of-sentence token, with the probabilities the search uses (a softmax
over the whole vocabulary). The source is prepared as :mod:`depnmt.decoding.translate` prepares it:
tokenized, parsed by the model's own parser (with its tree control, if any) for the schemes
that read source trees, or given as trees; truncated beyond the model's source limit.

:class:`ForcedScore` holds ``logprob`` (raw), ``score`` (``logprob / lp(|Y|)``, the length
penalty of :func:`depnmt.decoding.search.length_penalty`, the model's ``alpha`` and form unless
given)
and, when asked, each subword's log-probability. So the forced score of a translation the
beam found is the score the search gave it (:class:`depnmt.decoding.search.Hypothesis`), for every
hypothesis that ended with the end-of-sentence token (all but those ``--at-limit cut`` cut at
the length limit, which the search scores without it). Pairs are scored in batches of similar
length (:func:`depnmt.decoding.translate.length_batches`, source plus target subwords).

Several model folders (:meth:`ForcedScorer.from_model_dirs`, ``rescore -m A -m B``) score as
their ensemble (:mod:`depnmt.decoding.ensemble`): at each position the log-softmax of the mean of
the
members' log-probabilities, the distribution the ensemble's search decodes with, so the forced
score of a hypothesis ``translate -m A -m B`` found is the score that search gave it. The
members must share what an ensemble shares, and their target BPE.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import torch
from torch import Tensor

from depnmt.core.device import autocast, search_attention
from depnmt.core.errors import DepnmtError
from depnmt.core.vocab import PAD
from depnmt.data.batches import Example
from depnmt.decoding.ensemble import Ensemble
from depnmt.decoding.search import length_penalty
from depnmt.decoding.translate import Translator, length_batches
from depnmt.model.transformer import TransformerNMT
from depnmt.stages.bpe import Segmenter


class ForcedScore(NamedTuple):
    """The score of one translation: ``score`` = ``logprob / lp(tokens)``, ``logprob`` the
    sum of ``token_logprobs`` (per subword, the end-of-sentence token last; None unless asked),
    ``tokens`` = |Y|, the subwords scored with the end-of-sentence token."""

    score: float
    logprob: float
    tokens: int
    token_logprobs: list[float] | None = None


class ForcedScorer:
    """A :class:`~depnmt.decoding.translate.Translator` and the model's target-side preprocessing.
    ``progress``: called with the number of pairs scored after each batch, when set (the
    progress bars of ``rescore`` and ``contrastive`` on a terminal)."""

    progress: Callable[[int], None] | None = None

    def __init__(self, translator: Translator, tgt_segmenter: Segmenter | None):
        from depnmt.stages.tokenize import make_tokenizer
        self.translator = translator
        self.tgt_segmenter = tgt_segmenter
        self.tgt_tokenizer = make_tokenizer(translator.config["tokenizers"]["tgt"])

    @classmethod
    def from_model_dir(cls, model_dir: str | Path, **kwargs) -> "ForcedScorer":
        """``kwargs``: those of :meth:`Translator.from_model_dir` (checkpoint, device,
        precision, max_tokens, batch_size; ``alpha`` and ``length_penalty`` for the score)."""
        if not isinstance(model_dir, (str, os.PathLike)):
            raise TypeError(f"from_model_dir() takes one model directory, not {model_dir!r}; "
                            f"several score as an ensemble with from_model_dirs()")
        model_dir = Path(model_dir)
        return cls(Translator.from_model_dir(model_dir, **kwargs),
                   Segmenter.from_dir(model_dir, "tgt"))

    @classmethod
    def from_model_dirs(cls, model_dirs: Sequence[str | Path],
                        checkpoints: Sequence[Path | None] | None = None,
                        **kwargs) -> "ForcedScorer":
        """One model folder as :meth:`from_model_dir`; several as their ensemble
        (:class:`~depnmt.decoding.ensemble.EnsembleTranslator`, each folder with its checkpoint,
        None:
        its default), which must share their target BPE too. ``kwargs``: device, precision,
        max_tokens, batch_size, ``alpha`` and ``length_penalty`` (the first model's unless
        given)."""
        dirs = [Path(d) for d in model_dirs]
        ckpts = list(checkpoints) if checkpoints is not None else [None] * len(dirs)
        if not dirs or len(ckpts) != len(dirs):
            raise DepnmtError(f"{len(dirs)} model directories and {len(ckpts)} checkpoints: "
                              f"give one or more directories, a checkpoint (or None) each")
        if len(dirs) == 1:
            return cls.from_model_dir(dirs[0], checkpoint=ckpts[0], **kwargs)
        from depnmt.decoding.ensemble import EnsembleTranslator
        segmenters = [Segmenter.from_dir(d, "tgt") for d in dirs]
        check_target_bpe(segmenters, dirs)
        return cls(EnsembleTranslator.from_model_dirs(dirs, ckpts, **kwargs), segmenters[0])

    def target_ids(self, line: str) -> list[int]:
        """A raw translation as target ids (no BOS/EOS), as training saw its targets."""
        words = self.tgt_tokenizer.tokenize(line)
        subwords = self.tgt_segmenter.segment(words) if self.tgt_segmenter else words
        return self.translator.tgt_vocab.encode(subwords)

    def score_lines(self, sources: Sequence[str], translations: Sequence[str],
                    per_token: bool = False) -> list[ForcedScore]:
        """Scores of raw ``translations`` of raw ``sources``, pair by pair."""
        check_pairs(sources, translations)
        words = [self.translator.src_tokenizer.tokenize(line) for line in sources]
        return self.score_words(words, [self.target_ids(t) for t in translations],
                                per_token=per_token)

    def score_words(self, words: Sequence[list[str]], targets: Sequence[list[int]],
                    trees: Sequence | None = None, per_token: bool = False,
                    line_numbers: Sequence[int] | None = None) -> list[ForcedScore]:
        """Scores of target ids ``targets`` (no BOS/EOS, e.g. a search's hypotheses) given
        tokenized sources ``words`` (with their trees, the parser's, when given). A source the
        parser makes no tree of is an error naming the translator's ``source_name`` and its
        line (``line_numbers[i]``, else the pair's number ``i + 1``)."""
        check_pairs(words, targets)
        empty = [i + 1 for i, w in enumerate(words) if not w]
        if empty:
            raise DepnmtError(f"pair {empty[0]}: the source is empty; there is nothing to "
                              f"score a translation against")
        examples = self.translator.examples(words, trees, line_numbers)
        for ex, ids in zip(examples, targets):
            ex.tgt = list(ids)
        return self.score_examples(examples, per_token)

    @torch.no_grad()
    def score_examples(self, examples: Sequence[Example], per_token: bool = False
                       ) -> list[ForcedScore]:
        """Scores of examples with their targets, in the order given, batched by length."""
        t = self.translator
        cfg = t.search_cfg
        out: list[ForcedScore | None] = [None] * len(examples)
        lengths = [len(ex.src) + len(ex.tgt) + 1 for ex in examples]
        for rows in length_batches(lengths, 1, t.max_tokens, t.batch_size):
            batch = t.collate([examples[i] for i in rows])
            with autocast(t.device, t.amp), search_attention(t.device):
                picked = token_logprobs(t.model, batch.src, batch.src_feats, batch.tgt_in,
                                        batch.tgt_out).cpu()      # one copy a batch, not a row
            for row, i in enumerate(rows):
                n = len(examples[i].tgt) + 1                        # with EOS
                values = picked[row, :n]
                logprob = float(values.sum())
                out[i] = ForcedScore(logprob / length_penalty(n, cfg.alpha, cfg.length_penalty),
                                     logprob, n, values.tolist() if per_token else None)
            if self.progress is not None:
                self.progress(len(rows))
        return out  # type: ignore[return-value]


def token_logprobs(model: TransformerNMT | Ensemble, src: Tensor,
                   src_feats: dict[str, Tensor] | list[dict[str, Tensor]],
                   tgt_in: Tensor, tgt_out: Tensor) -> Tensor:
    """``log p(tgt_out[b, t] | tgt_in[b, :t + 1], src[b])`` ``[B, T]`` float64 by one
    teacher-forced pass (``tgt_in`` = BOS + target, ``tgt_out`` = target + EOS, PAD-padded;
    0 at PAD), the softmax over the whole vocabulary as in the search: of the model's logits,
    or of an :class:`~depnmt.decoding.ensemble.Ensemble`'s mean log-probabilities (``src_feats``:
    each
    member's features)."""
    if isinstance(model, Ensemble):
        scores = model.teacher_forced(src, src_feats, tgt_in)    # type: ignore[arg-type]
    else:
        scores, _ = model(src, tgt_in, src_feats)
    lprobs = torch.log_softmax(scores.float(), -1)
    picked = lprobs.gather(-1, tgt_out.unsqueeze(-1)).squeeze(-1)
    return picked.masked_fill(tgt_out == PAD, 0.0).double()


def check_target_bpe(segmenters: Sequence[Segmenter | None], names: Sequence[Path]) -> None:
    """A :class:`DepnmtError` naming the first model whose target BPE is not the first's:
    an ensemble scores a translation split into the same subwords for every member."""
    def codes(segmenter: Segmenter | None):
        return None if segmenter is None else segmenter.__reduce__()[1]
    for segmenter, name in zip(segmenters[1:], names[1:]):
        if codes(segmenter) != codes(segmenters[0]):
            raise DepnmtError(f"{name}: its target BPE differs from {names[0]}'s; the models "
                              f"of an ensemble must share their vocabularies, BPE and "
                              f"tokenizers (train them on the same bpe folder)")


def check_pairs(sources: Sequence, translations: Sequence) -> None:
    """As many translations as sources."""
    if len(sources) != len(translations):
        raise DepnmtError(f"{len(sources)} sources but {len(translations)} translations: "
                          f"give one translation per source line")


def format_score(result: ForcedScore) -> str:
    """One output line: ``score TAB logprob TAB tokens`` (and TAB the per-subword
    log-probabilities, space-separated, when they were asked for)."""
    cols = [f"{result.score:.6f}", f"{result.logprob:.6f}", str(result.tokens)]
    if result.token_logprobs is not None:
        cols.append(" ".join(f"{v:.6f}" for v in result.token_logprobs))
    return "\t".join(cols)

