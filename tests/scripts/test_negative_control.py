"""The demo's negative control (scripts/negative_control.sh, called by scripts/demo.sh): the MLA candidate with
the softmax scale simplified is written, judged by `ferret check --json`, and the control passes only when the
gate rejects it at the stage where its math departs from the contract's (`scores`). Its decisions are tested
against a stub `ferret` that records the candidate it was given; one slow test runs the real judge on the CPU
profile."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tasks.mla_attention.simplifications import CANDIDATE_PATH, SIMPLIFICATIONS

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "negative_control.sh"

# Copies the candidate it is given (argument 3 of `ferret check CONTRACT CANDIDATE ...`), records its
# arguments, prints the verdict it is told to and exits with the code it is told to.
STUB_FERRET = """#!/bin/sh
cp "$3" "$STUB_DIR/judged.py"
echo "$@" > "$STUB_DIR/args"
printf '%s\\n' "$STUB_VERDICT"
exit "$STUB_EXIT"
"""


def _run(tmp_path: Path, verdict: dict | str, exit_code: int, *args: str) -> subprocess.CompletedProcess:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    stub = bin_dir / "ferret"
    stub.write_text(STUB_FERRET)
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "STUB_DIR": str(tmp_path),
        "STUB_EXIT": str(exit_code),
        "TMPDIR": str(tmp_path),
        "STUB_VERDICT": verdict if isinstance(verdict, str) else json.dumps(verdict),
    }
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, timeout=120)


def _changed_lines(path: Path) -> list[tuple[str, str]]:
    honest, judged = CANDIDATE_PATH.read_text().splitlines(), path.read_text().splitlines()
    return [(a, b) for a, b in zip(honest, judged, strict=True) if a != b]


def test_the_scale_simplification_rejected_at_scores_passes_the_control(tmp_path):
    done = _run(tmp_path, {"pass": False, "first_failing_stage": "scores"}, 1)
    assert done.returncode == 0, done.stderr
    assert "the scale simplification was rejected at stage scores, as expected" in done.stderr
    # The judge was given the real variant: the honest candidate with its scale line, and only it, changed.
    assert _changed_lines(tmp_path / "judged.py") == [SIMPLIFICATIONS["scale"][:2]]
    args = (tmp_path / "args").read_text().split()
    assert args[:2] == ["check", "contracts/mla_attention.yaml"] and "--json" in args[3:]
    assert not any(p.name.startswith("tmp") for p in tmp_path.iterdir()), "its temporary folder is removed"


@pytest.mark.parametrize(
    ("verdict", "exit_code", "message"),
    [
        ({"pass": True, "first_failing_stage": None}, 0, "the scale simplification PASSED the gate: the gate is broken"),
        (
            {"pass": False, "first_failing_stage": "o_heads"},
            1,
            "the scale simplification was rejected at stage o_heads, expected at scores",
        ),
        ("", 4, "the check of the scale simplification reached no verdict (ferret check exit 4)"),
        ("", 2, "reached no verdict (ferret check exit 2)"),
        ("not json", 1, "rejected at stage (none: stdout held no verdict), expected at scores"),
    ],
    ids=["passed", "another-stage", "internal-error", "usage-error", "no-verdict"],
)
def test_the_control_fails_unless_rejected_at_the_expected_stage(tmp_path, verdict, exit_code, message):
    done = _run(tmp_path, verdict, exit_code)
    assert done.returncode == 1
    assert message in done.stderr


def test_each_simplification_is_checked_at_its_own_stage_and_options_reach_the_check(tmp_path):
    done = _run(tmp_path, {"pass": False, "first_failing_stage": "q_pe_roped"}, 1, "theta", "--profile", "cpu")
    assert done.returncode == 0, done.stderr
    assert _changed_lines(tmp_path / "judged.py") == [SIMPLIFICATIONS["theta"][:2]]
    assert (tmp_path / "args").read_text().split()[-2:] == ["--profile", "cpu"]


def test_an_unknown_simplification_is_refused(tmp_path):
    done = _run(tmp_path, {"pass": False, "first_failing_stage": "scores"}, 1, "no_such_thing")
    assert done.returncode != 0 and "usage: python -m tasks.mla_attention.simplifications" in done.stderr
    assert not (tmp_path / "args").exists(), "nothing was judged"


def test_the_real_gate_rejects_the_scale_simplification_at_scores_on_the_cpu_profile(tmp_path):
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        ["bash", str(SCRIPT), "scale", "--gates-dir", str(tmp_path / "gates"), "--profile", "cpu"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "the scale simplification was rejected at stage scores, as expected" in done.stderr
