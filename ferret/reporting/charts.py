"""Charts as inline SVG, drawn here on the server: no script, no font, no request. Every label is
escaped (stage and case names come from the contract, variant ids and kernel names may come from a
candidate), and the result is `Markup`, so the HTML template places it as is.

Each chart is a grid of rows (a label at the left, marks along one axis), which is all a reviewer needs:
where each value sits against one reference line (a tolerance, the floor)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from markupsafe import Markup, escape

from ferret.gate.models import CaseTiming
from ferret.reporting.views import StageRow

WIDTH, LABEL, RIGHT, ROW, TOP, BOTTOM = 680, 170, 40, 22, 20, 30
PASS, FAIL, MUTED = "#1a7f37", "#cf222e", "#57606a"
# The stage chart's axis: the error as a fraction of its tolerance, 1e-4 to 1e2 on a log scale.
LOG_LOW, LOG_HIGH = -4.0, 2.0


@dataclass(frozen=True)
class Mark:
    """One mark on a row: where (in the axis's units), its colour and its hover text."""

    value: float
    colour: str
    title: str
    shape: str = "circle"


def _plot_width() -> float:
    return WIDTH - LABEL - RIGHT


def _svg(rows: int, body: list[str], label: str) -> Markup:
    height = TOP + rows * ROW + BOTTOM
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{escape(label)}" width="{WIDTH}" '
        f'height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">'
    )
    return Markup(head + "".join(body) + "</svg>")


def _mark(x: float, y: float, mark: Mark) -> str:
    title = f"<title>{escape(mark.title)}</title>"
    if mark.shape == "bar":
        width = max(x - LABEL, 1)
        return f'<rect x="{LABEL}" y="{y - 6:.1f}" width="{width:.1f}" height="12" fill="{mark.colour}">{title}</rect>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{mark.colour}" fill-opacity="0.75">{title}</circle>'


def _rows(labels: list[str], marks: list[list[Mark]], to_x) -> list[str]:
    body = []
    for number, (label, row) in enumerate(zip(labels, marks, strict=True)):
        y = TOP + number * ROW + ROW / 2
        body.append(f'<text x="{LABEL - 6}" y="{y + 4:.1f}" text-anchor="end">{escape(label)}</text>')
        body.append(f'<line x1="{LABEL}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}" stroke="#eaeef2"/>')
        body.extend(_mark(to_x(m.value), y, m) for m in row)
    return body


def _reference_line(x: float, rows: int, text: str) -> list[str]:
    bottom = TOP + rows * ROW
    return [
        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{TOP - 6}" y2="{bottom}" stroke="{MUTED}" stroke-dasharray="4 3"/>',
        f'<text x="{x:.1f}" y="{TOP - 6 + 0.0:.1f}" text-anchor="middle" fill="{MUTED}" dy="-2">{escape(text)}</text>',
    ]


def _ticks(rows: int, ticks: list[tuple[float, str]], to_x) -> list[str]:
    y = TOP + rows * ROW + 14
    return [
        f'<text x="{to_x(value):.1f}" y="{y}" text-anchor="middle" fill="{MUTED}">{escape(text)}</text>' for value, text in ticks
    ]


# --- per-stage errors against tolerances -------------------------------------------------------------------


def _log_x(fraction: float) -> float:
    exponent = LOG_HIGH if math.isinf(fraction) else math.log10(max(fraction, 10**LOG_LOW))
    exponent = min(max(exponent, LOG_LOW), LOG_HIGH)
    return LABEL + (exponent - LOG_LOW) / (LOG_HIGH - LOG_LOW) * _plot_width()


def stage_chart(rows: list[StageRow]) -> Markup:
    """Each stage a row; each variant's largest error as a fraction of its tolerance a dot, red where it
    fails; the dashed line is the tolerance. Stages with no bound to compare to are left out."""
    stages: dict[str, list[Mark]] = {}
    for row in rows:
        fraction = row.fraction_of_tolerance
        if fraction is None:
            continue
        colour = FAIL if row.status == "fail" else PASS
        stages.setdefault(row.stage, []).append(
            Mark(fraction, colour, f"{row.variant} {row.stage}: {fraction:.3g} of tolerance ({row.status})")
        )
    if not stages:
        return Markup("")
    body = _reference_line(_log_x(1.0), len(stages), "tolerance")
    body += _rows(list(stages), list(stages.values()), _log_x)
    body += _ticks(len(stages), [(10.0**e, f"1e{e:+d}" if e else "1") for e in range(int(LOG_LOW), int(LOG_HIGH) + 1)], _log_x)
    return _svg(len(stages), body, "error of each stage as a fraction of its tolerance")


# --- timing samples against the floor ---------------------------------------------------------------------


def _timing_rows(case: CaseTiming) -> tuple[list[str], list[list[Mark]]]:
    medians = {"candidate": case.candidate_ms, "baseline": case.baseline_ms, "compiled": case.baseline_compiled_ms}
    names = {"candidate": "candidate", "baseline": "eager baseline", "compiled": "torch.compile"}
    colours = {"candidate": "#0969da", "baseline": "#9a6700", "compiled": "#8250df"}
    labels, marks = [], []
    for key, median in medians.items():
        samples = case.samples.get(key) or ([median] if median is not None else [])
        if not samples:
            continue
        labels.append(f"{names[key]} {median:.4g} ms" if median is not None else names[key])
        marks.append([Mark(s, colours[key], f"{names[key]} round {n}: {s:.4g} ms") for n, s in enumerate(samples)])
    return labels, marks


def timing_chart(case: CaseTiming) -> Markup:
    """One case: each implementation's samples (ms, one per round) as dots, the floor as a dashed line."""
    labels, marks = _timing_rows(case)
    values = [m.value for row in marks for m in row] + ([case.floor_ms] if case.floor_ms else [])
    high = max(values, default=1.0) * 1.1 or 1.0

    def to_x(ms: float) -> float:
        return LABEL + min(max(ms, 0.0), high) / high * _plot_width()

    body = _reference_line(to_x(case.floor_ms), len(labels), f"floor {case.floor_ms:.4g} ms") if case.floor_ms else []
    body += _rows(labels, marks, to_x)
    body += _ticks(len(labels), [(high * f, f"{high * f:.3g} ms") for f in (0.0, 0.25, 0.5, 0.75, 1.0)], to_x)
    return _svg(len(labels), body, f"timing samples of case {case.case}")


def floor_chart(cases: list[CaseTiming]) -> Markup:
    """Each timed case's fraction of the floor (floor / candidate time: 1.0 is the physical limit) as a bar,
    the baseline's as a dot."""
    timed = [c for c in cases if c.fraction_of_floor is not None]
    if not timed:
        return Markup("")
    high = max([1.0] + [c.fraction_of_floor or 0.0 for c in timed] + [c.baseline_fraction_of_floor or 0.0 for c in timed])

    def to_x(fraction: float) -> float:
        return LABEL + min(max(fraction, 0.0), high) / high * _plot_width()

    marks = []
    for c in timed:
        row = [Mark(c.fraction_of_floor or 0.0, "#0969da", f"candidate: {c.fraction_of_floor:.3g} of the floor", "bar")]
        if c.baseline_fraction_of_floor is not None:
            row.append(Mark(c.baseline_fraction_of_floor, "#9a6700", f"baseline: {c.baseline_fraction_of_floor:.3g}"))
        marks.append(row)
    body = _reference_line(to_x(1.0), len(timed), "floor (1.0)")
    body += _rows([c.case for c in timed], marks, to_x)
    body += _ticks(len(timed), [(high * f, f"{high * f:.2g}") for f in (0.0, 0.25, 0.5, 0.75, 1.0)], to_x)
    return _svg(len(timed), body, "fraction of the floor per case")
