"""Analyses of trained models. ``awsl``: the Average Weight of Syntax Logits of a GPS model (the
GPS paper, §4.3, Eq. 7, Fig. 3).

For one sentence and one attention head of encoder layer l, with ``e_ij`` the ordinary logit
``(x_i W^Q)(x_j W^K)^T / √d`` and ``e^s_ij`` the syntax logit ``(s_i W_s^Q)(s_j W_s^K)^T / √d``
(Eq. 5's two terms, both before the softmax):

    w = 1/N² Σ_i Σ_j |e^s_ij| / (|e_ij| + |e^s_ij|)                          (Eq. 7)

over the N source tokens (subwords; EOS and padding excluded) and all N² pairs, pairs across
sentences included (their syntax term is masked to 0). ``AWSL_l`` averages w over sentences and
heads. Eq. 7 as printed has ``|e_ij|`` in the numerator, which is the weight of the *ordinary*
term (Fig. 3's blue line); its red line, AWSL, is the syntax share above. Both are reported
(``standard`` = the printed form); a pair whose two logits are both 0 counts in neither. A layer
without the syntax term has AWSL 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import torch
from torch import Tensor

from depnmt.core.errors import DepnmtError
from depnmt.core.optionspec import COUNT, Choice, File, Folder, check_options, option
from depnmt.core.vocab import EOS, PAD
from depnmt.data.batches import collate


@dataclass
class LayerWeights:
    """Sums of per-(sentence, head) weights for one encoder layer."""

    layer: int
    syntax_term: bool
    syntax_sum: float = 0.0
    standard_sum: float = 0.0
    count: int = 0                  # (sentence, head) pairs

    @property
    def awsl(self) -> float:
        return self.syntax_sum / self.count if self.count else 0.0

    @property
    def standard(self) -> float:
        return self.standard_sum / self.count if self.count else 0.0


@dataclass
class AwslSettings:
    """The options of ``depnmt analyze awsl`` (:func:`awsl`), each a field
    (:func:`~depnmt.core.optionspec.option`)."""

    model_dirs: tuple[Path, ...] = option((), "a GPS model directory (repeat to compare models, "
                                          "e.g. GPS in layer 1, 2, … as in the paper's Fig. 3)",
                                          Folder(), flag=("-m", "--model"), multiple=True,
                                          required=True)
    src_path: Path | None = option(None, "source sentences (raw text, or CoNLL-U with "
                                   "--input-format conllu)", File(exists=True),
                                   flag=("-i", "--input"), required=True)
    input_format: str = option("text", "text: raw sentences, parsed with each model's own "
                               "parser; conllu: trees", Choice(["text", "conllu"]))
    prefix: Path = option(Path("awsl"), "writes OUT.tsv (the table) and OUT.png (the plot)",
                          File(or_folder=True), flag=("-o", "--output"), metavar="OUT")
    max_sentences: int = option(0, "use the first N sentences (0 = all)", COUNT)
    checkpoint: Path | None = option(None, "checkpoint file (default: MODEL_DIR/checkpoints/"
                                     "best.pt, else last.pt; only with one model)", File(),
                                     flag=("-c", "--checkpoint"))
    device: str = option("auto", "auto, cpu, cuda or cuda:N", str)

    def __post_init__(self):
        """Each value checked as its flag is; ``--checkpoint`` with several models is a
        DepnmtError."""
        check_options(self)
        if self.checkpoint is not None and len(self.model_dirs) > 1:
            raise DepnmtError("--checkpoint applies to one model; give one -m with it")


def gps_module(model):
    """The GPS part of a model's scheme stack (DepnmtError when it has none)."""
    from depnmt.model.schemes.gps import GPSModule
    for part in model.schemes.parts:
        if isinstance(part, GPSModule):
            return part
    raise DepnmtError(f"AWSL needs a GPS model (scheme {'+'.join(model.cfg.scheme_names)} has no "
                      f"'gps' component)")


def pair_weights(e: Tensor, es: Tensor, tokens: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Eq. 7 per (sentence, head): ``e``, ``es [B, H, S, S]``, ``tokens [B, S]`` bool (the N
    tokens) -> syntax and standard weights ``[B, H]`` and which sentences have tokens ``[B]``."""
    a, s = e.abs(), es.abs()
    total = a + s
    pairs = (tokens[:, :, None] & tokens[:, None, :])[:, None] & (total > 0)   # (B, H, S, S)
    n = pairs.sum((-1, -2)).clamp(min=1)
    safe = total.clamp(min=torch.finfo(total.dtype).tiny)
    syntax = torch.where(pairs, s / safe, 0.0).sum((-1, -2)) / n
    standard = torch.where(pairs, a / safe, 0.0).sum((-1, -2)) / n
    return syntax, standard, tokens.any(-1)


@torch.no_grad()
def awsl(model, examples: Sequence, max_tokens: int = 4000) -> list[LayerWeights]:
    """AWSL of every encoder layer of a GPS ``model`` over ``examples`` (features added)."""
    gps = gps_module(model)
    model.eval()
    device = next(model.parameters()).device
    layers = [LayerWeights(n, n in gps.layers) for n in range(len(model.encoder))]
    inputs: dict[int, Tensor] = {}
    hooks = [model.encoder[n].self_attn.register_forward_pre_hook(
        lambda module, args, n=n: inputs.__setitem__(n, args[0])) for n in gps.layers]
    try:
        for batch in _batches(examples, max_tokens):
            batch = batch.to(device)
            model.encode(batch.src, batch.src_feats)
            feats = model.schemes.prepare_features("src", batch.src_feats)
            tokens = (batch.src != PAD) & (batch.src != EOS)
            for n in gps.layers:
                attn = model.encoder[n].self_attn
                q = attn.split_heads(attn.q_proj(inputs[n]))
                k = attn.split_heads(attn.k_proj(inputs[n]))
                e = (q @ k.transpose(-1, -2)) / attn.d_k ** 0.5           # Eq. 5, first term
                es = gps.syntax_logits(n, feats)                         # Eq. 5, second term
                syntax, standard, real = pair_weights(e.float(), es.float(), tokens)
                acc = layers[n]
                acc.syntax_sum += float(syntax[real].sum())
                acc.standard_sum += float(standard[real].sum())
                acc.count += int(real.sum()) * syntax.shape[1]
    finally:
        for hook in hooks:
            hook.remove()
    return layers


def _batches(examples: Sequence, max_tokens: int) -> Iterable:
    order = sorted(range(len(examples)), key=lambda i: len(examples[i].src))
    start = 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (end - start + 1) * len(examples[order[end]].src) <= max_tokens:
            end += 1
        yield collate([examples[i] for i in order[start:end]])
        start = end


def format_table(results: list[tuple[str, list[LayerWeights]]]) -> str:
    """Tab-separated: model, layer (0-based), syntax term, AWSL, standard weight, pairs."""
    rows = ["model\tlayer\tsyntax_term\tawsl\tstandard\tsentence_heads"]
    for name, layers in results:
        rows += [f"{name}\t{w.layer}\t{'yes' if w.syntax_term else 'no'}\t{w.awsl:.4f}\t"
                 f"{w.standard:.4f}\t{w.count}" for w in layers]
    return "\n".join(rows) + "\n"


def plot(results: list[tuple[str, list[LayerWeights]]], path) -> None:
    """AWSL (solid) and the standard term's weight (dashed) per encoder layer (Fig. 3), PNG."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from depnmt.core.textio import atomic_open

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    for name, layers in results:
        used = [w for w in layers if w.syntax_term]
        x = [w.layer for w in used]
        line, = ax.plot(x, [w.awsl for w in used], marker="o", label=f"{name}: syntax (AWSL)")
        ax.plot(x, [w.standard for w in used], marker="s", linestyle="--",
                color=line.get_color(), label=f"{name}: standard")
    ax.set_xlabel("encoder layer (0 = bottom)")
    ax.set_ylabel("average weight (Eq. 7)")
    ax.set_ylim(0, 1)
    ax.set_xticks(range(max(len(layers) for _, layers in results)))
    ax.set_title("Average weight of syntax logits per layer", fontsize="medium")
    ax.legend(fontsize="small")
    fig.tight_layout()
    with atomic_open(path, "wb") as fh:
        fig.savefig(fh, format="png", dpi=150)
    plt.close(fig)
