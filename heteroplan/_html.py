"""Tiny HTML helpers for the ``_repr_html_`` methods (Jupyter rich display).

Every cell and title goes through :func:`html.escape`, so names such as ``"<gpu>"`` or
``"a&b"`` show as text and cannot inject markup.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["cell", "table", "title"]


def cell(value: Any, digits: int = 4) -> str:
    """Escaped text of one value; floats with ``digits`` significant digits."""
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return html.escape(str(value))


def title(text: str, detail: str = "") -> str:
    """Bold ``text`` followed by plain ``detail`` (both escaped)."""
    out = f"<b>{html.escape(text)}</b>"
    return out + (f": {html.escape(detail)}" if detail else "")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 4) -> str:
    """An HTML table: a header row, then one row per entry of ``rows`` (cells escaped)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell(v, digits)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"
