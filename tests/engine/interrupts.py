"""An interrupt in one thread while the engine's second thread still works (tests of the
two-thread stages: nothing may go on computing once the call has ended)."""

import threading
import time

import pytest


def interrupt_beside_slow_work(
    monkeypatch: pytest.MonkeyPatch, module: object, slow: str, broken: str
) -> threading.Event:
    """Make ``module.slow`` take 0.3 s longer (the event is set once it has ended) and
    ``module.broken`` raise KeyboardInterrupt, as Ctrl-C would there."""
    ended = threading.Event()
    work = getattr(module, slow)

    def slow_work(*args):
        time.sleep(0.3)
        try:
            return work(*args)
        finally:
            ended.set()

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(module, slow, slow_work)
    monkeypatch.setattr(module, broken, interrupted)
    return ended
