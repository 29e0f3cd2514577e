"""A thread-safe least-recently-used cache bounded by the total size of what it keeps.

The goodput model keeps throughput grids (bounded in bytes) and the fitter keeps fits (bounded in
count) across models: both are pure functions of their inputs that the simulator asks for again
and again, from sweep threads too. :class:`LRUCache` is that mechanism, written once.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["LRUCache"]

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


def _one(value: object) -> float:
    return 1.0


class LRUCache(Generic[K, V]):
    """Values by key, at most ``capacity`` in all where each value counts ``size(value)`` (default
    1: ``capacity`` is a count of values); the least recently used go first.

    A key keeps the first value put under it (what is cached is a pure function of the key).
    ``capacity`` may be changed at any time (0: nothing is kept); the next :meth:`put` applies it.
    """

    def __init__(self, capacity: float, size: Callable[[V], float] = _one) -> None:
        self.capacity = capacity
        self._size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self._total = 0.0
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        """The value kept under ``key`` (now the most recently used), or ``None``."""
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` under ``key`` unless a value is kept there already (another thread made it
        meanwhile), then drop the least recently used values until the sizes add up to at most
        ``capacity``. Returns the value kept under ``key`` (``value`` where it was dropped at once)."""
        with self._lock:
            kept = self._items.get(key)
            if kept is not None:
                return kept
            self._items[key] = value
            self._total += self._size(value)
            while self._items and self._total > self.capacity:
                _, dropped = self._items.popitem(last=False)
                self._total -= self._size(dropped)
            return value

    def clear(self) -> None:
        """Forget every value."""
        with self._lock:
            self._items.clear()
            self._total = 0.0

    def __len__(self) -> int:
        return len(self._items)
