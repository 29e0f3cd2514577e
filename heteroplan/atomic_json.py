"""Atomic JSON writes: readers never see half a file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["write_json_atomic"]


def write_json_atomic(path: Path, data: object, default: Callable[[Any], Any] | None = None) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file and ``os.replace``
    (``default`` converts what ``json`` cannot, e.g. ``float`` for numpy scalars)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False, default=default))
    os.replace(tmp, path)
