"""One JSON document on stdout for every ``--json`` command: strict JSON (non-finite numbers,
which JSON has no spelling for, become ``null``), numpy scalars and arrays as numbers and lists."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any


def to_json_text(obj: Any) -> str:
    """``obj`` as indented strict JSON (``NaN``/``inf`` -> ``null``)."""
    return json.dumps(_plain(obj), indent=1, allow_nan=False)


def print_json(obj: Any) -> None:
    """Print ``obj`` as one JSON document."""
    print(to_json_text(obj), flush=True)


def _plain(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "tolist"):  # numpy scalars and arrays
        return _plain(obj.tolist())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    try:
        value = float(obj)
    except (TypeError, ValueError):
        return str(obj)
    return value if math.isfinite(value) else None
