"""The gate-timing benchmark (`python -m benchmarks timing`, benchmarks/timing.py): its CPU rehearsal judges an
honest candidate end to end through `ferret check` (the cold check builds the gate) and logs the check; its table
says where no check was timed; and its reading of a check's progress lines (the seconds outside ferret's progress
clock, before it started and after the last line, which split a check's wall time from the verdict's own)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from benchmarks import timing

REPO = Path(__file__).resolve().parents[2]


def test_the_seconds_before_the_progress_clock_and_after_the_last_line():
    lines = [
        (3.1, "ferret [   0.5s] gate 015f… verified\n"),
        (10.0, "a traceback line\n"),
        (50.0, "ferret [  46.9s] PASS; report: r.json\n"),
        (50.5, "not a progress line\n"),
    ]
    assert timing.outside_clock(lines, 52.0) == {"before_clock_s": 2.6, "after_last_line_s": 2.0}


def test_no_progress_line_is_no_split():
    assert timing.outside_clock([(1.0, "Traceback (most recent call last):\n")], 2.0) is None


def test_the_cpu_rehearsal_judges_the_honest_candidate_and_logs_the_check(tmp_path):
    """--cpu: one check of rmsnorm's honest candidate on the CPU profile, the gate built by it (cold); the log holds
    the run's meta line and the check with its verdict; the table finds no timed check and exits 1 (a CPU verdict
    measures no speed)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "benchmarks", "timing"]
    done = subprocess.run(
        [
            *command,
            "run",
            "--cpu",
            "--ops",
            "rmsnorm",
            "--checks",
            "0",
            "--gates-dir",
            str(tmp_path / "gates"),
            "--out",
            str(tmp_path),
            "--budget-s",
            "600",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    meta, record = (json.loads(line) for line in (tmp_path / "checks.jsonl").read_text().splitlines())
    assert meta["meta"]["command"].startswith("python -m benchmarks timing run --cpu")
    assert record["op"] == "rmsnorm" and record["exit"] == 0 and record["cold"] is True
    assert record["verdict"]["passed"] is True and record["verdict"]["timing"]["measured"] is False
    table = subprocess.run(
        [*command, "table", str(tmp_path / "checks.jsonl")],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
        timeout=120,
        check=False,
    )
    assert table.returncode == 1 and "| rmsnorm | | no measured check |" in table.stdout
