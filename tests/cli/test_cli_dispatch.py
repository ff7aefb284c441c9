"""`ferret dispatch` offline: no API key, no `claude` on the PATH. The main job runs to a verdict with
the template-search optimizer and the static reviewer, and says so."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_offline_dispatch_runs_to_a_verdict_and_names_its_roles(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"  # no `claude` here
    proc = subprocess.run(
        [sys.executable, "-m", "ferret.cli.main", "dispatch", str(REPO / "contracts/rmsnorm.yaml"),
         "--gates-dir", str(tmp_path / "gates"), "--runs-dir", str(tmp_path / "runs"), "--profile", "cpu"],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RUN_RESULT ")]
    assert len(lines) == 1
    result = json.loads(lines[0].removeprefix("RUN_RESULT "))
    assert result["status"] == "correct_speed_not_measured"
    assert result["optimizer"] == "template-search" and result["reviewer"] == "static-scan"
    assert result["established"]["correct"] and not result["established"]["speed_measured"]
    assert "no LLM reviewer was reachable" in proc.stderr
    run_json = json.loads((tmp_path / "runs" / result["run_id"] / "run.json").read_text())
    assert run_json["status"] == "correct_speed_not_measured" and run_json["final_check"]["pass"] is True
    assert Path(result["best"]).is_file()
