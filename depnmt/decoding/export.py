"""Export a trained model to CTranslate2 (``depnmt export --format ctranslate2``).

The checkpoint's weights fill CTranslate2's ``TransformerSpec`` the way its own OpenNMT-py and
fairseq converters do (``ctranslate2/converters/opennmt_py.py``, ``fairseq.py``):

* **post-LN** layers (``pre_norm=False``: ``LayerNorm(x + Sublayer(x))``, no final norm), each
  sublayer's norm stored with that sublayer (encoder ``norm1`` → self-attention, ``norm2`` → FFN;
  decoder ``norm1``/``norm2``/``norm3`` → self-attention/cross-attention/FFN), ε = 1e-5 (torch's);
* self-attention Q, K, V fused into one linear, cross-attention K, V fused (CTranslate2's layout);
* embeddings multiplied by √d_model (``scale_embeddings``, as depnmt does), the output projection
  is the (tied) target embedding, no bias;
* positions: depnmt's own sinusoidal table (``abs``; interleaved sin/cos, position 0 first — not
  CTranslate2's built-in table, which differs), a zero table (``none``), or Shaw's relative
  key/value tables (``rel``: CTranslate2's ``relative_position_keys`` / ``_values`` hold the
  labels clip(j − i, k) + k, which are depnmt's labels without its always-zero row 0);
* vocabularies in depnmt's order (``<pad>`` 0, ``<unk>`` 1, ``<s>`` 2, ``</s>`` 3 — the tokens
  CTranslate2 uses for unknown, start and end), ``</s>`` appended to every source
  (``add_source_eos``) as depnmt does, decoding starts from ``<s>``.

**What CTranslate2 cannot represent.** Tree schemes (their terms depend on a parse of each
sentence) and ``abs+rel``: CTranslate2 adds no absolute position encoding
to a decoder whose self-attention has relative positions (``src/layers/transformer.cc`` builds no
position encoder when the first layer has them; OpenNMT-py's ``max_relative_positions`` likewise
excludes ``position_encoding``), so the model would change. Shaw's ``rel`` alone (``noabs+rel``)
exports exactly.

The exported folder is usable alone: the CTranslate2 model (``model.bin``, its ``config.json`` and
vocabularies), depnmt's vocabularies, the BPE codes (``bpe.json``), and ``depnmt-export.json``
with the tokenizer settings and search defaults that :mod:`depnmt.decoding.ct2translate` reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from depnmt.core.errors import DepnmtError
from depnmt.core.optionspec import Choice, File, Folder, check_options, option
from depnmt.core.stagedir import check_distinct, stage_output
from depnmt.core.textio import atomic_open, naming
from depnmt.version import __version__

EXPORT_CONFIG = "depnmt-export.json"
EXPORT_FORMAT = 1
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16", "float16",
                 "bfloat16", "float32")
LAYER_NORM_EPS = 1e-5                    # torch.nn.LayerNorm's default, used by depnmt
MIN_POSITIONS = 1024                     # rows of the exported position table (at least)


def import_ctranslate2():
    """The ``ctranslate2`` module, or a clear error naming the optional extra."""
    try:
        import ctranslate2
    except ImportError:
        raise DepnmtError("CTranslate2 is not installed: `pip install depnmt[ct2]` (or "
                          "`pip install ctranslate2`)") from None
    return ctranslate2


def position_kind(model_dir: Path, model: dict[str, Any]) -> str:
    """``abs``, ``rel`` or ``none``: how the model's scheme maps onto CTranslate2, or an error
    naming the scheme when it cannot."""
    from depnmt.core.schemename import scheme_name
    from depnmt.model.schemes.relative import Shaw, term_set
    names = [s["name"] for s in model["schemes"]]
    rel_used = any(s["name"] == "rel" and term_set(Shaw(**s["options"]).option("rel_terms"))
                   for s in model["schemes"])
    others = [n for n in names if n not in ("abs", "rel", "none")]
    spec = scheme_name(model["schemes"])          # e.g. abs+dep
    if others:
        raise DepnmtError(f"{model_dir}: scheme {spec} cannot be represented in CTranslate2 "
                          f"({', '.join(others)} adds terms computed from each sentence's tree "
                          f"or learned parse, which CTranslate2 has no place for; schemes it "
                          f"can run: abs, noabs+rel, noabs)")
    if rel_used and "abs" in names:
        raise DepnmtError(f"{model_dir}: scheme {spec} cannot be represented in CTranslate2 "
                          f"(it adds no absolute position encoding to a decoder with relative "
                          f"positions, so the model would change; train --scheme noabs+rel, Shaw's "
                          f"relative positions alone, to export a relative model)")
    return "rel" if rel_used else ("abs" if "abs" in names else "none")


# -- weights ----------------------------------------------------------------------------------

def _array(tensor):
    return tensor.detach().float().cpu().numpy()


def _set_linear(spec, weights: dict, *names: str) -> None:
    """``spec`` = the linear ``names[0]``, or the row-wise concatenation of several (fused)."""
    import numpy as np
    spec.weight = np.concatenate([_array(weights[f"{n}.weight"]) for n in names])
    spec.bias = np.concatenate([_array(weights[f"{n}.bias"]) for n in names])


def _set_norm(spec, weights: dict, name: str) -> None:
    spec.gamma, spec.beta = _array(weights[f"{name}.weight"]), _array(weights[f"{name}.bias"])


def _set_attention(spec, weights: dict, name: str, self_attention: bool, norm: str) -> None:
    if self_attention:                                     # [W_Q; W_K; W_V]
        _set_linear(spec.linear[0], weights, f"{name}.q_proj", f"{name}.k_proj", f"{name}.v_proj")
    else:                                                  # W_Q, then [W_K; W_V]
        _set_linear(spec.linear[0], weights, f"{name}.q_proj")
        _set_linear(spec.linear[1], weights, f"{name}.k_proj", f"{name}.v_proj")
    _set_linear(spec.linear[-1], weights, f"{name}.out_proj")
    _set_norm(spec.layer_norm, weights, norm)


def _set_ffn(spec, weights: dict, layer: str, norm: str) -> None:
    _set_linear(spec.linear_0, weights, f"{layer}.ffn.0")  # FeedForward: Linear, ReLU, Dropout,
    _set_linear(spec.linear_1, weights, f"{layer}.ffn.3")  # Linear
    _set_norm(spec.layer_norm, weights, norm)


def _set_relative(spec, weights: dict, part: str, side: str, layer: int) -> None:
    """Shaw's tables of one layer: depnmt stores the 2k + 1 learned rows ([layers, 2k+1, d_k]);
    an ablated table (``--rel-terms key`` or ``value``) is exported as zeros, which adds nothing."""
    import numpy as np
    tables = {term: weights.get(f"{part}.sides.{side}.{term}") for term in ("key", "value")}
    shape = next(t for t in tables.values() if t is not None).shape[1:]
    for term, table in tables.items():
        rows = _array(table[layer]) if table is not None else np.zeros(shape, "float32")
        setattr(spec, f"relative_position_{term}s", rows)


def position_rows(config: dict[str, Any]) -> int:
    """Positions a translation of the longest allowed source can reach (source + EOS, or the
    output limit a·|x| + b + EOS)."""
    import math
    n = int(config.get("max_src_len", 250))
    search = config.get("search", {})
    return max(n, math.ceil(search.get("max_len_a", 1.5) * n + search.get("max_len_b", 10))) + 1


def _position_table(kind: str, rows: int, d_model: int):
    from depnmt.model.schemes.absolute import sinusoidal_table
    table = sinusoidal_table(rows, d_model)
    return _array(table if kind == "abs" else table.zero_())


def build_spec(config: dict[str, Any], weights: dict, kind: str, src_itos: list[str],
               tgt_itos: list[str]):
    """A filled ``ctranslate2.specs.TransformerSpec`` for a depnmt model (see module docstring)."""
    from ctranslate2.specs import common_spec, transformer_spec

    from depnmt.core.vocab import BOS, EOS, SPECIALS, UNK
    m = config["model"]
    spec = transformer_spec.TransformerSpec.from_config(
        (m["encoder_layers"], m["decoder_layers"]), m["n_heads"],
        with_relative_position=kind == "rel", pre_norm=False,
        activation=common_spec.Activation.RELU)
    spec.config.unk_token, spec.config.eos_token = SPECIALS[UNK], SPECIALS[EOS]
    spec.config.bos_token = spec.config.decoder_start_token = SPECIALS[BOS]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    rows = max(MIN_POSITIONS, position_rows(config))
    names = [s["name"] for s in m["schemes"]]
    rel_part = f"schemes.parts.{names.index('rel')}" if kind == "rel" else None
    for side, stack in (("src", spec.encoder), ("tgt", spec.decoder)):
        if kind != "rel":
            stack.position_encodings.encodings = _position_table(kind, rows, m["d_model"])
        for i, layer in enumerate(stack.layer):
            name = f"{'encoder' if side == 'src' else 'decoder'}.{i}"
            _set_attention(layer.self_attention, weights, f"{name}.self_attn", True,
                           f"{name}.norm1")
            if rel_part is not None:
                _set_relative(layer.self_attention, weights, rel_part, side, i)
            if side == "tgt":
                _set_attention(layer.attention, weights, f"{name}.cross_attn", False,
                               f"{name}.norm2")
            _set_ffn(layer.ffn, weights, name, f"{name}.norm{3 if side == 'tgt' else 2}")
    spec.encoder.embeddings[0].weight = _array(weights["src_embed.weight"])
    spec.decoder.embeddings.weight = _array(weights["tgt_embed.weight"])
    spec.decoder.projection.weight = _array(weights["output.weight"])
    spec.register_source_vocabulary(src_itos)
    spec.register_target_vocabulary(tgt_itos)
    return spec


@dataclass
class ExportSettings:
    """The options of ``depnmt export`` (:func:`export_ctranslate2`), each a field
    (:func:`~depnmt.core.optionspec.option`)."""

    fmt: str = option("ctranslate2", "target format", Choice(["ctranslate2"]), flag="--format")
    model_dir: Path | None = option(None, "model directory written by `depnmt train`", Folder(),
                                    flag=("-m", "--model"), metavar="MODEL_DIR", required=True)
    output: Path | None = option(None, "folder to write (must not exist, unless --force)",
                                 Folder(), flag=("-o", "--output"), required=True)
    checkpoint: Path | None = option(None, "checkpoint file (default: MODEL_DIR/checkpoints/"
                                     "best.pt, else last.pt)", File(), flag=("-c", "--checkpoint"))
    quantization: str | None = option(None, "store the weights quantized (default: float32, as "
                                      "trained)", Choice(QUANTIZATIONS))
    force: bool = option(False, "replace OUTPUT if it is an earlier export (or an empty folder)")

    def __post_init__(self):
        check_options(self)


# -- the folder -------------------------------------------------------------------------------

def export_ctranslate2(model_dir: Path, out_dir: Path, checkpoint: Path | None = None,
                       quantization: str | None = None, force: bool = False) -> dict[str, Any]:
    """Write the CTranslate2 model of ``model_dir`` and everything needed to run it into
    ``out_dir`` (built in a temporary folder beside it, then renamed, by one writer:
    :func:`~depnmt.core.stagedir.stage_output`); returns the export record."""
    from depnmt.storage.modeldir import check_subword_files, default_checkpoint, read_config

    check_distinct(out_dir, {"model folder": model_dir, **({"--checkpoint file": checkpoint}
                                                   if checkpoint else {})})
    config = read_config(model_dir)
    kind = position_kind(model_dir, config["model"])
    check_subword_files(model_dir, config)
    refuse_existing(out_dir, force)
    ct2 = import_ctranslate2()
    # --force replaces an earlier export as a whole; a folder holding anything else is refused
    owns = None if (out_dir / EXPORT_CONFIG).is_file() else (lambda name: False)
    with stage_output(out_dir, "export", owns=owns) as tmp:
        refuse_existing(out_dir, force)        # another export may have made it meanwhile
        return write_export(tmp, out_dir.name, model_dir, config, kind, checkpoint or
                            default_checkpoint(model_dir), quantization, ct2.__version__)


def write_export(tmp: Path, name: str, model_dir: Path, config: dict[str, Any], kind: str,
                 ckpt_path: Path, quantization: str | None, ct2_version: str) -> dict[str, Any]:
    """Write the export of ``model_dir`` into ``tmp`` (which :func:`export_ctranslate2` then
    renames to ``name``), ``depnmt-export.json`` last; returns the export record."""
    from depnmt.model.transformer import ModelConfig
    from depnmt.stages.bpe import Segmenter
    from depnmt.storage.modeldir import load_model_checkpoint, load_vocabs
    state = load_model_checkpoint(ckpt_path,
                                  expected_model=ModelConfig.from_dict(config["model"]).to_dict(),
                                  files=config.get("files"))
    src_vocab, tgt_vocab = load_vocabs(model_dir)
    spec = build_spec(config, state["model"], kind, src_vocab.itos, tgt_vocab.itos)
    spec.validate()
    spec.optimize(quantization=quantization)
    with naming(tmp / "model.bin"):         # ctranslate2's OSError names no file
        spec.save(str(tmp))
    for side, vocab in (("src", src_vocab), ("tgt", tgt_vocab)):
        vocab.save(tmp / f"vocab.{side}.txt")
        Segmenter.from_dir(model_dir, side).save(tmp, side)
    record = {
        "export_format": EXPORT_FORMAT, "format": "ctranslate2",
        "depnmt_version": __version__, "ctranslate2_version": ct2_version,
        "source_model": str(model_dir.resolve()),
        "checkpoint": ckpt_path.name, "step": state.get("progress", {}).get("step"),
        **averaged_steps(state),
        "scheme": [s["name"] for s in config["model"]["schemes"]],
        "positions": kind, "quantization": quantization or "float32",
        "src_lang": config.get("src_lang"), "tgt_lang": config.get("tgt_lang"),
        "tokenizers": config["tokenizers"],
        "max_src_len": int(config.get("max_src_len", 250)),
        "search": config.get("search", {}),
    }
    if "multitask" in config:     # the task tags its sources begin with (depnmt multitask)
        record["multitask"] = config["multitask"]
    with atomic_open(tmp / "README.md") as fh:
        fh.write(readme(name, record))
    with atomic_open(tmp / EXPORT_CONFIG) as fh:
        fh.write(json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    return record


def averaged_steps(state: dict[str, Any]) -> dict[str, Any]:
    """``{"averaged_steps": [N, ...]}``, the updates an average (``depnmt average``) is the
    mean of, for a checkpoint ``state`` that is one; else ``{}``. An average has no step of
    its own, so without this an export of one would not say which model it holds."""
    from depnmt.storage.averaged import SOURCES
    sources = state.get(SOURCES)
    if not isinstance(sources, list):
        return {}
    return {"averaged_steps": [s.get("step") for s in sources if isinstance(s, dict)]}


def checkpoint_text(record: dict[str, Any]) -> str:
    """``best.pt, step 500`` or ``avg5.pt, the average of updates 400, 500``: the exported
    checkpoint of an export ``record``."""
    steps = record.get("averaged_steps")
    if isinstance(steps, list):
        return (f"{record['checkpoint']}, the average of updates "
                f"{', '.join(str(s) for s in steps)}")
    return f"{record['checkpoint']}, step {record['step']}"


def refuse_existing(out_dir: Path, force: bool) -> None:
    """An existing ``out_dir`` is replaced only with ``--force``, and then only when it is an
    earlier export or empty (:func:`export_ctranslate2`)."""
    if out_dir.exists() and not force:
        raise DepnmtError(f"{out_dir}: already exists (use --force to replace it)")


def readme(name: str, record: dict[str, Any]) -> str:
    """The exported folder's own README: what it holds and two ways to run it."""
    search = record["search"]
    return f"""# depnmt model exported to CTranslate2

Exported by depnmt {record['depnmt_version']} (CTranslate2 {record['ctranslate2_version']}) from
`{record['source_model']}` ({checkpoint_text(record)}; scheme
{'+'.join(record['scheme'])}, weights {record['quantization']}),
{record['src_lang']} → {record['tgt_lang']}.

- `model.bin`, `config.json`, `*vocabulary.json`: the CTranslate2 model;
- `vocab.src.txt`, `vocab.tgt.txt`: depnmt's vocabularies (same order);
- `bpe.json`, `codes.*`: the subword segmentation; `depnmt-export.json`: tokenizer settings and
  search defaults (beam {search.get('beam')}, α {search.get('alpha')}, max length
  {search.get('max_len_a')}·|x| + {search.get('max_len_b')}).

## Run it

```bash
pip install depnmt[ct2]
depnmt translate --ct2 {name} < input.txt > output.txt     # raw text in, raw text out
```

or from Python, with depnmt's own tokenizer and BPE:

```python
import ctranslate2
from depnmt.decoding.ct2translate import CT2Translator
translator = CT2Translator.from_dir("{name}")          # tokenizer + BPE + ctranslate2.Translator
print(list(translator.translate_lines(["A man is riding a bike."])))

# the same by hand:
import json
from depnmt.stages.bpe import Segmenter
from depnmt.core.subwords import merge_subwords
from depnmt.stages.tokenize import make_tokenizer
cfg = json.load(open("{name}/depnmt-export.json"))
src_tok, tgt_tok = (make_tokenizer(cfg["tokenizers"][s]) for s in ("src", "tgt"))
bpe = Segmenter.from_dir("{name}", "src")
model = ctranslate2.Translator("{name}")
subwords = bpe.segment(src_tok.tokenize("A man is riding a bike."))
out = model.translate_batch([subwords], beam_size={search.get('beam')},
                            length_penalty={search.get('alpha')},
                            min_decoding_length=0)[0].hypotheses[0]
print(tgt_tok.detokenize(merge_subwords(out)))
```

Beam search: CTranslate2 divides a hypothesis's log-probability by |Y|^α (depnmt's default: the
GNMT penalty ((5 + |Y|) / 6)^α) and at the length limit ends hypotheses as they are (depnmt's
default forces EOS there); `depnmt translate --length-penalty power --at-limit cut` applies both
of CTranslate2's rules. Greedy outputs are the same.
"""
