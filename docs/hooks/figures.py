"""MkDocs hook: every figure links to its own image (click to zoom, offline).

Multi-panel result figures are shrunk to the text width; wrapping each ``<img>``
that is not already a link in ``<a class="zoom" href="SRC">`` lets a reader open the
PNG at full size, with no script (``docs/assets/stylesheets/extra.css`` styles it).
"""

from __future__ import annotations

import re
from typing import Any

# every <img>; one inside a link keeps that link's target
_IMG = re.compile(r'(<img\b[^>]*\bsrc="([^"]+)"[^>]*>)')


def link_figures(html: str) -> str:
    """Wrap each ``<img src=...>`` that is not inside ``<a>`` in a link to itself."""
    out = []
    pos = 0
    for match in _IMG.finditer(html):
        before = html[: match.start()]
        inside_link = before.rfind("<a ") > before.rfind("</a>")
        out.append(html[pos : match.start()])
        if inside_link:
            out.append(match.group(1))
        else:
            src = match.group(2)
            out.append(f'<a class="zoom" href="{src}">{match.group(1)}</a>')
        pos = match.end()
    out.append(html[pos:])
    return "".join(out)


def on_page_content(html: str, **_: Any) -> str:
    """MkDocs event: the page's HTML after Markdown."""
    return link_figures(html)
