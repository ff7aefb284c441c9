"""`ferret dispatch` offline: no API key, no `claude` on the PATH. The main job runs to a verdict with
the template-search optimizer and the static reviewer, and says so."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("op", ["rmsnorm", "mla_attention"])
def test_offline_dispatch_runs_to_a_verdict_and_names_its_roles(tmp_path, op):
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"  # no `claude` here
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferret.cli.main",
            "dispatch",
            str(REPO / f"contracts/{op}.yaml"),
            "--gates-dir",
            str(tmp_path / "gates"),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--profile",
            "cpu",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RUN_RESULT ")]
    assert len(lines) == 1
    result = json.loads(lines[0].removeprefix("RUN_RESULT "))
    assert result["status"] == "correct_speed_not_measured"
    assert result["optimizer"] == "template-search" and result["reviewer"] == "static-scan"
    assert result["test_writer"] == "contract-cases" and result["extra_cases"] == []
    assert result["established"]["correct"] and not result["established"]["speed_measured"]
    assert "no LLM reviewer was reachable" in proc.stderr
    run_json = json.loads((tmp_path / "runs" / result["run_id"] / "run.json").read_text())
    assert run_json["status"] == "correct_speed_not_measured" and run_json["final_check"]["pass"] is True
    assert Path(result["best"]).is_file()
    # Round 1 of the template search is the template's default point (for MLA: the committed candidate).
    assert run_json["rounds"][0]["candidates"][0]["approach"] in proc.stderr


def test_template_render_writes_a_point_and_refuses_values_outside_the_space(tmp_path):
    out = tmp_path / "mla_point.py"
    command = [sys.executable, "-m", "ferret.cli.main", "template", "render", str(REPO / "tasks/mla_attention/templates")]
    done = subprocess.run(
        command + ["--set", "head_block=32", "--set", "num_stages=3", "--out", str(out)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    source = out.read_text()
    # the two values set, the rest the default point's (64-token tiles since 2026-12-01)
    assert "HEAD_BLOCK = 32\n" in source and "NUM_STAGES = 3\n" in source and "TOKEN_BLOCK = 64\n" in source
    assert "point heads<=32," in done.stderr
    default = subprocess.run(command, capture_output=True, text=True)
    assert default.stdout == (REPO / "tasks/mla_attention/candidates/triton_mla.py").read_text()
    for bad in ("head_block=48", "heads=32", "head_block"):
        refused = subprocess.run(command + ["--set", bad], capture_output=True, text=True)
        assert refused.returncode == 2 and "ferret:" in refused.stderr and "Traceback" not in refused.stderr, bad


def _dispatch_cli(tmp_path, *options):
    env = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + "/usr/bin:/bin"
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "ferret.cli.main",
            "dispatch",
            str(REPO / "contracts/rmsnorm.yaml"),
            "--gates-dir",
            str(tmp_path / "gates"),
            "--runs-dir",
            str(tmp_path / "runs"),
            "--profile",
            "cpu",
            *options,
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=900,
    )


def test_roles_named_on_the_command_line_are_the_ones_that_run(tmp_path):
    """--optimizer and --reviewer given model specs (the scripted test model, from files), --test-writer a
    registered name. The only candidate is wrong and the round budget is spent: an incomplete run (never a
    success), exit 6, naming its roles."""
    honest = (REPO / "tasks/rmsnorm/candidates/triton_rmsnorm.py").read_text()
    wrong = honest.replace("\ndef run(", "\ndef _honest_run(") + (
        "\n\ndef run(inputs, outputs, params, trace=None):\n    _honest_run(inputs, outputs, params, trace)\n"
        '    outputs["y"].mul_(1.5)\n'
    )
    (tmp_path / "optimizer.json").write_text(
        json.dumps(
            [{"tool_calls": [{"name": "submit_candidate", "input": {"source": wrong, "approach": "scaled", "notes": "try"}}]}]
        )
    )
    (tmp_path / "reviewer.json").write_text(
        json.dumps(
            [
                {
                    "tool_calls": [
                        {
                            "name": "submit_review",
                            "input": {"integrity": "pass", "plan": "pass", "findings": [], "recommendation": "fine"},
                        }
                    ]
                }
            ]
        )
    )
    proc = _dispatch_cli(
        tmp_path,
        "--optimizer",
        "scripted:optimizer.json",
        "--reviewer",
        "scripted:reviewer.json",
        "--test-writer",
        "contract-cases",
        "--max-rounds",
        "1",
        "--proposals-per-round",
        "1",
    )
    assert proc.returncode == 6, proc.stderr[-3000:]
    result = json.loads(
        next(line for line in proc.stdout.splitlines() if line.startswith("RUN_RESULT ")).removeprefix("RUN_RESULT ")
    )
    assert result["status"] == "incomplete" and "maximum" in result["stop_reason"] and result["best"] is None
    assert (result["optimizer"], result["reviewer"], result["test_writer"]) == (
        "llm:scripted:optimizer.json",
        "llm:scripted:reviewer.json",
        "contract-cases",
    )


@pytest.mark.parametrize(
    "option, spec, says",
    [
        ("--optimizer", "gemini:x", "template-search"),
        ("--reviewer", "static-ish", "static"),
        ("--test-writer", "scripted:missing.json", "cannot read"),
    ],
)
def test_a_bad_role_is_a_usage_error_naming_the_option(tmp_path, option, spec, says):
    proc = _dispatch_cli(tmp_path, option, spec)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"{option} {spec!r}" in proc.stderr and says in proc.stderr and "Traceback" not in proc.stderr
