"""mkdocs hook: math rendered to MathML at build time, so the site needs no CDN or JavaScript.

``pymdownx.arithmatex`` (generic mode) finds the math and wraps it as ``\\(...\\)`` in a
``span.arithmatex`` (inline) or ``\\[...\\]`` in a ``div.arithmatex`` (display); this hook
replaces each with the MathML that :mod:`latex2mathml` produces, which browsers render natively.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)


def _mathml(tex: str, display: str) -> str:
    return convert(html.unescape(tex), display=display)


def on_page_content(content: str, **kwargs: object) -> str:
    content = _BLOCK.sub(lambda m: f'<div class="math">{_mathml(m.group(1), "block")}</div>', content)
    return _INLINE.sub(lambda m: _mathml(m.group(1), "inline"), content)
