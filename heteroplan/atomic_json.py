"""Atomic JSON writes: readers never see half a file."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from heteroplan.errors import InputError

__all__ = ["write_json_atomic"]


def write_json_atomic(path: Path, data: object, default: Callable[[Any], Any] | None = None) -> None:
    """Write ``data`` as JSON to ``path`` via a temporary file and ``os.replace``
    (``default`` converts what ``json`` cannot, e.g. ``float`` for numpy scalars).

    A symbolic link is written through (its target is replaced, the link stays). A write that
    fails (a full disk, no permission) leaves no temporary file and the old ``path`` as it was,
    and raises :class:`InputError` naming ``path`` and the reason."""
    path = Path(path)
    if path.is_symlink():
        path = path.resolve()
    text = json.dumps(data, indent=1, sort_keys=False, default=default)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise InputError("output file", str(path), f"cannot write it: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
