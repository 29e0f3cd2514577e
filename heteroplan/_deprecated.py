"""Former spellings of public attributes, kept as read-only properties that warn."""

from __future__ import annotations

import warnings
from typing import Any

__all__ = ["renamed"]


def renamed(old: str, new: str) -> Any:
    """A read-only property ``old`` that warns (:class:`DeprecationWarning`) and returns attribute ``new``."""

    def get(self: Any) -> Any:
        warnings.warn(f"{type(self).__name__}.{old} is deprecated; use {new}", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(get, doc=f"Deprecated spelling of :attr:`{new}`.")
