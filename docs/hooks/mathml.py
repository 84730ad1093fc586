"""MkDocs hook: the docs' maths as MathML, rendered at build time, offline.

Pages write TeX between ``$...$`` (inline) or ``$$...$$`` (display);
``pymdownx.arithmatex`` (``generic: true``) wraps it in ``<span|div
class="arithmatex">``, and this hook replaces each by the MathML that
``latex2mathml`` (a pure-Python PyPI package) makes of it. Browsers render MathML
themselves: no script, font or CDN is needed when the site is opened from disk.
A formula latex2mathml cannot read fails the build, naming the page.
"""

from __future__ import annotations

import html
import re
from typing import Any

from latex2mathml.converter import convert
from mkdocs.exceptions import PluginError

_INLINE = re.compile(r'<span class="arithmatex">\\\((.*?)\\\)</span>', re.S)
_BLOCK = re.compile(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', re.S)


def to_mathml(tex: str, *, display: bool, where: str = "") -> str:
    """MathML of one TeX formula (``tex`` as arithmatex escaped it for HTML)."""
    source = html.unescape(tex).strip()
    try:
        math = convert(source, display="block" if display else "inline")
    except Exception as exc:  # latex2mathml raises several exception types
        raise PluginError(
            f"{where}: formula {source!r} does not convert: {type(exc).__name__} {exc}"
        ) from exc
    return f'<div class="math-display">{math}</div>' if display else math


def render(content: str, where: str = "") -> str:
    """Replace every arithmatex span/div of a page's HTML by MathML."""
    content = _BLOCK.sub(
        lambda m: to_mathml(m.group(1), display=True, where=where), content
    )
    return _INLINE.sub(
        lambda m: to_mathml(m.group(1), display=False, where=where), content
    )


def on_page_content(html_text: str, page: Any, **_: Any) -> str:
    """MkDocs event: the page's HTML after Markdown."""
    return render(html_text, where=page.file.src_uri)
