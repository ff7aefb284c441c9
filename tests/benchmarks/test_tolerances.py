"""The tolerance-evidence benchmark (`python -m benchmarks tolerances`, benchmarks/tolerances.py) on rmsnorm, one
check each: the honest candidate passes the contract's tolerances and a precision cut (the sum of squares in bf16)
is rejected at the stage it rounds, both in the results and in the table."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_the_honest_candidate_passes_and_a_precision_cut_is_rejected_at_its_stage(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "tolerances",
            "--op",
            "rmsnorm",
            "--checks",
            "1",
            "--candidates",
            "honest,sumsq_bf16",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    results = {r["candidate"]: r for r in map(json.loads, (tmp_path / "results.jsonl").read_text().splitlines())}
    assert results["honest"]["passed"] is True and results["honest"]["failures"] == []
    assert results["sumsq_bf16"]["passed"] is False and results["sumsq_bf16"]["first_failing_stage"] == "inv_rms"
    table = (tmp_path / "table.md").read_text()
    assert "| honest | honest | 1 of 1 | 1 | 0 | 0 | - |" in table
    assert "| sumsq_bf16 | precision | 1 of 1 | 0 | 1 | 0 | inv_rms (1) |" in table
