"""A sweep's results on disk: one JSON file per cell, named by the hash of its inputs.

Layout of the output directory::

    sweep.json            the sweep's name, source tables, version and cell keys
    cells/<key>.json      one record per cell (written atomically when the cell finishes)
    results.csv           the tidy table, a row per cell (+ results.parquet with pyarrow)
    summary.csv           mean over seeds and 95% interval (n >= 3) per (policy, workload)
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from heteroplan.atomic_json import write_json_atomic
from heteroplan.errors import InputError
from heteroplan.inputs import read_json
from heteroplan.names import a_path, path_component

__all__ = ["ResultStore"]

log = logging.getLogger(__name__)


class ResultStore:
    """Cell records under ``out/cells``; a record with ``status == "ok"`` marks a finished cell."""

    def __init__(self, out: str | Path) -> None:
        self.out = a_path("out", out)
        if self.out.exists() and not self.out.is_dir():
            raise InputError("out", str(self.out), "exists and is not a directory")
        self.cells = self.out / "cells"
        self.cells.mkdir(parents=True, exist_ok=True)

    def path(self, key: str) -> Path:
        """The record file of cell ``key`` (a key unfit for a file name is refused)."""
        return self.cells / f"{path_component('cell key', key)}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The record of cell ``key``, or None (missing or unreadable: then it reruns)."""
        path = self.path(key)
        if not path.exists():
            return None
        try:
            record = read_json(path, "cell record")
        except InputError as exc:  # truncated, not UTF-8, nested too deep, a 5000-digit number
            log.warning("ignoring unreadable cell record: %s; the cell runs again and its new record replaces the "
                        "file", exc)
            return None
        if not isinstance(record, dict) or not isinstance(record.get("status"), str):
            log.warning("ignoring cell record %s: not a record (no status); the cell runs again and its new record "
                        "replaces the file", path)
            return None
        return record

    def status(self, key: str) -> str | None:
        record = self.load(key)
        return None if record is None else record.get("status")

    def write(self, record: dict[str, Any]) -> None:
        write_json_atomic(self.path(record["key"]), record, root=self.out)

    def records(self, keys: Iterable[str]) -> list[dict[str, Any]]:
        """The stored records of ``keys``, in that order (missing ones left out)."""
        return [r for r in (self.load(k) for k in keys) if r is not None]

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        write_json_atomic(self.out / "sweep.json", manifest, root=self.out)
