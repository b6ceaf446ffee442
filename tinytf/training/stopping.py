"""Stopping a training run on request: the first Ctrl-C (or SIGTERM under torchrun) asks
the loop to finish its step and save; a second one stops at once."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator, Sequence


@contextlib.contextmanager
def stop_on_signals(signals: Sequence[signal.Signals]) -> Iterator:
    """While active, the first Ctrl-C (or another of `signals`: SIGTERM too under torchrun,
    which forwards what it gets) only raises a flag (the loop stops at the end of its
    step); a second one interrupts at once. Yields a function that reads the flag."""
    requested = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield requested.is_set
        return

    def on_signal(signum, frame):
        if requested.is_set():
            raise KeyboardInterrupt
        requested.set()

    previous = {number: signal.signal(number, on_signal) for number in signals}
    try:
        yield requested.is_set
    finally:
        for number, handler in previous.items():
            if signal.getsignal(number) is on_signal:  # unless changed meanwhile (JobFailed ignores SIGTERM)
                signal.signal(number, handler)
