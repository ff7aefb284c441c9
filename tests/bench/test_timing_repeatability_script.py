"""benchmarks/timing_repeatability.py's reading of a check's progress lines: the seconds outside ferret's progress
clock (before it started, after the last line), which split a check's wall time from the verdict's own."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _script():
    sys.path.insert(0, str(REPO / "benchmarks"))  # it imports honest_candidates from beside it
    spec = importlib.util.spec_from_file_location("timing_repeatability", REPO / "benchmarks" / "timing_repeatability.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_seconds_before_the_progress_clock_and_after_the_last_line():
    lines = [(3.1, "ferret [   0.5s] gate 015f… verified\n"), (10.0, "a traceback line\n"),
             (50.0, "ferret [  46.9s] PASS; report: r.json\n"), (50.5, "not a progress line\n")]
    assert _script().outside_clock(lines, 52.0) == {"before_clock_s": 2.6, "after_last_line_s": 2.0}


def test_no_progress_line_is_no_split():
    assert _script().outside_clock([(1.0, "Traceback (most recent call last):\n")], 2.0) is None
