"""Escaping helpers shared by every HTML the toolkit renders.

Everything the toolkit shows comes from transcripts, and transcripts are
untrusted: a recorded tool result may hold ``<script>`` or
``<img src=x onerror=...>`` text. Nothing from a transcript may ever reach a
browser as markup. There are exactly three contexts in which such text is
emitted, and each has one helper here:

``escape_text``
    HTML element content and attribute values: ``html.escape(..., quote=True)``
    (``&``, ``<``, ``>``, ``"`` and ``'``).
``json_for_script``
    data embedded in an inline ``<script>`` block (the graph's nodes and
    edges). ``json.dumps`` alone is not enough: a string holding
    ``</script>`` would close the block. ``<``, ``>`` and ``&`` are written as
    ``\\u003c`` / ``\\u003e`` / ``\\u0026`` (valid JSON and JavaScript, no markup
    anywhere), and U+2028/U+2029 are escaped because older JavaScript engines
    treat them as line terminators inside string literals.
``iframe_srcdoc``
    a whole HTML document shown inside a notebook: it becomes the ``srcdoc``
    attribute of an ``<iframe>``, escaped as an attribute value. The iframe is
    sandboxed with ``allow-scripts`` only (no ``allow-same-origin``), so even a
    script that somehow ran would get an opaque origin, with no access to the
    notebook page, its cookies or the kernel. ``srcdoc`` leaves no file behind
    and needs no server route, so it works the same in JupyterLab, classic
    Notebook and Voila.

``preview`` shortens text for tables and tooltips (one line, an ellipsis);
it never escapes, because the escaping belongs to the output context.
"""

from __future__ import annotations

import html
import json
from typing import Any

from opctx.dag.messages import as_text

__all__ = ["escape_text", "json_for_script", "iframe_srcdoc", "preview", "text_of"]

_SCRIPT_SAFE = str.maketrans(
    {
        "<": "\\u003c",
        ">": "\\u003e",
        "&": "\\u0026",
        "\u2028": "\\u2028",
        "\u2029": "\\u2029",
    }
)


# Display text is exactly the prompt text of a stored value (str as is, None as "",
# else JSON): one definition, in the substrate.
text_of = as_text


def escape_text(value: Any) -> str:
    """``value`` as text, escaped for HTML element content or a quoted attribute."""
    return html.escape(text_of(value), quote=True)


def json_for_script(obj: Any) -> str:
    """``obj`` as JSON that is safe inside an inline ``<script>`` element."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str).translate(
        _SCRIPT_SAFE
    )


def preview(value: Any, limit: int = 120) -> str:
    """The first ``limit`` characters of ``value`` on one line (whitespace collapsed)."""
    text = " ".join(text_of(value).split())
    if limit > 0 and len(text) > limit:
        return text[: max(limit - 1, 0)] + "\u2026"
    return text


def iframe_srcdoc(
    document: str, *, height: int | str = 600, width: str = "100%", title: str = "opctx view"
) -> str:
    """An ``<iframe>`` that shows ``document`` via an escaped ``srcdoc`` attribute.

    Sandboxed with ``allow-scripts`` only: the document's own scripts run, but in
    an opaque origin that cannot touch the embedding page.
    """
    h = f"{int(height)}px" if isinstance(height, int | float) else str(height)
    return (
        f'<iframe class="opctx-frame" title="{escape_text(title)}" '
        f'sandbox="allow-scripts" '
        f'style="width:{escape_text(width)};height:{escape_text(h)};border:1px solid #ddd" '
        f'srcdoc="{html.escape(document, quote=True)}"></iframe>'
    )
