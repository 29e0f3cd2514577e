"""The scan's patience: stop scanning a dimension (data-parallel degrees, pipeline depths) after
``limit`` values in a row that did not improve on the best candidate so far."""

from __future__ import annotations

import math
from dataclasses import dataclass

from heteroplan.planner.search.context import Candidate

__all__ = ["Patience"]


@dataclass
class Patience:
    """The best candidate over the values scanned so far and how many values in a row did not
    improve it (``stale``); ``limit`` such values stop the scan (``math.inf``: never, no pruning)."""

    limit: float = math.inf
    best: Candidate | None = None
    stale: int = 0

    def step(self, cand: Candidate | None, count_empty: bool = True) -> bool:
        """Record ``cand``, the best of one scanned value (``None``: nothing priced); True when the
        scan should stop. Without a best so far, a value without a better candidate counts only
        where ``count_empty``."""
        if cand is not None and (self.best is None or cand < self.best):
            self.best, self.stale = cand, 0
            return False
        if self.best is None and not count_empty:
            return False
        return self._no_gain()

    def step_without_gain(self, cand: Candidate) -> bool:
        """Record ``cand`` as this value's best (kept if better) but count the value as no gain (it
        did not beat a plan it had to: the incumbent); True when the scan should stop."""
        self.best = min(cand, self.best or cand)
        return self._no_gain()

    def _no_gain(self) -> bool:
        self.stale += 1
        return self.stale >= self.limit
