"""The names and shapes of a model's weights without drawing its weights.

Checking a checkpoint against its model config needs the model's state-dict names and shapes.
A model built on the ``meta`` device has them without memory, but every operation of its
initialisation there (``normal_``, ``randn``, even a multiplication) is one of PyTorch's
Python decompositions, whose first call imports ``torch._dynamo``: 0.8–1.7 s of every
``translate``, ``average`` and ``export`` start-up on a CPU, for values nobody reads. Here the
model is built on the CPU with its random fills skipped and its random tensors left empty
(:class:`SkipRandomFills`): memory for one copy of the weights for a moment, no time drawing
them, no compiler imported.
"""

from __future__ import annotations

import functools
import json
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

# in-place random fills, and the initialisers that make them (a mode sees the initialiser,
# which has its own torch-function override, not the fill inside it); none changes a shape
RANDOM_FILLS = frozenset({
    torch.Tensor.normal_, torch.Tensor.uniform_, torch.Tensor.bernoulli_,
    torch.Tensor.exponential_, torch.Tensor.geometric_, torch.Tensor.log_normal_,
    torch.Tensor.cauchy_, torch.Tensor.random_,
    nn.init.normal_, nn.init.uniform_, nn.init.trunc_normal_, nn.init.kaiming_normal_,
    nn.init.kaiming_uniform_, nn.init.xavier_normal_, nn.init.xavier_uniform_,
    nn.init.orthogonal_, nn.init.sparse_})
# random tensors, made empty instead (the same arguments but the generator)
RANDOM_FACTORIES = {torch.randn: torch.empty, torch.rand: torch.empty,
                    torch.randn_like: torch.empty_like, torch.rand_like: torch.empty_like}


class SkipRandomFills(TorchFunctionMode):
    """Inside it, the in-place random fills of :data:`RANDOM_FILLS` leave their tensor as it
    is and the factories of :data:`RANDOM_FACTORIES` make empty tensors; every other function
    runs."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in RANDOM_FILLS:            # the filled tensor: self, or the initialiser's
            return args[0] if args else kwargs.get("tensor", kwargs.get("self"))
        if func in RANDOM_FACTORIES:
            kwargs = {k: v for k, v in kwargs.items() if k != "generator"}
            return RANDOM_FACTORIES[func](*args, **kwargs)
        return func(*args, **kwargs)


def state_shapes(model: dict[str, Any]) -> dict[str, torch.Size]:
    """Each entry of the state dict of the model that ``model`` (a
    :class:`~depnmt.model.transformer.ModelConfig` dict) describes, with its shape; the last
    few configs' answers are kept (``average`` checks every checkpoint against one)."""
    return dict(_shapes(json.dumps(model, sort_keys=True)))


@functools.lru_cache(maxsize=4)
def _shapes(model_json: str) -> tuple[tuple[str, torch.Size], ...]:
    from depnmt.model.transformer import ModelConfig, TransformerNMT
    with torch.device("cpu"), SkipRandomFills():
        state = TransformerNMT(ModelConfig.from_dict(json.loads(model_json))).state_dict()
    return tuple((name, tensor.shape) for name, tensor in state.items())
