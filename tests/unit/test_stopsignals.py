"""``depnmt/core/stopsignals.py``: which signals stop a training after its update, and which second
signal ends it at once."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from depnmt.core.stopsignals import SIGNALS, Stopped, StopSignals

pytestmark = pytest.mark.skipif(threading.current_thread() is not threading.main_thread(),
                                reason="signal handlers live in the main thread")


def test_a_hangup_is_recorded_and_a_second_one_too_does_not_kill():
    """A terminal's hangup can reach a process twice (its shell, then the kernel): both are
    only recorded, while a second SIGTERM or SIGINT would now end the process at once."""
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    with StopSignals() as signals:
        os.kill(os.getpid(), signal.SIGHUP)
        assert signals.received == signal.SIGHUP
        assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
        assert signal.getsignal(signal.SIGINT) == signal.SIG_DFL
        os.kill(os.getpid(), signal.SIGHUP)              # would end this test process if not
        assert signals.received == signal.SIGHUP
    assert {sig: signal.getsignal(sig) for sig in SIGNALS} == before
    assert Stopped(signals.received).exit_status == 129


def test_the_first_signal_is_the_one_reported():
    with StopSignals() as signals:
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.received == signal.SIGINT
        assert signal.getsignal(signal.SIGHUP) not in (signal.SIG_DFL, signal.SIG_IGN)
        os.kill(os.getpid(), signal.SIGHUP)
        assert signals.received == signal.SIGINT
    assert Stopped(signal.SIGINT).exit_status == 130
