"""Validation during training: the dev loss, perplexity and token accuracy (teacher forcing),
the schemes' dev metrics (e.g. DBSA's UAS) and dev BLEU (decoded exactly as ``translate``
would, greedy unless ``--valid-beam``), and which validation is the best so far by
``--early-stop-metric`` (:func:`improved`: what selects ``best.pt`` and counts ``--patience``).
Rank 0 validates."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import TYPE_CHECKING

import torch

from depnmt.core.device import autocast
from depnmt.core.log import warn
from depnmt.core.vocab import PAD
from depnmt.data.batches import TokenBatcher, example_lengths, iterate_batches
from depnmt.decoding.search import SearchConfig
from depnmt.model.transformer import TransformerNMT, label_smoothed_nll

if TYPE_CHECKING:
    from depnmt.training.checkpoints import Progress
    from depnmt.training.config import TrainingRun

DEV_BLEU = "dev_bleu"       # config.json: {"tokenize": NAME}, what dev BLEU splits words with
EARLIER_TOKENIZE = "13a"    # what runs of earlier versions used, whatever the target language


def dev_bleu_record(tgt_lang: str, saved: dict | None = None) -> dict[str, str]:
    """``config.json``'s :data:`DEV_BLEU` of a run: a fresh run (``saved`` None) splits its dev
    BLEU with sacreBLEU's tokenizer for the target language, as ``score --lang`` does
    (``ja-mecab`` for Japanese, ``zh``, ``ko-mecab``; ``13a`` otherwise: 13a splits only at
    spaces and punctuation, so a Japanese dev BLEU by it is near 0 and selects ``best.pt`` by
    noise); ``--resume`` keeps the tokenizer the run recorded (``saved``, its config.json), or
    13a for a run of an earlier version, so that all of a run's validations are one BLEU."""
    if saved is not None:
        return {"tokenize": recorded_tokenizer(saved)}
    from sacrebleu.metrics import BLEU
    return {"tokenize": BLEU._TOKENIZER_MAP.get(tgt_lang, BLEU.TOKENIZER_DEFAULT)}


def recorded_tokenizer(config: dict | None) -> str:
    """The tokenizer a run's ``config.json`` (``config``) records for its dev BLEU
    (:data:`DEV_BLEU`), or 13a when it records none (a run of an earlier version)."""
    record = (config or {}).get(DEV_BLEU)
    tokenize = record.get("tokenize") if isinstance(record, dict) else None
    return tokenize if isinstance(tokenize, str) else EARLIER_TOKENIZE


def dev_bleu_metric(config: dict | None):
    """The sacreBLEU BLEU that scores a run's dev set (``config``: its config.json as written;
    :func:`recorded_tokenizer`)."""
    from sacrebleu.metrics import BLEU
    return BLEU(tokenize=recorded_tokenizer(config))


class Validator:
    """Validates ``model`` (on ``device`` in ``amp``) on ``run``'s dev examples."""

    def __init__(self, run: TrainingRun, model: TransformerNMT, device: torch.device,
                 amp: torch.dtype | None):
        self.run, self.model, self.device, self.amp = run, model, device, amp
        self._translator = None
        self._bleu = None           # the run's dev BLEU metric (dev_bleu_metric), made once

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Dev loss/perplexity (teacher forcing) and dev BLEU (greedy unless --valid-beam)."""
        self.model.eval()
        tokens = 0
        sums = torch.zeros(2, dtype=torch.float64, device=self.device)   # nll, right tokens
        counts: dict[str, list[int]] = {}          # schemes' dev metrics, e.g. DBSA's UAS
        run = self.run
        batcher = TokenBatcher(example_lengths(run.dev_data), run.training.max_tokens,
                               shuffle=False)
        for _, batch in iterate_batches(run.dev_data, batcher, 0,
                                        schemes=self.model.schemes.schemes):
            batch = batch.to(self.device)
            with autocast(self.device, self.amp):
                logits, extras = self.model(batch.src, batch.tgt_in, batch.src_feats)
            nll = label_smoothed_nll(logits, batch.tgt_out, 0.0)[1]
            sums += torch.stack([nll.double(), token_matches(logits, batch.tgt_out).double()])
            tokens += batch.n_tokens
            for name, (c, t) in self.model.schemes.validation_counts(extras, batch.src_feats,
                                                                     batch.tgt_feats).items():
                acc = counts.setdefault(name, [0, 0])
                acc[0], acc[1] = acc[0] + c, acc[1] + t
        loss_sum, correct = sums.tolist()          # read once, after the last batch
        result = {"dev_nll": loss_sum / max(tokens, 1)}
        result["dev_ppl"] = math.exp(min(result["dev_nll"], 50))
        result["dev_acc"] = 100.0 * correct / max(tokens, 1)
        result.update({f"dev_{name}": 100.0 * c / t for name, (c, t) in counts.items() if t})
        if run.dev_refs:
            result["dev_bleu"] = self.bleu()
        return result

    def bleu(self) -> float:
        """Dev BLEU of the first ``--valid-max-sentences`` dev examples (0: all), split by the
        tokenizer the run records (:func:`dev_bleu_record`)."""
        run = self.run
        n = run.training.valid_max_sentences or len(run.dev_data)
        hyps = self.translator.translate_examples(run.dev_data[:n])
        refs = [run.dev_refs[e.index] for e in run.dev_data[:n]]
        if self._bleu is None:
            self._bleu = dev_bleu_metric(run.written)
        return self._bleu.corpus_score(hyps, [refs]).score

    @property
    def translator(self):
        """Decodes dev examples to detokenized text exactly as ``translate`` would, with the
        ``config.json`` the set-up wrote (``run.written``)."""
        if self._translator is None:
            from depnmt.decoding.translate import Translator
            run = self.run
            search = SearchConfig(**{**asdict(run.search), "beam": run.training.valid_beam})
            self._translator = Translator(self.model, run.written, run.src_vocab, run.tgt_vocab,
                                          None, self.device, search, amp=self.amp)
        return self._translator


def improved(progress: Progress, early_stop_metric: str, result: dict) -> bool:
    """Whether ``result`` is the best validation so far by ``--early-stop-metric`` (dev BLEU,
    dev token accuracy or dev loss; BLEU falls back to the loss without dev references), as
    ``progress`` records it (updated: the best, its step, the validations without improvement
    for ``--patience``)."""
    metric, sign = selection_metric(early_stop_metric, result)
    p = progress
    if p.best_metric != metric:      # e.g. --resume with another --early-stop-metric
        rebase(p, metric, sign)
    value = sign * result[metric]
    if p.best is None or value > p.best:
        p.best, p.best_step = value, p.step
        p.bad_validations = 0
        return True
    p.bad_validations += 1
    return False


def rebase(p: Progress, metric: str, sign: int) -> None:
    """``p``'s best and ``--patience`` count by ``metric`` (``sign``: 1, higher is better;
    -1, lower) over the validations so far, when the run selected by another metric until now
    (``--resume`` with another ``--early-stop-metric``): the best of the history by it, and
    the validations since that best (not the other metric's count). ``best.pt`` still holds
    the other metric's pick (``p.best_step``) until a validation beats the new best: a warning
    says so when they differ."""
    seen = [(sign * r[metric], r.get("step")) for r in p.history if metric in r]
    had = p.best_metric
    p.best_metric = metric
    if not seen:
        p.best, p.bad_validations = None, 0
        return
    values = [value for value, _ in seen]
    first = values.index(max(values))          # improved() takes a strictly better one only
    p.best, p.bad_validations = values[first], len(values) - 1 - first
    step = seen[first][1]
    if had is not None and p.best_step is not None and step != p.best_step:
        warn(f"best.pt holds update {p.best_step}, the best by {had}; by {metric} the best so "
             f"far is update {step}'s, and best.pt is replaced when a validation beats it")


def selection_metric(name: str, result: dict) -> tuple[str, int]:
    """The validation key ``--early-stop-metric NAME`` selects by and its sign (+1: higher is
    better): ``bleu`` -> dev_bleu (dev_nll without dev references), ``acc`` -> dev_acc,
    ``loss`` -> dev_nll."""
    if name == "bleu" and "dev_bleu" in result:
        return "dev_bleu", 1
    if name == "acc":
        return "dev_acc", 1
    return "dev_nll", -1


def token_matches(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Non-PAD target tokens whose argmax prediction is right (dev token accuracy, the metric
    Omote et al. 2019 select models by), a 0-dim int64 tensor on the logits' device.
    ``logits [B, T, V]``, ``target [B, T]``."""
    keep = target != PAD
    return ((logits.argmax(dim=-1) == target) & keep).sum()
