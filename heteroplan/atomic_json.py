"""Atomic JSON writes: readers never see half a file."""

from __future__ import annotations

import json
import os
from pathlib import Path

__all__ = ["write_json_atomic"]


def write_json_atomic(path: Path, data: object) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file and ``os.replace``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=False))
    os.replace(tmp, path)
