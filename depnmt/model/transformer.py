"""Transformer encoder–decoder (Vaswani et al. 2017) with post-LN sublayers,
``LayerNorm(x + Sublayer(x))`` (Omote et al. 2019 §3.1), and a pluggable positional scheme.

Shapes: ``src [B, S]`` and ``tgt_in [B, T]`` token ids (PAD = 0); ``memory [B, S, D]``;
logits ``[B, T, V_tgt]``. ``forward`` returns the logits and an
:class:`~depnmt.model.schemes.base.Extras` record (what the schemes computed besides them);
incremental decoding keeps its caches in an explicit :class:`DecoderState`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from depnmt.core.device import autocast_dtype
from depnmt.core.vocab import PAD
from depnmt.model.attention import KeyValues, MultiHeadAttention, stackable, stacked_linears
from depnmt.model.dropout import Dropout
from depnmt.model.packed import PackedWeights
from depnmt.model.schemes import Extras, ModelDims, Scheme, SchemeStack, build_schemes
from depnmt.model.schemes.base import masked_sum, positions
from depnmt.model.schemes.upgrade import upgrade_model_config


@dataclass
class ModelConfig:
    """Architecture hyper-parameters (saved as ``config.json`` in the model directory)."""

    src_vocab_size: int
    tgt_vocab_size: int
    d_model: int = 512
    n_heads: int = 8
    d_ff: int = 2048
    encoder_layers: int = 6
    decoder_layers: int = 6
    dropout: float = 0.1
    attention_dropout: float = 0.0
    tie_decoder_embeddings: bool = True   # decoder input embedding = output projection
    share_all_embeddings: bool = False    # + source embedding (needs one joint vocabulary)
    # the positional scheme's components in order, each with the options it declares
    # (``registry.scheme_entries``): [{"name": "rel", "options": {"rel_k": 2, ...}}, ...]
    schemes: list[dict[str, Any]] = field(
        default_factory=lambda: [{"name": "abs", "options": {}}])

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """From ``config.json``'s ``model`` section, old ones included (a flat options bag:
        :func:`~depnmt.model.schemes.registry.upgrade_model_config`)."""
        d = upgrade_model_config(d)
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})

    @property
    def scheme_names(self) -> list[str]:
        return [s["name"] for s in self.schemes]

    @property
    def dims(self) -> ModelDims:
        return ModelDims(self.d_model, self.n_heads, self.encoder_layers, self.decoder_layers)


class FeedForward(nn.Sequential):
    """FFN(x) = max(0, x W1 + b1) W2 + b2."""

    def __init__(self, d_model: int, d_ff: int, dropout: float):
        super().__init__(nn.Linear(d_model, d_ff), nn.ReLU(), Dropout(dropout),
                         nn.Linear(d_ff, d_model))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.norm1, self.norm2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.drop = Dropout(cfg.dropout)

    def forward(self, x: Tensor, mask: Tensor, terms,
                scores: dict[str, Tensor] | None = None) -> Tensor:
        x = self.norm1(x + self.drop(self.self_attn(x, x, mask, terms, scores=scores)))
        return self.norm2(x + self.drop(self.ffn(x)))


def cached(kv: Tensor, dtype: torch.dtype | None) -> Tensor:
    """Keys or values ``[N, H, T, d_k]`` as a cache in ``dtype`` keeps them: contiguous (the
    heads' split is a strided view, which every ``q @ k^T`` would otherwise copy) in that dtype;
    ``dtype`` None: as they are."""
    return kv if dtype is None else kv.to(dtype).contiguous()


@dataclass
class LayerCache:
    """One decoder layer's incremental-decoding cache: self-attention keys/values
    ``[N, H, T, d_k]`` and those of heads that schemes compute themselves, by head index."""

    dtype: torch.dtype | None = None      # of the self-attention keys/values (None: as computed)
    self_attn: KeyValues | None = None
    heads: dict[int, KeyValues] = field(default_factory=dict)
    # the self-attention's fused W^Q/W^K/W^V (MultiHeadAttention.fused_qkv); None: three
    qkv: PackedWeights | None = None

    def select(self, index: Tensor) -> "LayerCache":
        """Rows (hypotheses) ``index`` of every tensor."""
        return LayerCache(self.dtype,
                          None if self.self_attn is None else self.self_attn.select(index),
                          {h: kv.select(index) for h, kv in self.heads.items()}, self.qkv)


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.self_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.cross_attn = MultiHeadAttention(cfg.d_model, cfg.n_heads, cfg.attention_dropout)
        self.ffn = FeedForward(cfg.d_model, cfg.d_ff, cfg.dropout)
        self.norm1, self.norm2, self.norm3 = (nn.LayerNorm(cfg.d_model) for _ in range(3))
        self.drop = Dropout(cfg.dropout)

    def forward(self, x: Tensor, self_mask: Tensor | None, terms, memory_kv: tuple[Tensor, Tensor],
                src_mask: Tensor, cache: LayerCache | None,
                scores: dict[str, Tensor] | None = None) -> Tensor:
        """Without ``cache`` (the whole prefix at once) ``self_mask`` is the causal mask
        ``[T, T]``: no key is padding-masked, since a target's padding follows it and only its
        own (padding) rows, which the loss ignores, see it."""
        if cache is None:
            h = self.self_attn(x, x, self_mask, terms, scores=scores, causal=True)
        else:  # incremental: append this step's keys/values to the cache (in its dtype)
            if cache.qkv is None:
                q, (k, v) = None, self.self_attn.project_kv(x)
            else:
                q, k, v = self.self_attn.project_qkv(x, cache.qkv)
            k, v = cached(k, cache.dtype), cached(v, cache.dtype)
            kv = KeyValues(k, v) if cache.self_attn is None else cache.self_attn.extend(k, v)
            cache.self_attn = kv
            h = self.self_attn(x, x, self_mask, terms, cached_kv=(kv.k, kv.v),
                               head_cache=cache.heads, scores=scores, q=q)
        x = self.norm1(x + self.drop(h))
        x = self.norm2(x + self.drop(self.cross_attn(x, mask=src_mask, cached_kv=memory_kv)))
        return self.norm3(x + self.drop(self.ffn(x)))


class DecoderState:
    """Incremental-decoding state: per-layer self-attention caches and cross-attention keys.

    Rows (dim 0) are hypotheses. The source side (``memory_kv`` ``[N, H, S, d_k]``, ``src_mask``
    ``[N, 1, 1, S]``) is read-only after :meth:`TransformerNMT.start_state`: no per-source
    feature is kept, since decoding reads none after the encoder has run. ``dtype``: that of
    every cached key and value, cross-attention's included (None: as the projections give them);
    each attention runs in it (:meth:`~depnmt.model.attention.MultiHeadAttention.forward`).
    """

    def __init__(self, memory_kv: list[tuple[Tensor, Tensor]], src_mask: Tensor,
                 dtype: torch.dtype | None = None,
                 fused_qkv: list[PackedWeights] | None = None):
        self.memory_kv = [(cached(k, dtype), cached(v, dtype)) for k, v in memory_kv]
        self.src_mask = src_mask
        self.caches = [LayerCache(dtype, qkv=qkv)
                       for qkv in fused_qkv or [None] * len(memory_kv)]
        self.length = 0

    def reorder(self, index: Tensor) -> None:
        """Keep hypotheses ``index`` (rows of every tensor, source side included)."""
        self.memory_kv = [(k.index_select(0, index), v.index_select(0, index))
                          for k, v in self.memory_kv]
        self.src_mask = self.src_mask.index_select(0, index)
        self.reorder_targets(index)

    def reorder_targets(self, index: Tensor) -> None:
        """Keep hypotheses ``index`` of the target-side caches only: for a beam step whose
        ``index`` maps every row to a row of the same source sentence (equal source rows)."""
        self.caches = [c.select(index) for c in self.caches]


class TransformerNMT(nn.Module):
    """Encoder–decoder Transformer; ``forward`` returns logits and extras for teacher forcing."""

    def __init__(self, cfg: ModelConfig, schemes: list[Scheme] | None = None):
        """``schemes``: those of ``cfg.schemes`` when already built (a training run builds
        them once, for its checks and its learn step); None: built here."""
        super().__init__()
        self.cfg = cfg
        self.scale = math.sqrt(cfg.d_model)
        self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model, padding_idx=PAD)
        if cfg.share_all_embeddings:
            if cfg.src_vocab_size != cfg.tgt_vocab_size:
                raise ValueError("share_all_embeddings needs one joint vocabulary")
            self.tgt_embed = self.src_embed
        else:
            self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model, padding_idx=PAD)
        self.schemes = SchemeStack(build_schemes(cfg.schemes) if schemes is None else schemes,
                                   cfg.dims)                             # the one stack
        self.encoder = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.encoder_layers))
        self.decoder = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.decoder_layers))
        self.drop = Dropout(cfg.dropout)
        self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        self._reset_parameters()
        self.tie_embeddings()

    def tie_embeddings(self) -> None:
        """Make the output projection the target embedding (one tensor) when the config ties
        them."""
        if self.cfg.tie_decoder_embeddings or self.cfg.share_all_embeddings:
            self.output.weight = self.tgt_embed.weight

    def assign_state(self, state: dict[str, Tensor]) -> None:
        """Take a state dict's tensors as the parameters, without copying them (a loaded
        checkpoint's), ties made again: ``load_state_dict(assign=True)`` gives each name its
        own tensor."""
        self.load_state_dict(state, assign=True)
        self.tie_embeddings()

    def _reset_parameters(self) -> None:
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name and "schemes" not in name:
                nn.init.xavier_uniform_(p)
        for emb in (self.src_embed, self.tgt_embed):
            nn.init.normal_(emb.weight, 0.0, self.cfg.d_model ** -0.5)
            with torch.no_grad():
                emb.weight[PAD].zero_()

    # -- encoder ---------------------------------------------------------------------------
    def encode(self, src: Tensor, src_feats: dict[str, Tensor],
               extras: Extras | None = None) -> tuple[Tensor, Tensor]:
        """``src [B, S]`` -> ``memory [B, S, D]`` and ``src_mask [B, 1, 1, S]`` (True = token);
        the schemes' scores go to ``extras`` when given."""
        src_mask = (src != PAD)[:, None, None, :]
        pos = positions(src.shape[1], device=src.device)
        feats = self.schemes.prepare_features("src", src_feats)
        scores = None if extras is None else extras.scores
        x = self.drop(self.schemes.embed(self.src_embed(src) * self.scale, "src", pos, feats))
        for i, layer in enumerate(self.encoder):
            x = layer(x, src_mask, self.schemes.attention_terms("src", i, feats, pos, pos), scores)
        return x, src_mask

    # -- decoder ---------------------------------------------------------------------------
    def start_state(self, memory: Tensor, src_mask: Tensor,
                    dtype: torch.dtype | None = None) -> DecoderState:
        """A state for incremental decoding with cross-attention keys and values computed once
        per source (``memory [B, S, D]``), cached in ``dtype`` (None: as computed;
        :func:`decoding_dtype` for a search). With a ``dtype`` each step projects the
        self-attention's queries, keys and values by one matrix multiply (weights stacked here
        once, in autocast's dtype when it is on)."""
        kv = self.cross_kv(memory)
        if dtype is None:
            return DecoderState(kv, src_mask)
        weights = autocast_dtype(memory.device.type)
        fused = [layer.self_attn.fused_qkv(weights) for layer in self.decoder]
        return DecoderState(kv, src_mask, dtype, fused)

    def search_state(self, src: Tensor, src_feats: dict[str, Tensor],
                     extras: Extras | None = None) -> DecoderState:
        """The state a search starts from: ``src [B, S]`` encoded (:meth:`encode`) and its
        cross-attention keys and values cached in :func:`decoding_dtype`."""
        memory, src_mask = self.encode(src, src_feats, extras)
        return self.start_state(memory, src_mask, decoding_dtype(memory))

    def cross_kv(self, memory: Tensor) -> list[tuple[Tensor, Tensor]]:
        """Every decoder layer's cross-attention keys and values ``[B, H, S, d_k]`` of
        ``memory [B, S, D]``, by one matrix multiply with all their ``W^K``, ``W^V`` stacked
        ``[2 · layers · D, D]`` (each output the dot product of its own projection)."""
        linears = tuple(lin for layer in self.decoder
                        for lin in (layer.cross_attn.k_proj, layer.cross_attn.v_proj))
        if not stackable(linears):                      # e.g. int8 layers (quantize.py)
            return [layer.cross_attn.project_kv(memory) for layer in self.decoder]
        weight, bias = stacked_linears(linears, None)
        split = self.decoder[0].cross_attn.split_heads          # every layer's H and d_k
        heads = [split(t) for t in F.linear(memory, weight, bias).chunk(len(linears), dim=-1)]
        return list(zip(heads[::2], heads[1::2]))

    def decode(self, tgt_in: Tensor, state: DecoderState, incremental: bool = False,
               extras: Extras | None = None) -> Tensor:
        """Logits ``[B, T, V]`` for ``tgt_in [B, T]``; the schemes' scores go to ``extras`` when
        given.

        With ``incremental``, ``tgt_in`` holds only the next position(s) and the self-attention
        caches in ``state`` grow; otherwise the whole prefix is decoded with a causal mask.
        """
        t = tgt_in.shape[1]
        offset = state.length if incremental else 0
        q_pos = positions(t, offset, tgt_in.device)
        k_pos = positions(offset + t, 0, tgt_in.device)
        causal = (None if incremental and t == 1 else    # one new position sees all so far
                  torch.ones(t, offset + t, dtype=torch.bool, device=tgt_in.device).tril(offset))
        feats = self.schemes.prepare_features("tgt", {})
        scores = None if extras is None else extras.scores
        x = self.drop(self.schemes.embed(self.tgt_embed(tgt_in) * self.scale, "tgt", q_pos, feats))
        for i, layer in enumerate(self.decoder):
            terms = self.schemes.attention_terms("tgt", i, feats, q_pos, k_pos)
            x = layer(x, causal, terms, state.memory_kv[i], state.src_mask,
                      state.caches[i] if incremental else None, scores)
        if incremental:
            state.length += t
        return self.output(x)

    def forward(self, src: Tensor, tgt_in: Tensor, src_feats: dict[str, Tensor],
                tgt_feats: dict[str, Tensor] | None = None) -> tuple[Tensor, Extras]:
        """Teacher forcing: logits ``[B, T, V]`` and the pass's :class:`Extras`; given the target
        features (training), the schemes' auxiliary losses are in ``extras.losses``."""
        extras = Extras()
        memory, src_mask = self.encode(src, src_feats, extras)
        logits = self.decode(tgt_in, self.start_state(memory, src_mask), extras=extras)
        if tgt_feats is not None:
            extras.losses = self.schemes.auxiliary_losses(extras, src_feats, tgt_feats)
        return logits, extras


def decoding_dtype(memory: Tensor) -> torch.dtype | None:
    """The dtype a search caches keys/values in, given the encoder's output ``memory``: float32
    on the CPU, where one query's attention over cached keys is about 1.6x faster in fp32 than
    in bf16 (the matrix multiplies around it stay under autocast); elsewhere None (as
    computed)."""
    return torch.float32 if memory.device.type == "cpu" else None


def label_smoothed_nll(logits: Tensor, target: Tensor, epsilon: float) -> tuple[Tensor, Tensor]:
    """Summed label-smoothed cross-entropy (Szegedy et al. 2016) and summed NLL over non-PAD
    targets. ``logits [B, T, V]``, ``target [B, T]``. PAD positions are zeroed, not selected
    (boolean indexing would wait for the device to count them)."""
    lprobs = F.log_softmax(logits.float(), dim=-1)
    keep = target != PAD
    nll = -lprobs.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = -lprobs.mean(dim=-1)
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    return masked_sum(loss, keep), masked_sum(nll, keep)
