"""Start-up objects kept out of Python's cyclic garbage collector (a command-line concern).

``import torch`` creates about a million long-lived Python objects. While they are being
created the cyclic collector runs its full (generation 2) pass again and again over all of
them, and at exit it walks them once more: on a 2-core CPU that is 0.3–0.5 s of a
``depnmt translate`` whose whole start-up is under 1.5 s. :func:`startup_objects` creates them
with the collector paused and then freezes them (:func:`gc.freeze`: moved to a permanent
generation the collector never scans; reference counting still frees what is dropped), the
pattern CPython documents for long-lived start-up state.

Only the ``depnmt`` console process does this (:func:`own_process`, called by
:func:`depnmt.cli.main`): a library call or a test running a command in-process leaves the
caller's collector as it is.
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

_owns_process = False


def own_process() -> None:
    """Declare that this interpreter runs one depnmt command and exits (the console script)."""
    global _owns_process
    _owns_process = True


@contextmanager
def startup_objects() -> Iterator[None]:
    """Run the block (heavy imports, loading a model) with the cyclic collector paused, then
    freeze every object that exists and restore the collector — in the console process only;
    elsewhere the block runs as it is. The collector is restored even when the block fails."""
    if not _owns_process:
        yield
        return
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()
