"""Plots small enough for the asset page to show inline: grouped bars as an SVG in a markdown value.

Dagster's UI renders a markdown metadata value in place on an asset's page only while it is shorter than
:data:`INLINE_LIMIT` characters; a longer one (any PNG plot) hides behind "[Show Markdown]". So the figures a person
looks for first are drawn here as an SVG data URI, percent-encoded (no base64: a third shorter), its bars one path per
series, its labels cut short, and rows dropped from the end until it fits. The full matplotlib plot stays one click
away beside it.
"""

import math
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote
from xml.sax.saxutils import escape

import dagster as dg

__all__ = ["INLINE_LIMIT", "BarRow", "inline_bars"]

INLINE_LIMIT = 1000  # the UI's bound on a markdown value it renders in place
LABEL_PX, BAR_PX, ROW_PX, BAR_HEIGHT_PX = 78, 200, 13, 5
LABEL_CHARS = 13


@dataclass(frozen=True)
class BarRow:
    """One row of grouped bars: its label and a value per series."""

    label: str
    values: tuple[float, ...]


def _drawable(scale: float) -> bool:
    return math.isfinite(scale) and scale > 0


def _bar_px(value: float, scale: float) -> int:
    """A bar's length: ``value`` over ``scale``, clipped to the bar area; an unbounded value fills it, an unknown
    one (NaN) or a scale that is not a positive number draws nothing."""
    if not _drawable(scale) or math.isnan(value):
        return 0
    return round(BAR_PX * min(max(value / scale, 0.0), 1.0))


def _svg(rows: Sequence[BarRow], colors: Sequence[str], scale: float, marker: float | None) -> str:
    height = ROW_PX * len(rows) + 2
    width = LABEL_PX + BAR_PX + 4
    parts = [
        f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' font-size='9' "
        "font-family='sans-serif'><rect width='100%' height='100%' fill='white'/>"
    ]
    bars: list[list[str]] = [[] for _ in colors]
    for i, row in enumerate(rows):
        top = i * ROW_PX
        label = row.label if len(row.label) <= LABEL_CHARS else row.label[: LABEL_CHARS - 1] + "…"
        parts.append(f"<text y='{top + 10}'>{escape(label)}</text>")
        for j, value in enumerate(row.values[: len(colors)]):
            length = _bar_px(value, scale)
            bars[j].append(f"M{LABEL_PX},{top + 1 + j * (BAR_HEIGHT_PX + 1)}h{length}v{BAR_HEIGHT_PX}H{LABEL_PX}z")
    parts += [f"<path fill='{color}' d='{''.join(d)}'/>" for color, d in zip(colors, bars) if d]
    if marker is not None and math.isfinite(marker) and _drawable(scale):
        x = LABEL_PX + _bar_px(marker, scale)
        parts.append(f"<path stroke='black' stroke-dasharray='2' d='M{x},0V{height}'/>")
    parts.append("</svg>")
    return "".join(parts)


def inline_bars(
    alt: str, rows: Sequence[BarRow], colors: Sequence[str], *, scale: float, marker: float | None = None
) -> dg.MetadataValue | None:
    """``rows`` as grouped horizontal bars, a series per color, each bar its value over ``scale`` (clipped to it),
    ``marker`` a dashed line at that value; as many rows as fit inline, in their order (None: not even one)."""
    for count in range(len(rows), 0, -1):
        svg = _svg(rows[:count], colors, scale, marker)
        markdown = f"![{alt}](data:image/svg+xml,{quote(svg, safe=chr(39) + '=/:,.')})"
        if len(markdown) < INLINE_LIMIT:
            return dg.MetadataValue.md(markdown)
    return None
