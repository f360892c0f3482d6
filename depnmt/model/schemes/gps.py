"""``gps`` — global positional encoding for dependency trees ("GPS", the paper *Global
positional encoding for dependency trees*, §3.2–3.3).

**Syntactic position.** A word's position on the tree is its *root path*: the dependency labels
on the path from the root down to it, both ends included — the root's own label first, the
word's own label last (Fig. 1: ``school`` is ``[root, obl]``, ``John`` ``[root, conj, cc]``). The
labels become ids and an LSTM over their embeddings turns the path into a vector (§3.2):

    s_i = LSTM(p_i),   p_i = {label_0, …, label_n}

**Syntax term** (§3.3). The chosen encoder layers add a decoupled syntax term to the attention
logits of every head h (keys and queries of that head's ``d_k`` slice):

    ê_ij = (x_i W^Q)(x_j W^K)^T / √d  +  (s_i W_s^Q)(s_j W_s^K)^T / √d        (Eq. 5)
    x_i  = w_i + p_i                                                           (Eq. 6)

``d`` is the head dimension ``d_k``, the scaling of the first term. The first term and Eq. 6 are
the ordinary attention and embeddings (keep ``abs`` in the scheme for p_i); the second term is
handed to attention as its factors, ``s_i W_s^Q / √d`` and ``s_j W_s^K`` per head with each
word's sentence (:class:`~depnmt.model.attention.LowRankLogits`): the CPU adds it as a logit
bias ``[B, H, S, S]``, a GPU as extra head dimensions of one fused attention kernel
(:mod:`depnmt.model.attention`), which needs the number of sentences on a line of the batch,
``gps_sentences`` (found on the host by :meth:`GPS.batch_features`; without it, the bias).
``W_s^Q``, ``W_s^K`` are per
layer; the label embeddings and the LSTM are shared by all layers (s_i is one embedding).

**Rules** (where the paper is silent):

* *Layers* — ``--gps-layer`` lists encoder layers counted from 1 (1 = the bottom layer, the
  paper's best and our default; the paper's Table 3 counts from 0, so its layer 0 is our 1),
  ``all`` for every layer, or e.g. ``1,2,3``. The 0.1.0 option ``--gps-layers`` (0-based) still
  works, with a warning, and a model saved with ``gps_layers`` loads as it was.
* *Label vocabulary* — built from the training trees when ``train`` loads them
  (:meth:`GPS.learn_options`) and stored as ``gps_labels`` in the model config's scheme options
  (``config.json``), so translate maps a new sentence's labels the same way. Id 0 is padding (no
  label), id 1 ``<unk>`` (a label never seen in training), then the labels by decreasing
  training frequency. A root's label is always ``root``, whatever the parser called it.
* *Several sentences on one line* — the parse stage joins them into one tree (later roots attach
  to the first with ``parataxis``; ``Sentence.sent_ids`` keeps each word's sentence). GPS undoes
  that (:func:`depnmt.core.trees.sentence_heads`): each sentence's paths start at its own root, and
  a
  pair of words from different sentences gets no syntax term (the mask of §3.3, Eq. 5).
* *Subwords* take their word's path; EOS and padding have no path and no syntax term (their
  rows and columns of the bias are 0).
* *One LSTM call per batch* — the paths of a batch are deduplicated (``torch.unique`` over the
  padded label rows, cut to the longest path), each distinct path is encoded once and the
  results are gathered back. The deduplication runs on the host when the batch is collated
  (:meth:`GPS.batch_features`: ``gps_unique [U, L]``, ``gps_inverse [B, S]``), since its sizes
  depend on the data: on the device the step would wait for the GPU to read them back. A batch
  collated without the model's schemes is deduplicated on the device, with the same result.
* *Precision* — the LSTM runs under the autocast (bf16/fp16) on a GPU and on a CPU with native
  bf16, in fp32 on every other CPU (:meth:`PathEncoder.run_lstm`: oneDNN has no bf16 LSTM on
  an AVX2-only CPU); its output is in the autocast dtype either way.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import torch
from torch import Tensor, nn

from depnmt.core.conllu import sentence_error
from depnmt.core.device import autocast_dtype, cpu_has_native_bf16
from depnmt.core.errors import DepnmtError
from depnmt.core.layerlists import check_layer_list, parse_layers
from depnmt.core.subwords import word_index
from depnmt.core.trees import root_paths, sentence_heads
from depnmt.core.wordtable import WordTable, counts_by_name
from depnmt.model.attention import AttentionTerms, LowRankLogits
from depnmt.model.schemes.base import ModelDims, Scheme, SchemeModule
from depnmt.model.schemes.options import FloatRange, IntRange, learned, option
from depnmt.model.schemes.registry import register

PAD_LABEL, UNK_LABEL, ROOT_LABEL = 0, 1, "root"
SPECIAL_LABELS = ("<pad>", "<unk>")


# -- paths ------------------------------------------------------------------------------------

def label_paths(heads: list[int], deprels: list[str],
                sent_ids: list[int] | None = None) -> list[list[str]]:
    """Every word's root path as labels, root first (``[root, obl]``); several sentences on one
    line restart at their own roots (see the module docstring)."""
    forest = sentence_heads(heads, sent_ids)
    label = [ROOT_LABEL if h == 0 else rel for h, rel in zip(forest, deprels)]
    return [[label[n] for n in path] for path in root_paths(forest)]


def label_ids(labels: list[str]) -> dict[str, int]:
    """The id of every label of the vocabulary ``labels`` (ids 0, 1 are padding and ``<unk>``)."""
    return {label: i + len(SPECIAL_LABELS) for i, label in enumerate(labels)}


def example_paths(example: Any, ids: dict[str, int], length: int) -> tuple[Tensor, Tensor]:
    """``(paths [length, length], sentence [length])`` of one example with ``length`` source ids
    (the subwords kept, then EOS): row t holds subword t's path as label ids (0-padded), EOS
    and padding rows are empty; ``sentence`` is the parser sentence + 1 (0 = no syntax term)."""
    tree = example.src_tree
    words = label_paths(list(tree.heads), list(tree.deprels), tree.sent_ids)
    sentence = tree.sent_ids or [0] * len(words)
    of_word = word_index(list(example.src_subwords))
    if len(set(of_word)) != len(words) or (of_word and max(of_word) >= len(words)):
        raise sentence_error(tree, example.index + 1, f"{len(set(of_word))} words in the "
                                                      f"subwords but {len(words)} in the tree")
    small = len(ids) + len(SPECIAL_LABELS) <= 256
    # each word's path as ids, at most ``length`` labels (the last: a truncated input), 0-padded
    rows = [[ids.get(label, UNK_LABEL) for label in path[-length:]] for path in words]
    depth = max(map(len, rows), default=0)
    table = np.array([row + [PAD_LABEL] * (depth - len(row)) for row in rows],
                     dtype=np.uint8 if small else np.int16).reshape(len(rows), depth)
    kept = np.asarray(of_word[: length - 1], dtype=np.int64)            # subword t -> word
    paths = torch.zeros(length, length, dtype=torch.uint8 if small else torch.int16)
    paths[: len(kept), :depth] = torch.from_numpy(table[kept])
    sent = torch.zeros(length, dtype=torch.int16)
    sent[: len(kept)] = torch.from_numpy(np.asarray(sentence, dtype=np.int16)[kept] + 1)
    return paths, sent


def unique_paths(paths: Tensor) -> tuple[Tensor, Tensor]:
    """The distinct paths of a batch, ``paths [B, S, S]`` -> ``(unique [U, L], inverse [B, S])``
    with ``unique[inverse] == paths[..., :L]``: ``L`` the longest path (at least 1), the rows
    sorted (``torch.unique``; the empty path first), ``unique`` of ``paths``' dtype, ``inverse``
    int64. Both sizes depend on the data: reading them on a GPU waits for it."""
    b, s, _ = paths.shape
    longest = max(int((paths != PAD_LABEL).sum(-1).max()), 1) if paths.numel() else 1
    if paths.device.type == "cpu" and b * s:
        return _unique_rows(paths[..., :longest].reshape(b * s, longest).numpy(), b, s)
    rows = paths[..., :longest].reshape(b * s, longest).long()
    unique, inverse = torch.unique(rows, dim=0, return_inverse=True)   # (U, L), (B·S,)
    return unique.to(paths.dtype), inverse.view(b, s)


def _unique_rows(rows: np.ndarray, b: int, s: int) -> tuple[Tensor, Tensor]:
    """:func:`unique_paths` on the host, 6x faster than ``torch.unique(dim=0)`` there: each
    row of non-negative ids as one big-endian byte string, whose byte order is the rows'
    lexicographic order, so ``np.unique`` of those strings sorts and numbers the rows as
    ``torch.unique`` does."""
    big = np.ascontiguousarray(rows, dtype=rows.dtype.newbyteorder(">"))
    keys = big.view(np.dtype((np.void, big.itemsize * big.shape[1]))).ravel()
    unique, inverse = np.unique(keys, return_inverse=True)
    table = np.frombuffer(unique.tobytes(), dtype=big.dtype).reshape(-1, big.shape[1])
    return (torch.from_numpy(table.astype(rows.dtype)),
            torch.from_numpy(inverse.astype(np.int64).reshape(b, s)))


# -- module -----------------------------------------------------------------------------------

class PathEncoder(nn.Module):
    """``s_i = LSTM(p_i)`` (§3.2): label embeddings, one LSTM layer, its last state; dropout
    ``p`` on the label embeddings and on ``s_i`` in training (§4.1 gives the path encoder's rate
    — 0.1 on WMT16/17, 0.3 on NC11, the Transformer's — but not where it applies)."""

    def __init__(self, n_labels: int, dim: int, p: float = 0.0):
        super().__init__()
        self.embed = nn.Embedding(n_labels, dim, padding_idx=PAD_LABEL)
        self.lstm = nn.LSTM(dim, dim, batch_first=True)
        self.dropout = nn.Dropout(p)

    def forward(self, paths: Tensor) -> Tensor:
        """``paths [N, L]`` label ids (root first, 0-padded at the end) -> ``[N, dim]`` (an
        empty path gives the zero vector). A unidirectional LSTM's output at a path's last label
        does not depend on the padding after it, so no packing is needed."""
        lengths = (paths != PAD_LABEL).sum(-1)                     # (N,)
        out = self.run_lstm(self.dropout(self.embed(paths)))       # (N, L, dim)
        rows = torch.arange(paths.shape[0], device=paths.device)
        last = self.dropout(out[rows, (lengths - 1).clamp(min=0)])
        return last * (lengths > 0).unsqueeze(-1).to(last.dtype)

    def run_lstm(self, x: Tensor) -> Tensor:
        """The LSTM's outputs ``[N, L, dim]`` for its inputs ``x [N, L, dim]``, in the autocast
        dtype when autocast is on. Under a CPU autocast, but for bf16 on a CPU with native bf16
        (:func:`depnmt.core.device.cpu_has_native_bf16`), the LSTM runs in fp32 with autocast off:
        oneDNN below AVX512_CORE has no bf16 LSTM (torch raises "could not create a primitive
        descriptor"), and where it emulates bf16 that is slower than fp32 (why ``--precision
        auto`` trains in fp32 on such CPUs). Elsewhere the LSTM runs under the autocast as it
        is: cuDNN's bf16/fp16 LSTM is fast, and a CPU with AVX512-BF16 or AMX runs oneDNN's
        bf16 LSTM natively; both spare the cost of fp32, small (one call per batch, over its
        distinct paths) but not nothing at a GPU's 25,000-token batches."""
        amp = autocast_dtype("cpu") if x.device.type == "cpu" else None
        if amp is None or amp == torch.bfloat16 and cpu_has_native_bf16():
            return self.lstm(x)[0]
        with torch.autocast("cpu", enabled=False):
            out, _ = self.lstm(x.float())
        return out.to(amp)

    def encode_unique(self, unique: Tensor, inverse: Tensor) -> Tensor:
        """``s [B, S, dim]`` of a batch's distinct paths ``unique [U, L]`` and ``inverse [B, S]``
        (:func:`unique_paths`): each distinct path is encoded once."""
        return self(unique.long())[inverse]


class GPSModule(SchemeModule):
    """Path encoder + per-layer ``W_s^Q``, ``W_s^K``; the syntax term of Eq. 5 as a logit bias."""

    def __init__(self, dims: ModelDims, n_labels: int, dim: int, layers: list[int],
                 dropout: float = 0.0):
        super().__init__()
        self.n_heads, self.d_k, self.layers = dims.n_heads, dims.d_k, layers
        self.paths = PathEncoder(n_labels, dim, dropout)
        self.query = nn.ModuleDict({str(layer): nn.Linear(dim, dims.d_model, bias=False)
                                    for layer in layers})
        self.key = nn.ModuleDict({str(layer): nn.Linear(dim, dims.d_model, bias=False)
                                  for layer in layers})

    def prepare_features(self, side: str, feats: dict[str, Tensor]) -> dict[str, Tensor]:
        """``gps_s [B, S, dim]``: the path embeddings ``s_i`` of a batch, computed once per
        encode and shared by the layers, from its distinct paths (:meth:`GPS.batch_features`;
        found on the device when the batch was collated without them)."""
        if side != "src":
            return {}
        if "gps_unique" in feats:
            unique, inverse = feats["gps_unique"], feats["gps_inverse"]
        else:
            unique, inverse = unique_paths(feats["gps_paths"])       # waits for a GPU
        return {"gps_s": self.paths.encode_unique(unique, inverse)}

    def syntax_term(self, layer: int, feats: dict[str, Tensor]) -> LowRankLogits:
        """Eq. 5's second term ``(s_i W_s^Q)(s_j W_s^K)^T / √d_k`` per head as its factors
        ``[B, H, S, d_k]``, within each word's sentence (0 for pairs across sentences and for
        EOS/padding); ``feats`` are the prepared features (with ``gps_s``,
        :meth:`prepare_features`, and ``gps_sentences`` where the batch has it)."""
        s = feats["gps_s"]
        b, n, _ = s.shape
        q = self.query[str(layer)](s).view(b, n, self.n_heads, self.d_k).transpose(1, 2)
        k = self.key[str(layer)](s).view(b, n, self.n_heads, self.d_k).transpose(1, 2)
        q = q / math.sqrt(self.d_k)            # scaled before the product (fp16: no overflow)
        sent = feats["gps_sentence"]                                            # (B, S)
        count = feats["gps_sentences"].shape[0] if "gps_sentences" in feats else None
        return LowRankLogits(q, k, sent, sent, count)

    def syntax_logits(self, layer: int, feats: dict[str, Tensor]) -> Tensor:
        """:meth:`syntax_term` as the logit bias ``[B, H, S, S]``."""
        return self.syntax_term(layer, feats).dense()

    def attention_terms(self, side: str, layer: int, feats: dict[str, Tensor], q_pos: Tensor,
                        k_pos: Tensor) -> AttentionTerms | None:
        if side != "src" or layer not in self.layers:
            return None
        return AttentionTerms([], low_rank=[self.syntax_term(layer, feats)])


# -- scheme -----------------------------------------------------------------------------------

@dataclass
class GPSOptions:
    gps_layer: str = option("1", "gps: encoder layers with the syntax term, counted from 1 "
                            "(1 = bottom; the GPS paper's Table 3 layer 0): e.g. 1, 1,2,3 or all",
                            check=check_layer_list)
    gps_dim: int | None = option(None, "gps: size of the label embeddings and of the path LSTM "
                                 "[default: d_model]", IntRange(min=1))
    gps_dropout: float = option(0.0, "gps: dropout of the path encoder, on the label embeddings "
                                "and on s_i (the paper: 0.1 on WMT16/17, 0.3 on NC11, as its "
                                "Transformer's --dropout; 0 = none, as before)",
                                FloatRange(0.0, 1.0, max_open=True))
    gps_labels: list[str] | None = learned("the dependency labels of the training trees' root "
                                           "paths, most frequent first")


@register
class GPS(Scheme):
    name = "gps"
    help = "GPS: root paths of labels through an LSTM, a syntax term in the logits (Eq. 5)"
    needs_source_trees = True
    Options = GPSOptions

    def labels(self) -> list[str]:
        labels = self.option("gps_labels")
        if not labels:
            raise DepnmtError("scheme 'gps' has no label vocabulary: it is learned from the "
                              "training trees by `depnmt train` (option gps_labels)")
        return list(labels)

    def learn_options(self, trees: Iterable[WordTable]) -> dict[str, Any]:
        """``gps_labels``: the labels of the training trees' root paths (a sentence's root:
        ``root``), most frequent first."""
        if self.option("gps_labels"):
            return {}
        counts: Counter = Counter()
        for table in trees:
            labels = np.where(table.forest_heads() == 0, len(table.rels), table.rel)
            counts.update(counts_by_name(labels, table.rels + [ROOT_LABEL]))
        if not counts:
            raise DepnmtError("scheme 'gps': the training trees hold no dependency labels")
        return {"gps_labels": sorted(counts, key=lambda label: (-counts[label], label))}

    def source_features(self, example: Any) -> dict[str, Tensor]:
        self.source_tree(example)
        if getattr(self, "_ids", None) is None:
            self._ids = label_ids(self.labels())
        paths, sentence = example_paths(example, self._ids, len(example.src))
        return {"gps_paths": paths, "gps_sentence": sentence}

    def batch_features(self, feats: dict[str, Tensor]) -> dict[str, Tensor]:
        """``feats`` with the batch's distinct paths, ``gps_unique [U, L]`` and ``gps_inverse
        [B, S]`` (:func:`unique_paths`), and ``gps_sentences [N]``, the sentence numbers
        ``1 … N`` of its lines (N: the most sentences on one line), computed on the host."""
        if "gps_paths" not in feats:
            return feats
        unique, inverse = unique_paths(feats["gps_paths"])
        sentence = feats["gps_sentence"]
        most = int(sentence.max()) if sentence.numel() else 0
        return {**feats, "gps_unique": unique, "gps_inverse": inverse,
                "gps_sentences": torch.arange(1, most + 1, dtype=torch.int16)}

    def check(self, dims: ModelDims) -> None:
        parse_layers(self.option("gps_layer"), dims.encoder_layers, "--gps-layer")

    def build(self, dims: ModelDims) -> SchemeModule:
        return GPSModule(dims, len(self.labels()) + len(SPECIAL_LABELS),
                         self.option("gps_dim") or dims.d_model,
                         parse_layers(self.option("gps_layer"), dims.encoder_layers),
                         self.option("gps_dropout"))
