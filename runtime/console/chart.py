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
