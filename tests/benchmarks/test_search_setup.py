"""The template search's set-up benchmark (`python -m benchmarks search-setup`, benchmarks/search_setup.py), on the
small rmsnorm space: one fresh process per repo makes the search, lists the space and proposes twice; the row holds
the phases' seconds, the peak memory read by the parent, the space's size and the same proposals both times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ferret.roles.offline import TemplateSearchOptimizer

REPO = Path(__file__).resolve().parents[2]


def test_a_row_per_repo_with_the_phases_memory_and_proposals(tmp_path):
    out = tmp_path / "cost.jsonl"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "search-setup", "--out", str(out), "--templates", "tasks/rmsnorm/templates"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (row,) = map(json.loads, out.read_text().splitlines())
    assert row["repo"] == str(REPO) and row["templates"] == "tasks/rmsnorm/templates"
    assert row["points"] == len(TemplateSearchOptimizer(REPO / "tasks" / "rmsnorm" / "templates").by_approach) > 1
    assert all(row[phase] >= 0 for phase in ("import_s", "list_s", "first_propose_s", "second_propose_s"))
    assert row["wall_s"] > 0 and row["peak_rss_mb"] > 10
    assert row["proposals"] and row["same_again"] is True
