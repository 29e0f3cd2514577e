"""A minimal progress bar on stderr, shown only on a terminal."""

from __future__ import annotations

import sys
import time


class ProgressBar:
    """``update(fraction, text)``; silent when stderr is not a TTY or ``enabled`` is False."""

    def __init__(self, label: str, enabled: bool | None = None, min_interval: float = 0.2) -> None:
        self.label = label
        self.enabled = sys.stderr.isatty() if enabled is None else enabled
        self.min_interval = min_interval
        self._last = 0.0
        self._start = time.perf_counter()

    def update(self, fraction: float, text: str = "") -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self._last < self.min_interval and fraction < 1:
            return
        self._last = now
        width = 30
        done = int(width * min(max(fraction, 0.0), 1.0))
        elapsed = now - self._start
        sys.stderr.write(f"\r{self.label} [{'#' * done}{'.' * (width - done)}] {fraction:6.1%} {elapsed:6.1f}s {text}   ")
        sys.stderr.flush()

    def close(self) -> None:
        if self.enabled:
            sys.stderr.write("\n")
            sys.stderr.flush()
