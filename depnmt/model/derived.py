"""Tensors derived from parameters (stacked, cast, transformed), kept between calls without
autograd: a search asks for them at every step of every layer, and they change only when the
parameters do."""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, TypeVar

import torch
from torch import Tensor

T = TypeVar("T")


def stamp(tensors: Iterable[Tensor | None]) -> tuple:
    """What identifies the tensors' current contents: storage, in-place version and dtype."""
    return tuple(None if t is None else (t.data_ptr(), t._version, t.dtype) for t in tensors)


class Derived:
    """Values built from some parameters by :meth:`get`: with autograd on (training) built at
    every call, so that gradients flow; without (decoding, validation) built once and kept
    while the parameters stay the same tensors at the same version (``optimizer.step()``,
    ``load_state_dict`` or ``.to()`` make them new)."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[tuple, object]] = {}

    def get(self, key: Hashable, params: Iterable[Tensor | None], build: Callable[[], T]) -> T:
        """``build()``, or the value kept under ``key`` if ``params`` are unchanged."""
        if torch.is_grad_enabled():
            return build()
        now = stamp(params)
        kept = self._kept.get(key)
        if kept is None or kept[0] != now:
            kept = self._kept[key] = (now, build())
        return kept[1]  # type: ignore[return-value]
