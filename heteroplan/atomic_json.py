"""Atomic writes: readers never see half a file, and no write is raced or redirected.

Each write goes to a temporary file with a unique random name, created exclusively (``O_EXCL``,
so no file or symbolic link planted at that name is opened) in the target's own directory,
written and ``fsync``-ed through the descriptor that created it, then moved over the target with
``os.replace``. Two threads or processes saving one file at once each replace it with a complete
document (the last one wins); neither fails nor leaves a torn file or a temporary file behind.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from heteroplan.errors import InputError

__all__ = ["write_json_atomic", "write_text_atomic", "write_bytes_atomic", "inside", "TEMP_SUFFIX"]

TEMP_SUFFIX = ".tmp"
"""How the name of a temporary file ends (``.<name>.<random>.tmp`` beside the target, the name cut
to 64 characters)."""


class _CreatedTemp(type(Path())):  # type: ignore[misc]
    """A temporary file's path whose ``open`` writes through the descriptor that created it
    exclusively (the name is never opened again, so a file swapped in under it is never written);
    it is written with ``Path.write_text``/``write_bytes`` as any file is."""

    _fd: int

    def open(self, mode: str = "r", buffering: int = -1, encoding: str | None = None,  # type: ignore[override]
             errors: str | None = None, newline: str | None = None) -> IO[Any]:
        if mode not in ("w", "wb"):
            raise ValueError(f"a temporary file is only written, not opened with mode {mode!r}")
        os.ftruncate(self._fd, 0)
        os.lseek(self._fd, 0, os.SEEK_SET)
        return open(os.dup(self._fd), mode, buffering, encoding, errors, newline)


def _umask() -> int:
    """This process's umask, read without changing it (Linux); 0o022 elsewhere."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


def _target(path: Path, root: Path | None) -> Path:
    """Where ``path`` writes: a symbolic link at ``path`` is followed (its target is replaced, the
    link stays) unless that leads outside ``root``."""
    if path.is_symlink():
        path = path.resolve()
    if root is not None:
        base = Path(root).resolve()
        resolved = path.parent.resolve() / path.name
        if resolved != base and base not in resolved.parents:
            raise InputError("output file", str(path), f"leads outside the output directory {str(base)!r} "
                             "(a symbolic link?); refusing to write there")
    return path


def inside(path: str | Path, root: str | Path) -> Path:
    """``path`` where it leads inside the directory ``root`` (a symbolic link at ``path`` followed);
    :class:`InputError` when a link, at the file or a directory on the way, leads outside."""
    return _target(Path(path), Path(root))


def write_text_atomic(path: str | Path, text: str, root: str | Path | None = None) -> None:
    """Write ``text`` (UTF-8) to ``path`` atomically (see the module doc).

    ``root``: as in :func:`write_bytes_atomic`."""
    _write(path, text, root)


def write_bytes_atomic(path: str | Path, data: bytes, root: str | Path | None = None) -> None:
    """Write ``data`` to ``path`` atomically (see the module doc).

    ``root``: the output directory the library created or was given; a ``path`` that leads outside
    it (through a symbolic link at the file or at a directory on the way) is refused. A write that
    fails (a full disk, no permission) leaves no temporary file and the old ``path`` as it was,
    and raises :class:`InputError` naming ``path`` and the reason."""
    _write(path, data, root)


def _write(path: str | Path, data: str | bytes, root: str | Path | None) -> None:
    path = _target(Path(path), Path(root) if root is not None else None)
    fd: int | None = None
    tmp: _CreatedTemp | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        if root is not None:
            _target(path, Path(root))  # the directories made just now are checked too
        fd, name = tempfile.mkstemp(prefix=f".{path.name[:64]}.", suffix=TEMP_SUFFIX, dir=path.parent)
        tmp = _CreatedTemp(name)
        tmp._fd = fd
        try:
            mode = os.stat(path).st_mode & 0o7777
        except OSError:
            mode = 0o666 & ~_umask()
        if hasattr(os, "fchmod"):
            os.fchmod(fd, mode)
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
        os.fsync(fd)
        os.close(fd)
        fd = None
        os.replace(tmp, path)
        tmp = None
        _sync_directory(path.parent)
    except OSError as exc:
        raise InputError("output file", str(path), f"cannot write it: {exc.strerror or exc}") from None
    finally:
        if fd is not None:
            os.close(fd)
        if tmp is not None:
            tmp.unlink(missing_ok=True)


def _sync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable where the platform allows (best effort)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: str | Path, data: object, default: Callable[[Any], Any] | None = None,
                      root: str | Path | None = None) -> None:
    """Write ``data`` as JSON to ``path`` atomically (``default`` converts what ``json`` cannot,
    e.g. ``float`` for numpy scalars; ``root`` as in :func:`write_bytes_atomic`).

    A symbolic link is written through (its target is replaced, the link stays)."""
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=False, default=default), root)
