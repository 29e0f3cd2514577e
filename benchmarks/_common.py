"""Helpers shared by the benchmark scripts: timing medians, tables, JSON output."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def median_time(fn: Callable[[], Any], repeats: int = 3) -> tuple[float, Any]:
    """Median wall time (s) of ``fn`` over ``repeats`` runs, and its last result."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def paired_times(a: Callable[[], Any], b: Callable[[], Any], repeats: int) -> tuple[float, float, float]:
    """Median wall times (s) of ``a`` and ``b`` run alternately, and the median of the
    per-pair ratios a/b: pairing cancels most of the drift from other load on the machine."""
    ta, tb = [], []
    for _ in range(repeats):
        for fn, times in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    ratio = statistics.median(x / y for x, y in zip(ta, tb, strict=True))
    return statistics.median(ta), statistics.median(tb), ratio


def print_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> None:
    """Print ``rows`` as an aligned text table."""
    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4g}"
        return str(v)

    cells = [[fmt(r.get(c, "")) for c in columns] for r in rows]
    widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(columns)]
    print("  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)))


def write_json(name: str, payload: Any) -> Path:
    """Write ``payload`` to ``benchmarks/results/<name>.json`` and return the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=2, default=str))
    return path
