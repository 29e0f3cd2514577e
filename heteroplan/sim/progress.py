"""Progress with an ETA (tqdm): on a terminal's stderr, or as a widget in a notebook."""

from __future__ import annotations

import sys
from typing import Any

from heteroplan.names import printable

STEPS = 1000  # resolution of the bar: fractions are shown in steps of 0.1 %


def _in_notebook() -> bool:
    shell = sys.modules.get("IPython")
    ip = getattr(shell, "get_ipython", lambda: None)() if shell else None
    return ip is not None and type(ip).__name__ == "ZMQInteractiveShell"


class ProgressBar:
    """``update(fraction, text)`` draws a tqdm bar with elapsed time and ETA.

    Shown when ``enabled`` is True, or, when it is None, when stderr is a terminal or the
    code runs in a Jupyter notebook; otherwise silent (pipes and logs stay clean).
    """

    def __init__(self, label: str, enabled: bool | None = None, min_interval: float = 0.2) -> None:
        self.label = label
        self.enabled = (sys.stderr.isatty() or _in_notebook()) if enabled is None else enabled
        self._bar: Any = None
        if self.enabled:
            from tqdm.auto import tqdm

            self._bar = tqdm(total=STEPS, desc=printable(label), mininterval=min_interval, leave=True,
                             bar_format="{desc} {percentage:5.1f}%|{bar}| [{elapsed}<{remaining}] {postfix}")

    def update(self, fraction: float, text: str = "") -> None:
        if self._bar is None:
            return
        done = int(STEPS * min(max(fraction, 0.0), 1.0))
        if done > self._bar.n:
            self._bar.update(done - self._bar.n)
        if text:
            self._bar.set_postfix_str(printable(text), refresh=False)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
