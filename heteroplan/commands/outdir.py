"""``--out`` directories: checked before a long run starts, so a bad path fails in a second."""

from __future__ import annotations

import tempfile
from pathlib import Path

from heteroplan.errors import InputError

__all__ = ["writable_dir"]


def writable_dir(text: str, flag: str = "--out") -> Path:
    """``text`` as a directory that exists (created if needed) and accepts files."""
    path = Path(text)
    if path.exists() and not path.is_dir():
        raise InputError(flag, text, "is a file, not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise InputError(flag, text, f"cannot write there: {exc.strerror or exc}") from None
    return path
