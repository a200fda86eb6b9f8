"""Line charts drawn on the server as inline SVG (no script): every label escaped."""

from __future__ import annotations

import time
from collections.abc import Sequence

from markupsafe import Markup, escape

#: one series: its label and its (time, value) points
Series = tuple[str, Sequence[tuple[float, float]]]

_W, _H = 640, 180
_LEFT, _RIGHT, _TOP, _BOTTOM = 48, 150, 28, 24


def _nice(top: float) -> float:
    if top <= 0:
        return 1.0
    step = 10 ** len(str(int(top))) / 10 if top >= 1 else 1.0
    for m in (1, 2, 2.5, 5, 10):
        if top <= m * step:
            return m * step
    return top


def line_chart(title: str, series: Sequence[Series], empty: str = "no samples yet") -> Markup:
    """An SVG line chart of ``series`` over their common time span; ``empty`` when there is
    nothing to draw (fewer than two points in every series)."""
    points = [p for _, pts in series for p in pts]
    t = escape(title)
    if len({p[0] for p in points}) < 2:
        return Markup(
            f'<svg class="chart" role="img" viewBox="0 0 {_W} 40" width="{_W}" height="40">'
            f"<title>{t}</title>"
            f'<text x="8" y="24" class="muted">{t}: {escape(empty)}</text></svg>'
        )
    t0, t1 = min(p[0] for p in points), max(p[0] for p in points)
    top = _nice(max(p[1] for p in points))
    pw, ph = _W - _LEFT - _RIGHT, _H - _TOP - _BOTTOM

    def x(v: float) -> float:
        return _LEFT + (v - t0) / (t1 - t0) * pw

    def y(v: float) -> float:
        return _TOP + ph - v / top * ph

    out = [
        f'<svg class="chart" role="img" viewBox="0 0 {_W} {_H}" width="{_W}" height="{_H}">',
        f"<title>{t}</title>",
        f'<text class="caption" x="8" y="16">{t}</text>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP + ph}" x2="{_LEFT + pw}" y2="{_TOP + ph}"/>',
        f'<line class="axis" x1="{_LEFT}" y1="{_TOP}" x2="{_LEFT}" y2="{_TOP + ph}"/>',
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + 8}" text-anchor="end">{top:g}</text>',
        f'<text class="tick" x="{_LEFT - 4}" y="{_TOP + ph}" text-anchor="end">0</text>',
        f'<text class="tick" x="{_LEFT}" y="{_H - 6}">{escape(_clock(t0))}</text>',
        f'<text class="tick" x="{_LEFT + pw}" y="{_H - 6}" text-anchor="end">'
        f"{escape(_clock(t1))}</text>",
    ]
    for i, (label, pts) in enumerate(series):
        cls = f"s{i % 8}"
        if pts:
            path = " ".join(f"{x(a):.1f},{y(b):.1f}" for a, b in pts)
            out.append(f'<polyline class="line {cls}" points="{path}"/>')
        ly = _TOP + 12 + i * 16
        out.append(
            f'<rect class="key {cls}" x="{_LEFT + pw + 10}" y="{ly - 8}" width="10" height="10"/>'
            f'<text class="label" x="{_LEFT + pw + 24}" y="{ly + 1}">{escape(label)}</text>'
        )
    out.append("</svg>")
    return Markup("".join(out))


def _clock(ts: float) -> str:
    return time.strftime("%H:%M:%S", time.gmtime(ts)) + " UTC"


#: the per-minute chart: its size and margins
_BW, _BH = 720, 170
_BL, _BR, _BT, _BB = 44, 110, 26, 24


def bar_chart(title: str, series: Sequence[tuple[str, Sequence[int]]]) -> Markup:
    """Bars per minute, oldest minute left, the current one right: ``series`` holds each
    label's counts with index 0 the current minute (as ``runtime.operate.per_minute`` gives
    them). Each bar is a ``rect`` carrying ``data-series``, ``data-minute`` (minutes ago) and
    ``data-count``; a minute with no messages draws no bar."""
    t = escape(title)
    minutes = max((len(c) for _, c in series), default=0)
    if not minutes:
        return Markup("")
    top = _nice(max((max(c, default=0) for _, c in series), default=0))
    pw, ph = _BW - _BL - _BR, _BH - _BT - _BB
    slot = pw / minutes
    width = max(slot / max(len(series), 1) - 0.5, 0.5)
    out = [
        f'<svg class="chart bars" role="img" viewBox="0 0 {_BW} {_BH}" width="{_BW}" '
        f'height="{_BH}" data-minutes="{minutes}">',
        f"<title>{t}</title>",
        f'<text class="caption" x="8" y="16">{t}</text>',
        f'<line class="axis" x1="{_BL}" y1="{_BT + ph}" x2="{_BL + pw}" y2="{_BT + ph}"/>',
        f'<line class="axis" x1="{_BL}" y1="{_BT}" x2="{_BL}" y2="{_BT + ph}"/>',
        f'<text class="tick" x="{_BL - 4}" y="{_BT + 8}" text-anchor="end">{top:g}</text>',
        f'<text class="tick" x="{_BL - 4}" y="{_BT + ph}" text-anchor="end">0</text>',
        f'<text class="tick" x="{_BL}" y="{_BH - 6}">{minutes} min ago</text>',
        f'<text class="tick" x="{_BL + pw}" y="{_BH - 6}" text-anchor="end">now</text>',
    ]
    for i, (label, counts) in enumerate(series):
        cls = f"s{i % 8}"
        for ago, n in enumerate(counts):
            if n <= 0:
                continue
            h = n / top * ph
            x = _BL + (minutes - 1 - ago) * slot + i * width
            out.append(
                f'<rect class="bar {cls}" data-series="{escape(label)}" data-minute="{ago}" '
                f'data-count="{n}" x="{x:.1f}" y="{_BT + ph - h:.1f}" width="{width:.1f}" '
                f'height="{h:.1f}"><title>{escape(label)}: {n} ({ago} min ago)</title></rect>'
            )
        ly = _BT + 12 + i * 16
        total = sum(counts)
        out.append(
            f'<rect class="key {cls}" x="{_BL + pw + 10}" y="{ly - 8}" width="10" height="10"/>'
            f'<text class="label" x="{_BL + pw + 24}" y="{ly + 1}" data-total="{total}">'
            f"{escape(label)} ({total})</text>"
        )
    out.append("</svg>")
    return Markup("".join(out))
