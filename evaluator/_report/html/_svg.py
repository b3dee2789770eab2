"""Charts drawn as SVG when the report is built, in Python.

Why not a charting library inlined into the page: the charts a run report needs are a few
histograms with markers, which take a hundred lines of Python, while the smallest
well-kept libraries (uPlot, Chart.js) add 50-200 kB of JavaScript to every report, a
dependency to keep current, and charts that exist only after scripts run. SVG drawn here
is a few kilobytes, shows with scripts off, prints, is tested like any other Python (the
bars' counts are attributes), and its colours come from the page's stylesheet, so it
follows the light or dark theme.

Every text that reaches the markup goes through :func:`html.escape`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

import msgspec

from .._stats import Bin

__all__ = ["Marker", "Series", "bar_chart", "fmt_number"]

_W, _H = 520, 228
_LEFT, _RIGHT, _TOP, _BOTTOM = 46, 14, 44, 36


class Series(msgspec.Struct, frozen=True):
    """One count of each :class:`Bin`: its position in ``Bin.counts``, a CSS class for its
    colour, and the label of the legend and tooltips."""

    index: int
    css: str
    label: str


class Marker(msgspec.Struct, frozen=True):
    """A dashed vertical line at ``value`` labelled ``label`` (a percentile, say)."""

    value: float
    label: str


def fmt_number(value: float) -> str:
    """A short, readable number: 3 significant digits, no exponent for everyday sizes."""
    if value == 0:
        return "0"
    size = abs(value)
    if size >= 1e6 or size < 1e-4:
        return f"{value:.2g}"
    if size >= 100:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _nice_step(top: float, ticks: int = 4) -> float:
    raw = max(top, 1.0) / ticks
    power = 10.0 ** math.floor(math.log10(raw))
    for factor in (1.0, 2.0, 2.5, 5.0):
        if raw <= factor * power:
            return max(1.0, factor * power)
    return 10.0 * power


class _Axes:
    """Where values and counts land on the canvas."""

    def __init__(self, low: float, high: float, top: float, log_x: bool) -> None:
        self.log_x = log_x
        self.low = math.log10(low) if log_x else low
        self.high = math.log10(high) if log_x else high
        self.top = top
        self.width = _W - _LEFT - _RIGHT
        self.height = _H - _TOP - _BOTTOM

    def x(self, value: float) -> float:
        v = math.log10(value) if self.log_x else value
        if self.high == self.low:
            return float(_LEFT)
        return _LEFT + (v - self.low) / (self.high - self.low) * self.width

    def y(self, count: float) -> float:
        return _TOP + self.height - count / self.top * self.height


def bar_chart(
    bins: Sequence[Bin],
    *,
    label: str,
    stacked: Sequence[Series],
    overlay: Series | None = None,
    markers: Sequence[Marker] = (),
    log_x: bool = False,
    x_label: str = "",
    x_format: Callable[[float], str] = fmt_number,
    filter_key: str | None = None,
    note: str = "",
) -> str:
    """A histogram: ``stacked`` series as bars, ``overlay`` as an outline on top.

    With ``filter_key`` (a table column) each bar carries its range (``data-lo``,
    ``data-hi``, ``data-closed`` on the last, whose upper end is included), so the page's
    script can make a click on it filter the table to the bar's examples.
    """
    if not bins:
        return (
            f'<p class="empty">{escape(label)}: nothing measured'
            + (f" ({escape(note)})" if note else "")
            + "</p>"
        )
    low, high = bins[0].lo, bins[-1].hi
    tallest = max(
        max(sum(b.counts[s.index] for s in stacked) for b in bins),
        max((b.counts[overlay.index] for b in bins), default=0) if overlay else 0,
        1,
    )
    step = _nice_step(tallest)
    axes = _Axes(low, high, step * math.ceil(tallest / step), log_x)
    parts = [
        f'<svg class="chart" viewBox="0 0 {_W} {_H}" role="img" aria-label="{escape(label)}" '
        'xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(label)}</title>",
        *_y_grid(axes, step),
    ]
    for number, b in enumerate(bins):
        target = None
        if filter_key is not None:
            target = (filter_key, x_label or label, number == len(bins) - 1)
        parts.append(_bar(b, axes, stacked, target, x_format))
    if overlay is not None:
        parts.append(_outline(bins, axes, overlay))
    parts.extend(_x_ticks(low, high, axes, x_format))
    parts.extend(_markers(markers, low, high, axes))
    parts.append(_legend([*stacked, *([overlay] if overlay else [])]))
    if x_label:
        parts.append(
            f'<text class="axis-label" x="{_LEFT + axes.width / 2:.1f}" y="{_H - 4}" '
            f'text-anchor="middle">{escape(x_label)}</text>'
        )
    parts.append("</svg>")
    if note:
        parts.append(f'<p class="chart-note">{escape(note)}</p>')
    return "".join(parts)


def _y_grid(axes: _Axes, step: float) -> list[str]:
    out = []
    tick = 0.0
    while tick <= axes.top + 1e-9:
        ty = axes.y(tick)
        out.append(
            f'<line class="grid" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{ty:.1f}" y2="{ty:.1f}"/>'
            f'<text class="tick" x="{_LEFT - 6}" y="{ty + 4:.1f}" text-anchor="end">'
            f"{fmt_number(tick)}</text>"
        )
        tick += step
    return out


def _markers(markers: Sequence[Marker], low: float, high: float, axes: _Axes) -> list[str]:
    out = []
    placed: list[float] = []
    for marker in markers:
        if low <= marker.value <= high:
            mx = axes.x(marker.value)
            # Labels of markers close together are stacked rather than drawn over each other.
            rise = 10 * sum(1 for other in placed if abs(other - mx) < 24)
            placed.append(mx)
            out.append(
                f'<line class="marker" x1="{mx:.1f}" x2="{mx:.1f}" y1="{_TOP - 4 - rise}" '
                f'y2="{_TOP + axes.height}"/><text class="marker-label" x="{mx:.1f}" '
                f'y="{_TOP - 8 - rise}" text-anchor="middle">{escape(marker.label)}</text>'
            )
    return out


def _bar(
    b: Bin,
    axes: _Axes,
    stacked: Sequence[Series],
    target: tuple[str, str, bool] | None,
    x_format: Callable[[float], str],
) -> str:
    x, y = axes.x, axes.y
    left, right = x(b.lo), x(b.hi)
    bar_width = max(right - left - 1.0, 1.0)
    counts = ", ".join(f"{b.counts[s.index]:,} {s.label}" for s in stacked)
    title = f"{x_format(b.lo)} to {x_format(b.hi)}: {counts}"
    attrs = ""
    if target is not None:
        key, what, closed = target
        attrs = (
            f' data-filter="{escape(key)}" data-label="{escape(what)}" data-lo="{b.lo!r}"'
            f' data-hi="{b.hi!r}"' + (' data-closed=""' if closed else "")
        )
    out = [f'<g class="bin"{attrs}><title>{escape(title)}</title>']
    base = 0.0
    total = sum(b.counts[s.index] for s in stacked)
    # A transparent full-height target: a bar of one example is still easy to click.
    out.append(
        f'<rect class="hit" x="{left:.1f}" y="{_TOP}" width="{bar_width:.1f}" '
        f'height="{y(0) - _TOP:.1f}"/>'
    )
    for s in stacked:
        count = b.counts[s.index]
        if count:
            top, bottom = y(base + count), y(base)
            out.append(
                f'<rect class="{s.css}" x="{left:.1f}" y="{top:.1f}" width="{bar_width:.1f}" '
                f'height="{max(bottom - top, 0.5):.1f}" data-count="{count}"/>'
            )
            base += count
    out.append(f'<desc data-total="{total}"></desc></g>')
    return "".join(out)


def _outline(bins: Sequence[Bin], axes: _Axes, overlay: Series) -> str:
    x, y = axes.x, axes.y
    points = [f"M{x(bins[0].lo):.1f},{y(0):.1f}"]
    for b in bins:
        level = y(b.counts[overlay.index])
        points.append(f"L{x(b.lo):.1f},{level:.1f}L{x(b.hi):.1f},{level:.1f}")
    points.append(f"L{x(bins[-1].hi):.1f},{y(0):.1f}")
    return f'<path class="{overlay.css}" d="{"".join(points)}"/>'


def _x_ticks(low: float, high: float, axes: _Axes, x_format: Callable[[float], str]) -> list[str]:
    x = axes.x
    if axes.log_x:
        values = [
            10.0**p for p in range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)
        ]
        if len(values) < 2:
            # Less than two decades: label the ends too, unless a decade sits right by one.
            for end in (low, high):
                if all(abs(x(end) - x(v)) > 40 for v in values):
                    values.append(end)
            values.sort()
    else:
        values = [low + (high - low) * i / 4 for i in range(5)] if high > low else [low]
    baseline = _H - _BOTTOM
    out = [f'<line class="axis" x1="{_LEFT}" x2="{_W - _RIGHT}" y1="{baseline}" y2="{baseline}"/>']
    for value in values:
        tx = x(value)
        out.append(
            f'<line class="axis" x1="{tx:.1f}" x2="{tx:.1f}" y1="{baseline}" y2="{baseline + 4}"/>'
            f'<text class="tick" x="{tx:.1f}" y="{baseline + 16}" text-anchor="middle">'
            f"{escape(x_format(value))}</text>"
        )
    return out


def _legend(series: Sequence[Series]) -> str:
    if len(series) < 2:
        return ""
    out = []
    cursor = float(_W - _RIGHT)
    for s in reversed(series):
        text_width = 6.2 * len(s.label)
        cursor -= text_width
        out.append(f'<text class="legend" x="{cursor:.1f}" y="12">{escape(s.label)}</text>')
        cursor -= 14
        out.append(f'<rect class="{s.css} swatch" x="{cursor:.1f}" y="3" width="10" height="10"/>')
        cursor -= 10
    return "".join(out)
