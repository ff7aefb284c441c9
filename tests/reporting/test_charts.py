"""The report's charts (ferret/reporting/charts.py): inline SVG whose labels are escaped, whose marks sit
where their values say, and which draw nothing when there is nothing to draw."""

from __future__ import annotations

import math
import re

from ferret.gate.models import CaseTiming
from ferret.reporting.charts import LABEL, _log_x, _plot_width, floor_chart, stage_chart, timing_chart
from ferret.reporting.views import StageRow


def _row(variant: str, stage: str, rel_l2: float, status: str = "pass") -> StageRow:
    return StageRow(variant=variant, stage=stage, status=status, rel_l2=rel_l2, rel_l2_limit=0.01)


def test_stage_chart_puts_the_tolerance_at_one_and_escapes_labels():
    svg = str(stage_chart([_row("<b>v</b>", "y", 0.001), _row("w", "y", math.nan, "fail"), _row("w", "z&", 0.1, "fail")]))
    assert svg.startswith("<svg") and "<b>" not in svg and "&lt;b&gt;v&lt;/b&gt;" in svg and "z&amp;" in svg
    assert _log_x(1.0) == LABEL + 4 / 6 * _plot_width()  # 1e-4 .. 1e2: the tolerance two decades from the right
    assert _log_x(math.inf) == _log_x(1e9) == LABEL + _plot_width()  # NaN/Inf errors at the right edge, not lost
    assert len(re.findall(r'fill="#cf222e"', svg)) == 2  # the two failing variants are red


def test_charts_with_nothing_to_show_are_empty():
    assert str(stage_chart([StageRow(variant="v", stage="y", status="not exposed")])) == ""
    assert str(floor_chart([CaseTiming(case="c", candidate_ms=1.0, baseline_ms=2.0, speedup=2.0)])) == ""


def test_timing_chart_draws_each_sample_and_the_floor_or_the_medians_without_samples():
    case = CaseTiming(
        case="c",
        candidate_ms=1.0,
        baseline_ms=2.0,
        baseline_compiled_ms=1.5,
        speedup=2.0,
        samples={"candidate": [0.9, 1.0, 1.1], "baseline": [2.0, 2.1]},
        floor_ms=0.5,
    )
    svg = str(timing_chart(case))
    assert svg.count("<circle") == 3 + 2 + 1  # the compiled baseline has no samples: its median stands in
    assert "floor 0.5 ms" in svg and "torch.compile 1.5 ms" in svg
    bars = str(floor_chart([case.model_copy(update={"fraction_of_floor": 0.5, "baseline_fraction_of_floor": 0.25})]))
    assert bars.count("<rect") == 1 and "floor (1.0)" in bars
