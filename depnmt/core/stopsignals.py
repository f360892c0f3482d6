"""Stop training cleanly on SIGTERM (a scheduler's pre-emption), SIGINT (Ctrl-C) and SIGHUP (the
terminal went away: an ssh connection lost without ``nohup``).

While :class:`StopSignals` is active, the first of these signals is only recorded: the training
loop finishes the current update (and a validation that is due at it), saves ``last.pt``, says
so (where its messages can still be written: :class:`depnmt.core.textio.MessageStream`) and exits
with ``128 + signal`` (143 for SIGTERM, 130 for SIGINT, 129 for SIGHUP) through :class:`Stopped`.
The handler then restores the system's default action of SIGTERM and SIGINT, so a second one
ends the process at once, even inside a long C++ operation (a hangup can reach a process twice,
from its shell and from the kernel, so SIGHUP stays recorded only); the checkpoint writes are
atomic, so that loses only the work since the last save. Under ``torchrun`` the launcher
forwards its signal to every worker (in sessions of their own, so a terminal's Ctrl-C reaches
each worker once); a signal any rank received stops every rank after the same update
(:func:`depnmt.training.distributed.max_over_ranks`).

Nothing is printed inside the handler (a handler that writes to stderr while the interrupted
code is writing there raises "reentrant call"); the loop reports the stop.
"""

from __future__ import annotations

import signal
import threading

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Stopped(Exception):
    """Training stopped by a signal after saving; the process should exit with
    :attr:`exit_status`."""

    def __init__(self, signum: int):
        self.signum, self.name = signum, signal.Signals(signum).name
        self.exit_status = 128 + signum
        super().__init__(f"stopped by {self.name}")


class StopSignals:
    """Context manager recording the first of :data:`SIGNALS` in :attr:`received` (0: none). Outside
    the main thread (where Python cannot install handlers) it does nothing."""

    def __init__(self) -> None:
        self.received = 0
        self._previous: dict[int, object] = {}

    def __enter__(self) -> "StopSignals":
        if threading.current_thread() is threading.main_thread():
            for sig in SIGNALS:
                self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame) -> None:
        self.received = self.received or signum
        for sig in self._previous:           # a second signal: the default action, at once
            if sig != signal.SIGHUP:
                signal.signal(sig, signal.SIG_DFL)

    def __exit__(self, *exc) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)
        self._previous = {}
