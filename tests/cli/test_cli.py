"""`ferret` on the command line: the GATE_RESULT line, the exit codes, and the published schemas."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT, TRITON_RMSNORM, copy_gate, flip_byte, line_of, write_contract  # noqa: E402

from ferret.cli.main import app  # noqa: E402
from ferret.gate.models import PARTS  # noqa: E402

ZEROS_CANDIDATE = '''
def run(inputs, outputs, params, trace=None):
    outputs["y"].zero_()
'''


@pytest.fixture(scope="module")
def gates_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cli-gates")


@pytest.fixture(scope="module")
def gate(gates_dir) -> Path:
    from ferret.gate.build import build_gate

    return build_gate(RMSNORM_CONTRACT, gates_dir=gates_dir, profile="cpu")


def _ferret(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real command in its own process, so stdout is exactly what a caller would read."""
    return subprocess.run(
        [sys.executable, "-m", "ferret.cli.main", *args], cwd=cwd, capture_output=True, text=True, env=dict(os.environ)
    )


def _gate_result(stdout: str) -> dict:
    lines = [line for line in stdout.splitlines() if line.startswith("GATE_RESULT ")]
    assert len(lines) == 1, stdout
    assert stdout.strip() == lines[0], "GATE_RESULT is the only thing on stdout"
    return json.loads(lines[0].removeprefix("GATE_RESULT "))


def test_check_pass_prints_one_gate_result_and_exits_0(gate, gates_dir, tmp_path):
    proc = _ferret("check", str(RMSNORM_CONTRACT), str(TRITON_RMSNORM), "--gates-dir", str(gates_dir), "--profile", "cpu", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = _gate_result(proc.stdout)
    assert result["pass"] is True
    assert result["first_failing_stage"] is None
    assert result["gate"] == gate.name
    assert set(result["parts"]) == set(PARTS)
    assert result["parts"]["stress"] == "skipped"
    assert result["parts"]["correctness"] == "pass"
    assert len(result["cases"]) == 13 + 2  # the frozen case variants and two fresh private cases
    case = result["cases"]["typical@float32"]
    assert case["pass"] is True
    assert set(case["stages"]) == {"inv_rms", "y"}
    for metrics in case["stages"].values():
        assert metrics["pass"] is True
        assert {"rel_l2", "max_abs_rel_peak", "cosine"} <= set(metrics)
        assert 0 <= metrics["rel_l2"] < 1e-5
    assert result["timing"]["measured"] is False
    assert "PASS" in proc.stderr and "report.json" in proc.stderr


def test_check_fail_exits_1_with_per_case_metrics(gate, gates_dir, tmp_path):
    candidate = tmp_path / "zeros.py"
    candidate.write_text(ZEROS_CANDIDATE)
    proc = _ferret("check", str(RMSNORM_CONTRACT), str(candidate), "--gates-dir", str(gates_dir), "--profile", "cpu", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr
    result = _gate_result(proc.stdout)
    assert result["pass"] is False
    assert result["first_failing_stage"] == "y"
    assert result["parts"]["correctness"] == "fail"
    case = result["cases"]["typical@float32"]
    assert case["pass"] is False
    assert case["stages"]["inv_rms"] == "not exposed"
    y = case["stages"]["y"]
    assert y["pass"] is False and y["rel_l2"] == pytest.approx(1.0)
    assert set(y["worst"]) == {"row", "col"}
    assert "FAIL" in proc.stderr


def test_check_failure_kind_in_gate_result(gate, gates_dir, tmp_path):
    candidate = tmp_path / "raises.py"
    candidate.write_text("def run(inputs, outputs, params, trace=None):\n    raise KeyError('ferret-cli-test')\n")
    result = CliRunner().invoke(app, ["check", str(RMSNORM_CONTRACT), str(candidate), "--gates-dir", str(gates_dir), "--profile", "cpu"])
    assert result.exit_code == 1, result.output
    summary = _gate_result(result.stdout)
    case = summary["cases"]["typical@bfloat16"]
    assert case["failure"] == "exception" and "ferret-cli-test" in case["message"]


def test_bad_contract_exits_2_naming_file_and_field(gates_dir, tmp_path):
    contract = write_contract(tmp_path, lambda d: d["budgets"].update(candidate_timout_s=3))
    result = CliRunner().invoke(app, ["check", str(contract), str(TRITON_RMSNORM), "--gates-dir", str(gates_dir), "--profile", "cpu"])
    assert result.exit_code == 2, result.output
    assert "GATE_RESULT" not in result.stdout
    assert "bad contract" in result.stderr
    assert f"{contract}:{line_of(contract, 'candidate_timout_s')}: budgets.candidate_timout_s" in result.stderr


def test_gate_build_with_bad_contract_exits_2(tmp_path):
    contract = write_contract(tmp_path, lambda d: d["outputs"][0].update(name="z"))
    result = CliRunner().invoke(app, ["gate", "build", str(contract), "--gates-dir", str(tmp_path / "gates"), "--profile", "cpu"])
    assert result.exit_code == 2
    assert str(contract) in result.stderr and "outputs.z" in result.stderr
    assert not (tmp_path / "gates").exists() or not any((tmp_path / "gates").iterdir())


def test_tampered_gate_exits_3_naming_the_file(gate, tmp_path):
    tampered_dir = tmp_path / "gates"
    copy = copy_gate(gate, tampered_dir)
    name = "cases/odd_width@float16/golden.safetensors"
    flip_byte(copy / name)
    result = CliRunner().invoke(app, ["check", str(RMSNORM_CONTRACT), str(TRITON_RMSNORM), "--gates-dir", str(tampered_dir), "--profile", "cpu"])
    assert result.exit_code == 3, result.output
    assert "GATE_RESULT" not in result.stdout
    assert "TAMPERED" in result.stderr
    assert f"{name}: changed" in result.stderr
    assert not (copy / "report.json").exists(), "no verdict on a tampered gate"


def test_missing_candidate_exits_2(gates_dir, tmp_path):
    missing = tmp_path / "nope.py"
    result = CliRunner().invoke(app, ["check", str(RMSNORM_CONTRACT), str(missing), "--gates-dir", str(gates_dir), "--profile", "cpu"])
    assert result.exit_code == 2, result.output
    assert str(missing) in result.stderr
    assert "GATE_RESULT" not in result.stdout


def test_missing_contract_exits_2(tmp_path):
    result = CliRunner().invoke(app, ["check", str(tmp_path / "nope.yaml"), str(TRITON_RMSNORM), "--gates-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "nope.yaml" in result.stderr


def test_schema_writes_four_valid_schemas(tmp_path):
    out = tmp_path / "schema"
    result = CliRunner().invoke(app, ["schema", "--out", str(out)])
    assert result.exit_code == 0, result.output
    expected = {
        "contract.schema.json": "Contract",
        "gate_manifest.schema.json": "GateManifest",
        "verdict.schema.json": "Verdict",
        "report.schema.json": "Report",
    }
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)
    for name, title in expected.items():
        schema = json.loads((out / name).read_text())
        assert schema["title"] == title
        assert schema["type"] == "object" and schema["properties"]
        assert str(out / name) in result.stdout
    contract_schema = json.loads((out / "contract.schema.json").read_text())
    assert {"op", "stages", "cases", "budgets"} <= set(contract_schema["properties"])
    assert "passed" in json.loads((out / "verdict.schema.json").read_text())["properties"]


def test_no_arguments_shows_help():
    result = CliRunner().invoke(app, [])
    assert "check" in result.output and "schema" in result.output
