"""Matplotlib settings and the SVG writer shared by every picture of the site.

Scope: one style for all pictures, and turning a ``matplotlib.figure.Figure`` into SVG text whose bytes depend
only on what was drawn: text stays text (``svg.fonttype = "none"``: searchable, and drawn by the reader's own
fonts, Chinese included), element ids come from a fixed salt, and no date is written. Text is measured with
the DejaVu Sans that matplotlib ships, so the layout is the same on every machine; a Chinese character is
measured a little wider than a CJK font draws it, which leaves room rather than overlap. A line made of
parts (a chart's subtitle) is broken between its parts where it would be wider than the figure
(:func:`lines_within`), so no text starts left of the picture.
Non-scope: what any picture shows (``*_picture.py``, ``charts.py``).
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

STYLE: dict[str, Any] = {
    "svg.fonttype": "none",
    "svg.hashsalt": "mini-deepinfer",
    "font.family": ["sans-serif"],
    "font.sans-serif": ["DejaVu Sans"],
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.titleweight": "bold",
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "hatch.linewidth": 0.8,
}
SIDE_PAD = 6.0  # points kept free at each side of a figure-wide line (constrained layout pads by 3)
WIDTH = 7.2  # inches: about the width of a page's text column, so a picture is shown at its own size
# tab10, in this order: the colours of requests (A, B, C ... in order of first appearance)
REQUEST_COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2")


@contextmanager
def picture_style() -> Iterator[None]:
    """Matplotlib's rc settings for the site's pictures (DejaVu Sans has no Chinese glyphs: no warning)."""
    import matplotlib

    with matplotlib.rc_context(STYLE), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph \d+ .* missing from font")
        yield


def svg_text(figure: Any) -> str:
    """The figure as SVG text, without a creation date (the same drawing gives the same bytes)."""
    buffer = io.StringIO()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    return buffer.getvalue()


def draw_svg(draw: Callable[[], Any]) -> str:
    """Call ``draw`` (which returns a Figure) under the site's style and return the figure's SVG text."""
    with picture_style():
        return svg_text(draw())


def new_figure(width: float, height: float, **subplots: Any) -> tuple[Any, Any]:
    """A constrained-layout figure of ``width`` x ``height`` inches and its axes (``Figure.subplots``)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), layout="constrained")
    return figure, figure.subplots(**subplots)


def lines_within(parts: list[str], width: float, joint: str = " · ") -> str:
    """``parts`` joined by ``joint``, a new line started before a part that would make the line wider than
    ``width`` inches (less :data:`SIDE_PAD` each side), measured as the SVG writer measures a figure's title:
    DejaVu Sans at the style's ``figure.titlesize``. A part wider than that by itself keeps a line of its own.
    Call it under :func:`picture_style`."""
    import matplotlib
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextToPath

    font, measure = FontProperties(size=matplotlib.rcParams["figure.titlesize"]), TextToPath()
    room = width * 72 - 2 * SIDE_PAD

    def fits(line: str) -> bool:
        return measure.get_text_width_height_descent(line, font, ismath=False)[0] <= room

    lines = [parts[0]]
    for part in parts[1:]:
        joined = f"{lines[-1]}{joint}{part}"
        lines[-1:] = [joined] if fits(joined) else [lines[-1], part]
    return "\n".join(lines)


def request_colors(request_ids: list[str]) -> dict[str, str]:
    """One colour per request, in the order the requests first appear."""
    return {rid: REQUEST_COLORS[i % len(REQUEST_COLORS)] for i, rid in enumerate(request_ids)}
