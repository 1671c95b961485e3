"""One visual vocabulary for every picture of the toolkit: what a colour, shape or border means.

The session graph, the compaction diff (its table and its graph), the recorded-aging table,
the widgets' tables and the plots all take their colours and marks from here, and every
picture that uses them carries a legend built from here. docs/viz.md ("Visual vocabulary")
is the same tables written out; a test checks that it says what this module says.

Two channels that never stand for each other:

* **Role** - who wrote a message - is the *fill* of a node (and its shape): user blue,
  assistant green, system brown, tool orange, agentic function yellow, summary red
  (a diamond). Groups drawn as one node are grey squares; a folded user turn is a
  hexagon in its first message's colour.
* **Membership** - what a compaction or an aging step did to a message - is the
  *border*: its colour is a dark ink that is never one of the role fills (purple,
  black, grey, dark gold, dark red), its dash pattern tells the same thing again for
  readers who do not see the colour, and what left the context (folded, cleared) is
  drawn faded. In a table the same colour is a tag with the word written in it.

So green is always an assistant call and never "protected"; a protected message is a
purple ring whatever its fill.

Plots: a compaction is marked in the summary's red, a recorded microcompaction in the
"cleared" ink; the three thresholds of the budget are greys from light to black (how
close to the window), so red keeps one meaning. The colours of series (configurations,
estimators) are a categorical palette that means nothing beyond its legend.

Numbers drawn in the graph say what they count (``NUMBER_KEY``): ``#n`` is a sequence
number (the node's position in the session, ``seq``), ``turn n`` the n-th user turn,
and a count always carries its noun ("12 folded", "345 earlier", "+34 inside").
"""

from __future__ import annotations

from dataclasses import dataclass

from .html import escape_text

__all__ = [
    "Fill",
    "Mark",
    "Line",
    "ROLES",
    "MEMBERSHIP",
    "EDGES",
    "EVENTS",
    "THRESHOLD_STYLE",
    "BUDGET_PARTS",
    "SERIES",
    "NUMBER_KEY",
    "FADED_OPACITY",
    "vis_style",
    "legend_html",
    "tag_html",
    "table_css",
    "text_cell",
    "number_cell",
    "id_span",
    "vocabulary_markdown",
]


@dataclass(frozen=True)
class Fill:
    """A role: the fill colour and shape of a node (vis-network shape names)."""

    color: str
    shape: str
    meaning: str


@dataclass(frozen=True)
class Mark:
    """A membership: border colour, width and dash pattern, faded fill, and what it means."""

    color: str
    width: int
    dashes: tuple[int, ...]  # () = solid
    faded: bool
    meaning: str
    text_color: str = "#fff"  # of a table tag in this colour

    @property
    def css_border(self) -> str:
        style = "solid" if not self.dashes else ("dotted" if self.dashes[0] <= 2 else "dashed")
        return f"{self.width}px {style} {self.color}"


@dataclass(frozen=True)
class Line:
    """An edge kind: colour and dash pattern."""

    color: str
    dashes: bool
    meaning: str


# Fills: Tableau-10, distinguishable and colour-blind tolerable.
ROLES: dict[str, Fill] = {
    "user": Fill("#4e79a7", "dot", "a user message"),
    "assistant": Fill("#59a14f", "dot", "an assistant (LLM) call"),
    "system": Fill("#9c755f", "dot", "a system message"),
    "tool": Fill("#f28e2b", "dot", "a tool result"),
    "function": Fill("#edc948", "dot", "an agentic function (code node)"),
    "summary": Fill("#e15759", "diamond", "a compaction's summary"),
    "collapsed": Fill("#bab0ac", "square", "a group drawn as one node (folded range, earlier nodes)"),
    "turn": Fill("#4e79a7", "hexagon", "a user turn drawn as one node (double-click opens it)"),
}

# Borders: dark inks, none of them a role fill.
MEMBERSHIP: dict[str, Mark] = {
    "protected": Mark("#6a3d9a", 3, (), False,
                      "kept verbatim at the head, before the summary (copied to the new branch)"),
    "folded": Mark("#8c8c8c", 2, (6, 4), True, "replaced by the summary (faded)"),
    "summary": Mark("#e15759", 3, (), False, "the summary that replaced the folded messages"),
    "kept": Mark("#1a1a1a", 3, (), False,
                 "kept verbatim after the summary (copied to the new branch)"),
    "pinned": Mark("#b8860b", 3, (), False,
                   "in the folded range but kept, copied right after the summary"),
    "copy": Mark("#1a1a1a", 2, (2, 3), False,
                 "a copy on the new branch of a protected or kept message"),
    "cleared": Mark("#b2182b", 2, (2, 3), True,
                    "a tool result whose content an aging step cleared (faded)"),
    "cleared earlier": Mark("#f4a582", 2, (2, 3), True, "cleared by an earlier aging step",
                            text_color="#222"),
}

EDGES: dict[str, Line] = {
    "predecessor": Line("#8a8a8a", False, "the conversation chain: the message before"),
    "caller": Line("#8a8a8a", True, "who started a call: an LLM call to its tool, a function to its calls"),
    "reads": Line("#c51b7d", False, "what an LLM call had in its prompt (click a call to draw them)"),
}

# Markers of events along a request axis (plots).
EVENTS: dict[str, str] = {
    "compaction": MEMBERSHIP["summary"].color,
    "microcompaction": MEMBERSHIP["cleared"].color,
}

# The budget's three thresholds: greys from light to black, line styles apart.
THRESHOLD_STYLE: dict[str, tuple[str, str]] = {
    "recommend": ("#9a9a9a", ":"),
    "trigger": ("#555555", "--"),
    "emergency": ("#000000", "-."),
}

# The parts of a request (token composition): the system prompt in the system role's colour.
BUDGET_PARTS: dict[str, str] = {
    "system": ROLES["system"].color,
    "history": "#a0cbe8",
    "tools": "#ffbe7d",
    "reserve": "#d9d9d9",
}

# Categorical series (configurations, estimators): meaning only through a legend.
SERIES = ["#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
          "#ff9da7", "#9c755f", "#bab0ac"]

# (what the legend says, what the hover and docs say)
NUMBER_KEY: dict[str, tuple[str, str]] = {
    "#n": ("sequence number", "the node's position in the session (seq), not a turn"),
    "turn n": ("user turn", "the n-th user turn: a user message and all that follows it, "
                            "numbered from 1 as in turns_df"),
    "n folded, n earlier, +n inside": ("node counts", "how many nodes a group or a collapsed "
                                                       "frame holds"),
}

FADED_OPACITY = 0.45


def vis_style(role: str, membership: str | None) -> dict:
    """vis-network node options for a role and a membership (colour, border, shape)."""
    fill = ROLES[role]
    mark = MEMBERSHIP.get(membership or "")
    style: dict = {
        "shape": fill.shape,
        "color": {"background": fill.color, "border": mark.color if mark else fill.color},
        "borderWidth": mark.width if mark else 1,
    }
    if mark and mark.dashes:
        style["shapeProperties"] = {"borderDashes": list(mark.dashes)}
    if mark and mark.faded and role != "collapsed":
        style["opacity"] = FADED_OPACITY
    return style


_LEGEND_CSS = (
    ".opctx-legend{display:flex;flex-wrap:wrap;gap:3px 12px;align-items:center;"
    "font:12px/1.4 system-ui,sans-serif;color:#333;margin:2px 0}"
    ".opctx-legend .k{display:inline-flex;align-items:center;gap:4px;white-space:nowrap}"
    ".opctx-legend .h{color:#777}"
    ".opctx-legend .sw{display:inline-block;width:11px;height:11px;border-radius:50%;box-sizing:border-box}"
    ".opctx-legend .sw.square{border-radius:1px}"
    ".opctx-legend .sw.diamond{border-radius:1px;transform:rotate(45deg) scale(.85)}"
    ".opctx-legend .sw.hexagon{clip-path:polygon(25% 5%,75% 5%,100% 50%,75% 95%,25% 95%,0 50%)}"
    ".opctx-legend .ring{display:inline-block;width:13px;height:13px;border-radius:50%;"
    "box-sizing:border-box;background:#eee}"
    ".opctx-legend .ln{display:inline-block;width:18px;height:0;border-top-width:2px}"
)


def _fill_swatch(fill: Fill) -> str:
    return f'<span class="sw {fill.shape}" style="background:{fill.color}"></span>'


def _ring_swatch(mark: Mark) -> str:
    opacity = f";opacity:{FADED_OPACITY + 0.2}" if mark.faded else ""
    return f'<span class="ring" style="border:{mark.css_border}{opacity}"></span>'


def legend_html(
    roles: list[str] | tuple[str, ...] = (),
    membership: list[str] | tuple[str, ...] = (),
    edges: list[str] | tuple[str, ...] = (),
    *,
    numbers: bool = False,
    style: bool = True,
) -> str:
    """A legend of the given entries, in the vocabulary's order: fills ("role"),
    rings ("membership"), lines ("edges") and, with ``numbers``, the key of the numbers
    in labels. Each entry's meaning is its ``title`` (hover). Our own constants only."""
    parts: list[str] = [f"<style>{_LEGEND_CSS}</style>"] if style else []
    parts.append('<div class="opctx-legend">')
    if roles:
        parts.append('<span class="h">fill = role:</span>')
        for name in (r for r in ROLES if r in roles):
            parts.append(f'<span class="k" title="{escape_text(ROLES[name].meaning)}">'
                         f"{_fill_swatch(ROLES[name])}{name}</span>")
    if membership:
        parts.append('<span class="h">border = membership:</span>')
        for name in (m for m in MEMBERSHIP if m in membership):
            parts.append(f'<span class="k" title="{escape_text(MEMBERSHIP[name].meaning)}">'
                         f"{_ring_swatch(MEMBERSHIP[name])}{name}</span>")
    if edges:
        parts.append('<span class="h">edges:</span>')
        for name in (e for e in EDGES if e in edges):
            line = EDGES[name]
            dash = "dashed" if line.dashes else "solid"
            parts.append(f'<span class="k" title="{escape_text(line.meaning)}"><span class="ln" '
                         f'style="border-top:2px {dash} {line.color}"></span>{name}</span>')
    if numbers:
        parts.append('<span class="h">numbers:</span>')
        for token, (short, meaning) in NUMBER_KEY.items():
            parts.append(f'<span class="k" title="{escape_text(meaning)}"><b>{escape_text(token)}</b>'
                         f" {escape_text(short)}</span>")
    parts.append("</div>")
    return "".join(parts)


def tag_html(status: str, title: str | None = None) -> str:
    """A membership as a table tag: the word on the membership's colour."""
    mark = MEMBERSHIP.get(status)
    color, text = (mark.color, mark.text_color) if mark else ("#999", "#fff")
    hover = f' title="{escape_text(title)}"' if title else ""
    return (f'<span class="opctx-tag" style="background:{color};color:{text}"{hover}>'
            f"{escape_text(status)}</span>")


def table_css(table_class: str) -> str:
    """The rules every opctx table follows, scoped to ``table.<table_class>``.

    Text is left-aligned, numbers right-aligned in tabular figures (``td.num``); a long
    text cell (``td.text``) shows at most three lines and keeps the whole text in its
    ``title`` (hover); an id (``.id``) is cut with an ellipsis, whole in its ``title``.
    The selectors are one element more specific than JupyterLab's rendered-HTML rules
    (``.jp-RenderedHTMLCommon td``: right-aligned, no border, ``white-space: normal``),
    so a table looks the same in a notebook, a widget and a saved page. A row marked by
    membership (``<tr class="folded">``, ``td.m-folded``) gets that membership's ink on its
    left border, faded when the message left the context. Our own constants only.
    """
    t = f"table.{table_class}"
    rules = [
        f"{t}{{border-collapse:collapse;font:12px/1.35 system-ui,sans-serif;margin:0;"
        "border:none;color:#222}",
        f"{t} caption{{text-align:left;padding:4px 0;caption-side:top}}",
        f"{t} th,{t} td{{border:1px solid #e3e3e3;padding:3px 6px;vertical-align:top;"
        "text-align:left;white-space:normal;max-width:none;line-height:1.35}",
        f"{t} th{{background:#f6f6f6;font-weight:600}}",
        f"{t} th.num,{t} td.num{{text-align:right;font-variant-numeric:tabular-nums;"
        "white-space:nowrap}",
        f"{t} td.text .clip{{display:-webkit-box;-webkit-box-orient:vertical;"
        "-webkit-line-clamp:3;line-clamp:3;overflow:hidden;overflow-wrap:anywhere}",
        f"{t} .id{{display:block;max-width:16em;overflow:hidden;text-overflow:ellipsis;"
        "white-space:nowrap;color:#777;font-size:11px}",
        f"{t} .opctx-tag{{display:inline-block;min-width:58px;padding:0 4px;border-radius:3px;"
        "font-size:11px;text-align:center;white-space:nowrap}",
    ]
    for name, mark in MEMBERSHIP.items():
        cls = name.replace(" ", "-")
        rules.append(f"{t} tr.{cls} > td:first-child,{t} td.m-{cls}{{border-left:{mark.width}px "
                     f"solid {mark.color}}}")
        if mark.faded:
            rules.append(f"{t} tr.{cls} > td,{t} td.f-{cls}{{color:#777;background:#f4f4f4}}")
    return "".join(rules)


def text_cell(text: str, *, css: str = "text", attrs: str = "") -> str:
    """A ``<td>`` of text from data: at most three lines shown, the whole of it on hover."""
    escaped = escape_text(text)
    return f'<td class="{css}" title="{escaped}"{attrs}><div class="clip">{escaped}</div></td>'


def number_cell(value: object, *, prefix: str = "", css: str = "num", attrs: str = "",
                separators: bool = True) -> str:
    """A right-aligned ``<td>`` of a count (thousands separated unless ``separators=False``;
    empty for a missing value)."""
    if value is None or (isinstance(value, float) and value != value):
        shown = ""
    elif isinstance(value, bool) or not isinstance(value, int | float) or not separators:
        shown = prefix + str(value)
    elif float(value).is_integer():
        shown = prefix + f"{int(value):,}"
    else:
        shown = prefix + (f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}")
    return f'<td class="{css}"{attrs}>{escape_text(shown)}</td>'


def id_span(ident: object) -> str:
    """An id in a cell: cut with an ellipsis, whole on hover."""
    text = escape_text(ident)
    return f'<span class="id" title="{text}">{text}</span>'


def vocabulary_markdown() -> str:
    """The vocabulary as the Markdown tables of docs/viz.md (a test keeps them equal)."""
    lines = ["| role (fill) | colour | shape | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | `{f.color}` | {f.shape} | {f.meaning} |" for name, f in ROLES.items()]
    lines += ["", "| membership (border) | colour | border | faded | meaning |",
              "| --- | --- | --- | --- | --- |"]
    for name, m in MEMBERSHIP.items():
        border = f"{m.width} px " + ("solid" if not m.dashes else f"dashes {list(m.dashes)}")
        lines.append(f"| {name} | `{m.color}` | {border} | {'yes' if m.faded else 'no'} | {m.meaning} |")
    lines += ["", "| edge | colour | line | meaning |", "| --- | --- | --- | --- |"]
    lines += [f"| {name} | `{e.color}` | {'dashed' if e.dashes else 'solid'} | {e.meaning} |"
              for name, e in EDGES.items()]
    lines += ["", "| number in a label | what it counts |", "| --- | --- |"]
    lines += [f"| `{token}` | {short}: {meaning} |" for token, (short, meaning) in NUMBER_KEY.items()]
    return "\n".join(lines)
