"""`ferret new <op>` (ferret/scaffold/new_op.py): a new project's op written from the working example, its
tolerances derived by calibrate, and its generated tests passing as generated (the honest candidate passes
its gate, the wrong one is rejected); bad names and files in the way are usage errors naming them."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from ferret.cli.main import app
from ferret.contract.load import load_contract
from ferret.errors import UsageError
from ferret.scaffold.new_op import new_op

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("quantized", [False, True], ids=["plain", "quantized"])
def test_a_new_op_passes_its_own_tests_as_generated(tmp_path, monkeypatch, quantized):
    """Plain, and with `up` stored as float8 codes and their scales: calibrated, the honest candidate passes its gate
    and the wrong one (a dropped tail; with --quantized, the scales ignored) is rejected, as generated."""
    # The calling process has Ferret's own `tasks` package imported (a test run, a dispatcher): the new
    # project's `tasks` must still be the one its calibration imports.
    monkeypatch.syspath_prepend(str(REPO))
    importlib.import_module("tasks.rmsnorm")
    made = new_op("silu_demo", tmp_path, quantized=quantized)
    names = {p.relative_to(tmp_path).as_posix() for p in made.files}
    assert {
        "contracts/silu_demo.yaml",
        "contracts/silu_demo.tolerances.yaml",
        "tasks/__init__.py",
        "tasks/silu_demo/candidates/wrong_silu_demo.py",
        "tests/tasks/silu_demo/test_silu_demo_task.py",
    } <= names
    table = yaml.safe_load(made.tolerances.read_text())  # type: ignore[union-attr]
    assert table["by_dtype"]["bfloat16"]["y"]["rel_l2"] > table["by_dtype"]["float32"]["y"]["rel_l2"] > 0
    assert table["false_rejection"]["triton_silu_demo.py"]["rejected"] == 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]), "TRITON_INTERPRET": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/tasks/silu_demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout[-3000:] + done.stderr[-2000:]
    wrong = made.wrong.read_text()
    assert ("up_scale" in (tmp_path / "tasks" / "silu_demo" / "baseline.py").read_text()) is quantized
    assert ("scale_ptr" in made.honest.read_text()) is quantized and "scale_ptr" not in wrong


@pytest.mark.quick
def test_the_quantized_example_declares_its_storage_and_the_cli_passes_it(tmp_path):
    """`ferret new --quantized`: up is float8 e4m3 codes with one float32 scale per 128 values of a row, every case's
    rows whole blocks (N = NB * 128), and the contract loads (its scales checked at every declared case)."""
    result = CliRunner().invoke(app, ["new", "q_op", "--root", str(tmp_path), "--no-calibrate", "--quantized"])
    assert result.exit_code == 0, result.output
    path = tmp_path / "contracts" / "q_op.yaml"
    spec = yaml.safe_load(path.read_text())
    inputs = {i["name"]: i for i in spec["inputs"]}
    assert inputs["up"]["dtype"] == "float8_e4m3fn" and inputs["up"]["scales"] == {"input": "up_scale", "block": 128}
    assert inputs["up_scale"]["dtype"] == "float32" and inputs["up_scale"]["shape"] == ["M", "NB"]
    assert all("NB" in case["dims"] for case in spec["cases"]["cpu"] + spec["cases"]["gpu"])
    contract = load_contract(path, require_tolerances=False)
    assert [i.name for i in contract.inputs if i.scales is not None] == ["up"]


@pytest.mark.parametrize("name", ["9lives", "has-dash", "class", "CamelCase"])
def test_a_name_that_cannot_name_a_package_is_refused(tmp_path, name):
    with pytest.raises(UsageError, match="lowercase Python identifier"):
        new_op(name, tmp_path, calibrate_tolerances=False)
    assert not (tmp_path / "contracts").exists()


@pytest.mark.quick
def test_nothing_is_overwritten_unless_asked_and_the_cli_names_the_file(tmp_path):
    new_op("demo_op", tmp_path, calibrate_tolerances=False)
    reference = tmp_path / "tasks" / "demo_op" / "reference.py"
    reference.write_text("# mine\n")
    result = CliRunner().invoke(app, ["new", "demo_op", "--root", str(tmp_path), "--no-calibrate"])
    assert result.exit_code == 2 and "contracts/demo_op.yaml: already exists" in result.output
    assert reference.read_text() == "# mine\n"
    result = CliRunner().invoke(app, ["new", "demo_op", "--root", str(tmp_path), "--no-calibrate", "--force"])
    assert result.exit_code == 0, result.output
    assert "def reference(" in reference.read_text()


@pytest.mark.parametrize("force", [False, True])
def test_calibration_may_rewrite_a_looser_table_only_when_the_example_is_forced(tmp_path, monkeypatch, force):
    """`ferret new --force` rewrites the example's files, its tolerance table included; without it calibrate
    keeps its refusal to loosen a table in force."""
    from ferret.scaffold import new_op as module

    commands = []

    def calibrated(command, **_):
        commands.append(command)
        return subprocess.CompletedProcess(command, 0, f"{tmp_path / 'contracts' / 'demo_op.tolerances.yaml'}\n", "")

    monkeypatch.setattr(module.subprocess, "run", calibrated)
    new_op("demo_op", tmp_path, force=force)
    [command] = commands
    assert command[3:5] == ["calibrate", str((tmp_path / "contracts" / "demo_op.yaml").resolve())]
    assert ("--force" in command) is force


@pytest.mark.gpu
def test_on_the_gpu_the_quantized_example_is_judged_as_on_the_cpu(tmp_path, monkeypatch):
    """Compiled Triton loads the float8 codes on the GPU profile's shapes (up to 4099 x 4992): the honest candidate
    passes, the one that ignores the scales is rejected for its math. Correctness only (no speed verdict)."""
    monkeypatch.syspath_prepend(str(REPO))
    made = new_op("silu_q", tmp_path, quantized=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(REPO)])
    verdicts = {}
    for candidate in (made.honest, made.wrong):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "ferret.cli.main",
                "check",
                str(made.contract),
                str(candidate),
                "--profile",
                "gpu",
                "--no-speed",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
        [line] = [line for line in done.stdout.splitlines() if line.startswith("GATE_RESULT ")]
        verdicts[candidate.name] = (done.returncode, json.loads(line.removeprefix("GATE_RESULT ")))
    code, honest = verdicts[made.honest.name]
    assert code == 0 and honest["pass"], honest["parts"]
    code, wrong = verdicts[made.wrong.name]
    assert code == 1 and wrong["first_failing_stage"] == "y"
    assert "math_mismatch" in {d["cheat"] for d in wrong["detections"]}
