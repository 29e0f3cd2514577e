"""SIGINT/SIGTERM as an exception a long run can act on: keep what finished, then stop.

Used by the commands and loops that write results as they go (``heteroplan simulate``, sweeps).
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["Interrupted", "SignalGuard", "StopFlag", "stop_on_signals"]


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM arrived; ``signum`` says which. A ``KeyboardInterrupt``, so the
    simulation loop attaches the interrupted run's partial result (``exc.result``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


class SignalGuard:
    """Turns SIGINT/SIGTERM into :class:`Interrupted` while active (main thread only);
    inside :meth:`deferred` a signal waits until the block ends, so a result's files are
    written all or none. Only the first signal is raised: later ones (a second Ctrl-C 20 ms
    after the first) are ignored while the run writes what it kept (SIGKILL still stops it)."""

    def __init__(self) -> None:
        self._deferring = False
        self._pending: int | None = None
        self._previous: dict[int, Any] = {}
        self.received: int | None = None

    def _handler(self, signum: int, frame: object) -> None:
        if self.received is not None:  # already stopping: a second Ctrl-C must not cut the cleanup short
            return
        self.received = signum
        if self._deferring:
            self._pending = self._pending or signum
            return
        raise Interrupted(signum)

    def interruption(self, exc: BaseException) -> Interrupted | None:
        """``exc`` as the :class:`Interrupted` it stands for, or None when no signal came.

        A signal that lands inside a C extension's import (highspy, numpy) surfaces as that
        import's ``ImportError`` rather than as :class:`Interrupted`; the signal recorded by the
        handler says what really happened."""
        if isinstance(exc, Interrupted):
            return exc
        return Interrupted(self.received) if self.received is not None else None

    def __enter__(self) -> SignalGuard:
        try:
            self._previous = {s: signal.signal(s, self._handler) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: leave signals alone
            self._previous = {}
        return self

    def __exit__(self, *exc: object) -> None:
        for s, h in self._previous.items():
            signal.signal(s, h)

    @contextmanager
    def deferred(self) -> Iterator[None]:
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        if self._pending is not None:
            raise Interrupted(self._pending)


class StopFlag:
    """Set by SIGINT/SIGTERM inside :func:`stop_on_signals`: call it to ask whether a signal came;
    ``signum`` says which (``None``: none)."""

    def __init__(self) -> None:
        self.signum: int | None = None

    def __call__(self) -> bool:
        return self.signum is not None


@contextmanager
def stop_on_signals() -> Iterator[StopFlag]:
    """While active (main thread only), SIGINT/SIGTERM set a :class:`StopFlag` instead of raising.
    For loops that stop at their next boundary and clean up (the round executor checkpoints its
    jobs and saves its session); later signals are ignored while they do."""
    flag = StopFlag()

    def handler(signum: int, frame: object) -> None:
        flag.signum = flag.signum or signum

    try:
        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread
        previous = {}
    try:
        yield flag
    finally:
        for s, old in previous.items():
            signal.signal(s, old)
