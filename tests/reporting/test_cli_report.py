"""`ferret report` on the command line (ferret/cli/main.py): it writes report.html and report.md into the
run's folder, beside a gate's (gates/<hash>.report/), or into --out, and prints their paths, one a line;
a folder that is neither a gate nor a run is one line naming it, exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report_fixtures import make_gate, make_run  # noqa: E402


def _ferret(*args: object, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ferret.cli.main", *map(str, args)], cwd=cwd, capture_output=True, text=True, env=dict(os.environ)
    )


def test_report_of_a_gate_writes_both_files_beside_it_and_prints_their_paths(tmp_path):
    gate = make_gate(tmp_path / "gates")
    done = _ferret("report", gate, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    beside = gate.with_name(gate.name + ".report")  # the gate's own folder is locked
    assert done.stdout.splitlines() == [str(beside / "report.html"), str(beside / "report.md")]
    assert "Verdict: FAIL" in (beside / "report.md").read_text().replace("**", "")


def test_report_of_a_run_finds_its_gate_under_gates_dir_and_writes_to_out(tmp_path):
    make_gate(tmp_path / "gates")
    run = make_run(tmp_path / "runs")
    done = _ferret("report", "runs/r1", "--out", "out", cwd=tmp_path)  # --gates-dir: gates, under the cwd
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["out/report.html", "out/report.md"]
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "Winner: round 1, candidate 0" in markdown and "verdict in brief" not in markdown
    assert not (run / "report.html").exists()


def test_a_folder_that_is_neither_is_one_line_naming_it_exit_2(tmp_path):
    (tmp_path / "notes").mkdir()
    for folder, why in ((tmp_path / "notes", "is neither a gate"), (tmp_path / "missing", "is not a folder")):
        done = _ferret("report", folder, cwd=tmp_path)
        assert done.returncode == 2 and done.stdout == ""
        assert done.stderr.startswith(f"ferret: {folder} {why}") and len(done.stderr.splitlines()) == 1, done.stderr
