"""The library's size bars: no class over 350 lines, no function over 80 lines unless a
``# long: <reason>`` comment stands right above it (its complexity bar, 25, is ruff's C901 in
pyproject.toml). A long function or class is split into named steps instead."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "heteroplan"
MAX_CLASS_LINES = 350
MAX_FUNCTION_LINES = 80
MARKER = "# long:"


def _lines(node: ast.AST) -> int:
    return node.end_lineno - node.lineno + 1  # type: ignore[attr-defined]


def _excused(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> bool:
    """A ``# long: <reason>`` comment in the comment block right above the ``def`` (or its
    decorators), with a reason after the marker."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) - 1  # 0-based index of the first line
    i = first - 1
    while i >= 0 and lines[i].strip().startswith("#"):
        text = lines[i].strip()
        if text.startswith(MARKER) and text[len(MARKER):].strip():
            return True
        i -= 1
    return False


def oversized(source: str, where: str) -> list[str]:
    """Every class over the bar and every unexcused function over it in ``source``."""
    tree, lines = ast.parse(source), source.splitlines()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and _lines(node) > MAX_CLASS_LINES:
            found.append(f"{where}:{node.lineno} class {node.name}: {_lines(node)} lines > {MAX_CLASS_LINES}")
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and _lines(node) > MAX_FUNCTION_LINES \
                and not _excused(node, lines):
            found.append(f"{where}:{node.lineno} {node.name}: {_lines(node)} lines > {MAX_FUNCTION_LINES} "
                         f"(split it, or say why above it with '{MARKER} <reason>')")
    return found


def test_no_class_or_function_of_the_library_is_over_its_bar() -> None:
    found = [f for path in sorted(PACKAGE.rglob("*.py"))
             for f in oversized(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not found, "\n".join(found)


def _function(lines: int, comment: str = "") -> str:
    body = "".join(f"    x{i} = {i}\n" for i in range(lines - 1))
    return f"{comment}def f():\n{body}"


@pytest.mark.parametrize("source,count", [
    (_function(80), 0),
    (_function(81), 1),
    (_function(81, "# long: one table per case, read top to bottom\n"), 0),
    (_function(81, "# long:\n"), 1),  # a marker without a reason does not excuse
    (_function(81, "# long: a reason\n\n"), 1),  # nor one separated from the def by a blank line
    ("# long: a reason\n@staticmethod\n" + _function(81).replace("def f", "def g"), 0),
    ("class C:\n" + "".join(f"    a{i} = {i}\n" for i in range(350)), 1),
    ("class C:\n" + "".join(f"    a{i} = {i}\n" for i in range(349)), 0),
])
def test_the_bars_count_what_they_say(source: str, count: int) -> None:
    assert len(oversized(source, "x.py")) == count
