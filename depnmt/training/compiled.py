"""``train --compile``: a training step's forward pass and loss through ``torch.compile``,
compiled for the batcher's shapes once, and what it compiled counted.

``--compile off`` (the default) runs the step as it always has. ``--compile dynamic`` compiles
what trains (the model, or its DistributedDataParallel wrapper under ``torchrun``: torch's
documented order, DDP first, so that TorchDynamo's DDP optimizer splits the graph at the
gradient buckets and their all-reduces overlap the backward) and the label-smoothed loss,
each with ``dynamic=True``: the batch size, source and target lengths (and the tree features'
sizes) are symbols of one graph, each its own (no "duck sizing"), not constants, so the
batcher's many shapes do not each compile anew. What stays specialised is a size of 1 (torch's
"0/1 specialisation"): a batch of one sentence, which the token batcher makes at most once an
epoch (its last, short batch), compiles each function once more. On the CPU the first
validation packs the model's linear layers for decoding (:mod:`depnmt.model.packed`), which
compiles the forward pass once more too. Any other recompile has another cause, which the
warning names. A length-bucketing mode would only add padding: dynamo needs none.

The model's parameters and ``state_dict`` are the plain module's (the compiled wrapper is
only called, never saved), so checkpoints, averaging, warm starts and ``--resume`` see no
difference; validation and decoding stay eager. Like ``--device`` it is a setting of where
and how the run computes, not of what it learns: ``--resume`` may give another value.

The count (:meth:`Compiled.counts`) is TorchDynamo's in this process since the compiler was
made: graphs compiled (a graph break splits a function into several), recompiles (a frame
compiled again because a guard of its graphs failed: the reason is TorchDynamo's) and graph
breaks.
``$DEPNMT_COMPILE_BACKEND`` picks torch.compile's backend (default ``inductor``; tests use
``eager`` or ``aot_eager``, which trace alike but generate no code).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from depnmt.core.errors import DepnmtError
from depnmt.core.log import warn

MODES = ("off", "dynamic")
BACKEND_VARIABLE = "DEPNMT_COMPILE_BACKEND"
DEFAULT_BACKEND = "inductor"
WARN_RECOMPILES = 5         # recompiles warned at 5, then at each doubling (10, 20, ...)


@dataclass
class CompileCounts:
    """What TorchDynamo did since a point: ``graphs`` compiled, ``recompiles`` (each a failed
    guard of a compiled graph), ``graph_breaks``, and a recent recompile's reason (its first
    line; None: none since the last look)."""

    graphs: int = 0
    recompiles: int = 0
    graph_breaks: int = 0
    reason: str | None = None

    def fields(self) -> dict[str, int]:
        """The counts as ``metrics.jsonl`` fields."""
        return {"compiled_graphs": self.graphs, "recompiles": self.recompiles,
                "graph_breaks": self.graph_breaks}

    def summary(self) -> str:
        """``torch.compile: 2 graphs compiled, 1 recompile, 0 graph breaks``."""
        def n(count: int, what: str) -> str:
            return f"{count} {what}{'' if count == 1 else 's'}"
        return (f"torch.compile: {n(self.graphs, 'graph')} compiled, "
                f"{n(self.recompiles, 'recompile')}, {n(self.graph_breaks, 'graph break')}")


def backend() -> str:
    """torch.compile's backend: ``$DEPNMT_COMPILE_BACKEND`` or :data:`DEFAULT_BACKEND`; an
    unknown one is a DepnmtError naming the usual ones."""
    name = os.environ.get(BACKEND_VARIABLE) or DEFAULT_BACKEND
    if name not in torch._dynamo.list_backends(exclude_tags=()):
        usual = ", ".join(sorted(torch._dynamo.list_backends()))       # debug ones not named
        raise DepnmtError(f"${BACKEND_VARIABLE}: unknown torch.compile backend '{name}' "
                          f"(known: {usual}, eager, aot_eager)")
    return name


def missing_features() -> list[str]:
    """What ``--compile dynamic`` uses of torch that this torch lacks (empty: it runs): sizes
    without duck sizing, TorchDynamo's compile callbacks and compile ids (torch 2.3 has none
    of the first two)."""
    import torch.fx.experimental._config as shapes
    missing = []
    if not hasattr(shapes, "use_duck_shape"):
        missing.append("torch.fx.experimental._config.use_duck_shape")
    handler = getattr(torch._dynamo, "callback_handler", None)
    if handler is None or not hasattr(handler, "register_start_callback"):
        missing.append("torch._dynamo.callback_handler.register_start_callback")
    try:
        from torch._dynamo.callback import CallbackTrigger  # noqa: F401
        from torch._guards import CompileId
        if not hasattr(CompileId, "from_string"):
            missing.append("torch._guards.CompileId.from_string")
    except ImportError:
        missing.append("torch._dynamo.callback.CallbackTrigger")
    return missing


def check_supported(mode: str) -> None:
    """A one-line DepnmtError when ``--compile mode`` needs what this torch lacks."""
    missing = missing_features()
    if mode != "off" and missing:
        raise DepnmtError(f"--compile {mode}: torch {torch.__version__} is too old for it "
                          f"(it lacks {', '.join(missing)}); upgrade torch or train without "
                          f"--compile")


class Compiled:
    """A training step's forward and loss, compiled per ``mode`` (one of :data:`MODES`), and
    the compiles counted from this object's making on (:meth:`counts`)."""

    def __init__(self, mode: str):
        if mode not in MODES:
            raise DepnmtError(f"--compile {mode}: not one of {', '.join(MODES)}")
        check_supported(mode)
        self.mode = mode
        self.backend = backend() if self.on else None
        self._start = _totals() if self.on else None
        self._seen = _reasons_seen() if self.on else {}
        self._warned_at = 0

    @property
    def on(self) -> bool:
        return self.mode != "off"

    def forward(self, net: torch.nn.Module) -> Callable[..., Any]:
        """What a step calls to run ``net`` (the model or its DDP wrapper): ``net`` itself, or
        it compiled with dynamic shapes."""
        return self._compiled(net) if self.on else net

    def loss(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """The loss function ``fn`` as a step calls it: itself, or compiled alike."""
        return self._compiled(fn) if self.on else fn

    def _compiled(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """``fn`` through ``torch.compile(dynamic=True)``, without "duck sizing" (which gives
        two sizes one symbol when they happen to be equal, e.g. a first batch's source and
        target lengths, and recompiles at the first batch where they differ); a backend that
        fails to compile is a one-line DepnmtError (not the compiler's traceback)."""
        compiled = torch.compile(fn, dynamic=True, backend=self.backend)
        name = getattr(self.backend, "__name__", self.backend)
        import torch.fx.experimental._config as shapes

        def run(*args, **kwargs):
            try:
                with shapes.patch(use_duck_shape=False):
                    return compiled(*args, **kwargs)
            except torch._dynamo.exc.BackendCompilerFailed as exc:
                cause = getattr(exc, "inner_exception", None) or exc
                lines = str(cause).strip().splitlines()
                raise DepnmtError(
                    f"--compile {self.mode}: torch.compile's {name} backend failed "
                    f"({type(cause).__name__}: {lines[0][:300] if lines else ''}); train "
                    f"without --compile") from None
        return run

    def counts(self) -> CompileCounts | None:
        """What was compiled since this object was made (None: ``--compile off``), with the
        reason of a recompile since the last call."""
        if self._start is None:
            return None
        now = _totals()
        graphs, recompiles, breaks = (max(0, a - b) for a, b in zip(now, self._start))
        seen = _reasons_seen()
        reason = _newest_reason(self._seen, seen)
        self._seen = seen
        return CompileCounts(graphs, recompiles, breaks, reason)

    def observe(self) -> dict[str, int]:
        """The counts as ``metrics.jsonl`` fields (none when off), warning when the recompiles
        reach :data:`WARN_RECOMPILES` and again at each doubling, with TorchDynamo's reason."""
        counts = self.counts()
        if counts is None:
            return {}
        if counts.recompiles >= max(WARN_RECOMPILES, 2 * self._warned_at):
            self._warned_at = counts.recompiles
            why = f" (a reason: {counts.reason})" if counts.reason else ""
            warn(f"--compile {self.mode}: torch.compile recompiled {counts.recompiles} times "
                 f"({counts.graphs} graphs){why}; each recompile costs seconds to minutes, and "
                 f"after {recompile_limit()} of one function torch runs it "
                 f"uncompiled. TORCH_LOGS=recompiles prints each reason")
        return counts.fields()


def recompile_limit() -> Any:
    """TorchDynamo's limit of compiles of one function (``recompile_limit``; older torch:
    ``cache_size_limit``)."""
    config = torch._dynamo.config
    return getattr(config, "recompile_limit", getattr(config, "cache_size_limit", "?"))


_recompiles = [0]       # TorchDynamo's recompiles in this process (_on_compile)


def _on_compile(args: Any) -> None:
    """TorchDynamo's start-of-compile callback: counts a frame compiled again (its compile
    id's second number, ``frame/attempt``, counts a frame's compiles; 0 is its first)."""
    from torch._dynamo.callback import CallbackTrigger
    from torch._guards import CompileId
    if args.callback_trigger is not CallbackTrigger.DYNAMO:
        return
    compile_id = CompileId.from_string(args.compile_id)
    if compile_id and compile_id.frame_compile_id:
        _recompiles[0] += 1


def _listen() -> None:
    """Count TorchDynamo's compiles from now on (once a process)."""
    handler = torch._dynamo.callback_handler
    if _on_compile not in handler.start_callbacks:
        handler.register_start_callback(_on_compile)


def _totals() -> tuple[int, int, int]:
    """The process's (graphs compiled, recompiles, graph breaks) so far."""
    from torch._dynamo.utils import counters
    _listen()
    return (int(counters["stats"]["unique_graphs"]), _recompiles[0],
            int(sum(counters["graph_break"].values())))


def _reasons_seen() -> dict[Any, int]:
    """How many guard failures (recompile reasons) TorchDynamo recorded, per compiled code."""
    from torch._dynamo.utils import guard_failures
    return {code: len(reasons) for code, reasons in guard_failures.items()}


def _newest_reason(before: dict[Any, int], now: dict[Any, int]) -> str | None:
    """The first line of the first guard failure recorded between ``before`` and ``now`` of a
    function that recompiled, or None."""
    from torch._dynamo.utils import guard_failures
    for code, n in now.items():
        if n > before.get(code, 0):
            reason = str(guard_failures[code][before.get(code, 0)]).strip().splitlines()
            return reason[0][:300] if reason else None
    return None
