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

ZEROS_CANDIDATE = """
def run(inputs, outputs, params, trace=None):
    outputs["y"].zero_()
"""


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
    proc = _ferret(
        "check", str(RMSNORM_CONTRACT), str(TRITON_RMSNORM), "--gates-dir", str(gates_dir), "--profile", "cpu", cwd=tmp_path
    )
    assert proc.returncode == 0, proc.stderr
    result = _gate_result(proc.stdout)
    assert result["pass"] is True
    assert result["first_failing_stage"] is None
    assert result["gate"] == gate.name
    assert set(result["parts"]) == set(PARTS)
    assert result["parts"]["stress"] == "skipped"
    assert result["parts"]["correctness"] == "pass"
    fresh = [name for name in result["cases"] if name.startswith("fresh")]
    assert len(fresh) >= 3 and len(result["cases"]) == 13 + len(fresh)  # the frozen variants and the fresh cases
    case = result["cases"]["typical@float32"]
    assert case["pass"] is True
    assert set(case["stages"]) == {"inv_rms", "y"}
    for metrics in case["stages"].values():
        assert metrics["pass"] is True
        assert {"rel_l2", "max_abs_rel_peak", "cosine"} <= set(metrics)
        assert 0 <= metrics["rel_l2"] < 1e-5
    assert result["timing"]["measured"] is False
    assert "PASS" in proc.stderr and "report.json" in proc.stderr


@pytest.mark.quick
def test_check_fail_exits_1_with_per_case_metrics(gate, gates_dir, tmp_path):
    candidate = tmp_path / "zeros.py"
    candidate.write_text(ZEROS_CANDIDATE)
    proc = _ferret(
        "check", str(RMSNORM_CONTRACT), str(candidate), "--gates-dir", str(gates_dir), "--profile", "cpu", cwd=tmp_path
    )
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


def test_a_roofline_naming_an_unknown_dim_exits_2_naming_file_field_and_line(gates_dir, tmp_path):
    contract = write_contract(tmp_path, lambda d: d["roofline"].update(bytes="nbytes(x) * Q"))
    result = CliRunner().invoke(
        app, ["check", str(contract), str(TRITON_RMSNORM), "--gates-dir", str(gates_dir), "--profile", "cpu"]
    )
    assert result.exit_code == 2, result.output
    assert "GATE_RESULT" not in result.stdout and "bad contract" in result.stderr
    assert f"{contract}:{line_of(contract, 'nbytes(x) * Q')}: roofline.bytes:" in result.stderr and "'Q'" in result.stderr


CUDA_RMSNORM = Path(__file__).resolve().parents[2] / "tasks" / "rmsnorm" / "candidates" / "cuda_rmsnorm.py"


def test_a_triton_only_contract_refuses_a_cuda_candidate_with_exit_2(gates_dir):
    result = CliRunner().invoke(
        app, ["check", str(RMSNORM_CONTRACT), str(CUDA_RMSNORM), "--gates-dir", str(gates_dir), "--profile", "cpu"]
    )
    assert result.exit_code == 2, result.output
    assert "GATE_RESULT" not in result.stdout
    assert (
        f"{CUDA_RMSNORM} is a cuda candidate (it imports ferret.backends.cuda), but {RMSNORM_CONTRACT} allows "
        "triton only (backend.language, backend.allowed_languages)" in " ".join(result.stderr.split())
    )


def test_the_wrong_language_is_refused_before_any_gate_is_built(tmp_path):
    empty = tmp_path / "gates"
    empty.mkdir()
    result = CliRunner().invoke(
        app, ["check", str(RMSNORM_CONTRACT), str(CUDA_RMSNORM), "--gates-dir", str(empty), "--profile", "cpu"]
    )
    assert result.exit_code == 2, result.output
    assert "is a cuda candidate" in " ".join(result.stderr.split())
    assert [p.name for p in empty.iterdir() if not p.name.startswith(".")] == []  # no gate was built first


def test_a_contract_allowing_cuda_takes_it_but_the_cpu_profile_says_it_needs_a_gpu(gates_dir, tmp_path):
    contract = write_contract(tmp_path, lambda d: d["backend"].update(allowed_languages=["cuda"]))
    result = CliRunner().invoke(
        app, ["check", str(contract), str(CUDA_RMSNORM), "--gates-dir", str(gates_dir), "--profile", "cpu"]
    )
    assert result.exit_code == 2, result.output
    assert "is a CUDA candidate: it runs on a GPU, and the cpu profile has none" in " ".join(result.stderr.split())


def test_check_failure_kind_in_gate_result(gate, gates_dir, tmp_path):
    candidate = tmp_path / "raises.py"
    candidate.write_text("def run(inputs, outputs, params, trace=None):\n    raise KeyError('ferret-cli-test')\n")
    result = CliRunner().invoke(
        app, ["check", str(RMSNORM_CONTRACT), str(candidate), "--gates-dir", str(gates_dir), "--profile", "cpu"]
    )
    assert result.exit_code == 1, result.output
    summary = _gate_result(result.stdout)
    case = summary["cases"]["typical@bfloat16"]
    assert case["failure"] == "exception" and "ferret-cli-test" in case["message"]


@pytest.mark.quick
def test_bad_contract_exits_2_naming_file_and_field(gates_dir, tmp_path):
    contract = write_contract(tmp_path, lambda d: d["budgets"].update(candidate_timout_s=3))
    result = CliRunner().invoke(
        app, ["check", str(contract), str(TRITON_RMSNORM), "--gates-dir", str(gates_dir), "--profile", "cpu"]
    )
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
    result = CliRunner().invoke(
        app, ["check", str(RMSNORM_CONTRACT), str(TRITON_RMSNORM), "--gates-dir", str(tampered_dir), "--profile", "cpu"]
    )
    assert result.exit_code == 3, result.output
    assert "GATE_RESULT" not in result.stdout
    assert "TAMPERED" in result.stderr
    assert f"{name}: changed" in result.stderr
    assert not (copy / "report.json").exists(), "no verdict on a tampered gate"


def test_missing_candidate_exits_2(gates_dir, tmp_path):
    missing = tmp_path / "nope.py"
    result = CliRunner().invoke(
        app, ["check", str(RMSNORM_CONTRACT), str(missing), "--gates-dir", str(gates_dir), "--profile", "cpu"]
    )
    assert result.exit_code == 2, result.output
    assert str(missing) in result.stderr
    assert "GATE_RESULT" not in result.stdout


def test_missing_contract_exits_2(tmp_path):
    result = CliRunner().invoke(app, ["check", str(tmp_path / "nope.yaml"), str(TRITON_RMSNORM), "--gates-dir", str(tmp_path)])
    assert result.exit_code == 2
    assert "nope.yaml" in result.stderr


def test_schema_writes_six_valid_schemas(tmp_path):
    out = tmp_path / "schema"
    result = CliRunner().invoke(app, ["schema", "--out", str(out)])
    assert result.exit_code == 0, result.output
    expected = {
        "contract.schema.json": "Contract",
        "gate_manifest.schema.json": "GateManifest",
        "verdict.schema.json": "Verdict",
        "report.schema.json": "Report",
        "run_log.schema.json": "RunLog",
        "audit.schema.json": "AuditRecord",
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


# --- mistakes on the command line: exit 2, one line `ferret: ...` on stderr, never a traceback -------------


def _usage_error(exit_code: int, stdout: str, stderr: str, *names: str) -> str:
    """The one stderr line of a usage error (exit 2), after checking it names each of `names`."""
    assert exit_code == 2, (stdout, stderr)
    assert "Traceback" not in stdout + stderr
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ferret: "), stderr
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


def _invoke(*args):
    return CliRunner().invoke(app, [str(a) for a in args])


PROFILE_COMMANDS = {
    "gate build": lambda tmp: ["gate", "build", RMSNORM_CONTRACT, "--gates-dir", tmp / "gates"],
    "check": lambda tmp: ["check", RMSNORM_CONTRACT, TRITON_RMSNORM, "--gates-dir", tmp / "gates"],
    "dispatch": lambda tmp: [
        "dispatch",
        RMSNORM_CONTRACT,
        "--gates-dir",
        tmp / "gates",
        "--runs-dir",
        tmp / "runs",
        "--optimizer",
        "template-search",
        "--reviewer",
        "static",
        "--test-writer",
        "contract-cases",
    ],
    "calibrate": lambda tmp: ["calibrate", RMSNORM_CONTRACT, "--seeds", "1", "--check-seeds", "1"],
}


@pytest.mark.parametrize("command", sorted(PROFILE_COMMANDS))
def test_a_profile_outside_cpu_and_gpu_is_refused_by_the_parser_before_anything_is_made(command, tmp_path):
    proc = _ferret(*map(str, PROFILE_COMMANDS[command](tmp_path)), "--profile", "foo", cwd=tmp_path)
    line = _usage_error(proc.returncode, proc.stdout, proc.stderr, "--profile", "'foo'", "'cpu'", "'gpu'")
    assert f"ferret {command} --help" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "no gate, run or tolerance folder was made"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="this machine has a CUDA GPU")
@pytest.mark.parametrize("command", sorted(PROFILE_COMMANDS))
def test_profile_gpu_without_a_cuda_gpu_is_a_usage_error(command, tmp_path):
    result = _invoke(*PROFILE_COMMANDS[command](tmp_path), "--profile", "gpu")
    line = _usage_error(result.exit_code, result.stdout, result.stderr)
    assert line == (
        "ferret: --profile gpu needs a CUDA GPU, and this machine has none "
        "(torch.cuda.is_available() is False); use --profile cpu"
    )
    assert list(tmp_path.iterdir()) == []


def test_build_gate_refuses_a_bad_profile_before_making_a_folder(tmp_path):
    # (A gpu gate may be built without a GPU, from Python: tests/bench/test_timing_guards_cpu.py does.)
    from ferret.errors import UsageError
    from ferret.gate.build import build_gate

    with pytest.raises(UsageError, match="profile 'foo' is not one of cpu, gpu"):
        build_gate(RMSNORM_CONTRACT, gates_dir=tmp_path / "gates", profile="foo")
    assert not (tmp_path / "gates").exists()


def test_verify_of_a_folder_or_file_that_is_no_gate_exits_2(tmp_path):
    folder, file, missing = tmp_path / "just-a-folder", tmp_path / "a-file.txt", tmp_path / "nothing-here"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a gate")
    file.write_text("not a gate")
    for path in (folder, file):
        result = _invoke("gate", "verify", path)
        line = _usage_error(result.exit_code, result.stdout, result.stderr)
        assert line == (
            f"ferret: {path} is not a gate folder (no manifest.json): gates are folders gates/<hash> made by `ferret gate build`"
        )
    result = _invoke("gate", "verify", missing)
    _usage_error(result.exit_code, result.stdout, result.stderr, missing, "does not exist")


def test_verify_of_a_gate_whose_manifest_was_deleted_is_still_tampered(gate, tmp_path):
    copy = copy_gate(gate, tmp_path / "gates")
    (copy / "manifest.json").unlink()
    renamed = copy.rename(tmp_path / "gates" / "renamed-gate")  # no hash name left: its cases/ still say gate
    result = _invoke("gate", "verify", renamed)
    assert result.exit_code == 3, result.output
    assert "TAMPERED" in result.stderr and "manifest.json: missing" in result.stderr
    hash_named = tmp_path / "gates" / gate.name  # a gates/<hash> folder emptied of everything
    hash_named.mkdir()
    result = _invoke("gate", "verify", hash_named)
    assert result.exit_code == 3 and "manifest.json: missing" in result.stderr


def test_an_intact_gate_verifies(gate):
    result = _invoke("gate", "verify", gate)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"intact: {gate.name} (")


def test_a_candidate_that_is_a_folder_exits_2(gates_dir, tmp_path):
    result = _invoke("check", RMSNORM_CONTRACT, tmp_path, "--gates-dir", gates_dir, "--profile", "cpu")
    _usage_error(result.exit_code, result.stdout, result.stderr, tmp_path, "is a folder", "CANDIDATE")


def test_a_folder_given_as_gates_dir_must_not_be_a_file(tmp_path):
    file = tmp_path / "gates"
    file.write_text("")
    result = _invoke("check", RMSNORM_CONTRACT, TRITON_RMSNORM, "--gates-dir", file, "--profile", "cpu")
    _usage_error(result.exit_code, result.stdout, result.stderr, "--gates-dir", file)


def test_dispatch_of_a_missing_contract_exits_2_and_makes_no_run(tmp_path):
    missing = tmp_path / "contracts" / "nope.yaml"
    result = _invoke(
        "dispatch",
        missing,
        "--runs-dir",
        tmp_path / "runs",
        "--gates-dir",
        tmp_path / "gates",
        "--profile",
        "cpu",
        "--optimizer",
        "template-search",
        "--reviewer",
        "static",
        "--test-writer",
        "contract-cases",
    )
    _usage_error(result.exit_code, result.stdout, result.stderr, missing)
    assert not (tmp_path / "runs").exists()


def test_dispatch_needs_a_contract_or_resume():
    result = _invoke("dispatch")
    _usage_error(result.exit_code, result.stdout, result.stderr, "CONTRACT", "--resume")


def test_dispatch_without_an_llm_nor_templates_exits_2(tmp_path, monkeypatch):
    import ferret.models.registry

    monkeypatch.setattr(ferret.models.registry, "available_model", lambda backends: None)
    contract = write_contract(tmp_path, lambda d: d.update(op="no_templates_op"), link_tasks=True)
    result = _invoke("dispatch", contract, "--runs-dir", tmp_path / "runs", "--gates-dir", tmp_path / "gates", "--profile", "cpu")
    _usage_error(
        result.exit_code,
        result.stdout,
        result.stderr,
        "no LLM is reachable",
        tmp_path / "tasks" / "no_templates_op" / "templates",
    )
    assert not (tmp_path / "runs").exists()


def test_template_render_of_a_folder_without_space_yaml_exits_2(tmp_path):
    result = _invoke("template", "render", tmp_path)
    _usage_error(result.exit_code, result.stdout, result.stderr, tmp_path, "space.yaml")


def test_an_unknown_option_is_one_line_too():
    result = _invoke("check", "--no-such-option")
    _usage_error(result.exit_code, result.stdout, result.stderr, "--no-such-option", "ferret check --help")


def test_version(tmp_path):
    import ferret

    proc = _ferret("--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"ferret {ferret.__version__}\n" == "ferret 0.1.0\n"


@pytest.mark.parametrize(
    "command",
    [[], ["gate", "build"], ["gate", "verify"], ["check"], ["dispatch"], ["calibrate"], ["template", "render"], ["schema"]],
)
def test_help_states_stdout_stderr_and_every_exit_code(command):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "stdout:" in text and "stderr:" in text
    assert (
        "Exit codes: 0 pass, 1 fail, 2 bad usage or bad contract, 3 tampered gate, 4 internal error of the judge, "
        "5 a fault of the machine (disk full, the judge's own out-of-memory, a lost GPU: nothing recorded against the "
        "candidate, run it again), 6 incomplete dispatch, 130/143 interrupted by SIGINT/SIGTERM."
    ) in text


def test_check_json_prints_only_the_json_object(gate, gates_dir, tmp_path):
    candidate = tmp_path / "zeros.py"
    candidate.write_text(ZEROS_CANDIDATE)
    args = ("check", str(RMSNORM_CONTRACT), str(candidate), "--gates-dir", str(gates_dir), "--profile", "cpu")
    plain = _ferret(*args, cwd=tmp_path)
    as_json = _ferret(*args, "--json", cwd=tmp_path)
    assert plain.returncode == as_json.returncode == 1, as_json.stderr
    result = json.loads(as_json.stdout)  # the whole of stdout is one JSON object
    assert as_json.stdout.count("\n") == 1 and "GATE_RESULT" not in as_json.stdout
    assert result["pass"] is False and result["first_failing_stage"] == "y"
    assert set(result) == set(_gate_result(plain.stdout))


# --- resuming a run: the contract comes from its log -----------------------------------------------------


class _OneRoundThenInterrupted:
    """Round 1: the zeros candidate (quick to judge: plain torch); round 2: Ctrl-C."""

    name = "scripted-optimizer"

    def propose(self, context):
        from ferret.roles.base import Proposal

        if context.round == 1:
            return [Proposal(source=ZEROS_CANDIDATE, approach="zeros")]
        raise KeyboardInterrupt


@pytest.fixture(scope="module")
def interrupted_run(gate, gates_dir, tmp_path_factory) -> tuple[Path, str]:
    """An interrupted run folder (round 1 judged, Ctrl-C in round 2) and its log's stop reason."""
    from ferret.dispatch import Dispatcher
    from ferret.roles.review import StaticReviewer
    from ferret.roles.test_writer import ContractCasesOnly

    runs = tmp_path_factory.mktemp("cli-runs")
    log = Dispatcher(
        RMSNORM_CONTRACT,
        optimizer=_OneRoundThenInterrupted(),
        reviewer=StaticReviewer(),
        test_writer=ContractCasesOnly(),
        gates_dir=gates_dir,
        runs_dir=runs,
        profile="cpu",
    ).run()
    assert log.status == "incomplete" and len(log.rounds) == 1
    return runs / log.run_id, log.stop_reason


@pytest.fixture
def run_copy(interrupted_run, tmp_path) -> Path:
    """A copy of the interrupted run, so each test may change it."""
    import shutil

    return Path(shutil.copytree(interrupted_run[0], tmp_path / "runs" / interrupted_run[0].name))


OFFLINE_ROLES = ("--optimizer", "template-search", "--reviewer", "static", "--test-writer", "contract-cases")


def test_the_interrupt_hint_is_a_command_that_resumes_without_the_contract(interrupted_run, gates_dir, tmp_path):
    folder, stop_reason = interrupted_run
    assert stop_reason == f"interrupted by SIGINT (resume with `ferret dispatch --resume {folder}`)"
    hint = stop_reason.split("`")[1].split()
    assert hint == ["ferret", "dispatch", "--resume", str(folder)]
    run_id = json.loads((folder / "run.json").read_text())["run_id"]
    # One round is in the log: --max-rounds 1 ends the resumed run at once, as incomplete (exit 6).
    proc = _ferret(*hint[1:], "--gates-dir", str(gates_dir), "--max-rounds", "1", *OFFLINE_ROLES, "--json", cwd=tmp_path)
    assert proc.returncode == 6, proc.stderr
    assert "Traceback" not in proc.stderr
    result = json.loads(proc.stdout)  # --json: only the object on stdout
    assert result["run_id"] == run_id and result["status"] == "incomplete"
    assert "maximum of 1 rounds" in result["stop_reason"]
    assert f"resuming {run_id} after round 1" in proc.stderr
    log = json.loads((folder / "run.json").read_text())
    assert len(log["rounds"]) == 1 and log["stop_reason"] == result["stop_reason"]


def test_resume_with_the_runs_own_contract_named_works(run_copy, gates_dir):
    result = _invoke(
        "dispatch", RMSNORM_CONTRACT, "--resume", run_copy, "--gates-dir", gates_dir, "--max-rounds", "1", *OFFLINE_ROLES
    )
    assert result.exit_code == 6, result.output
    assert json.loads(result.stdout.removeprefix("RUN_RESULT "))["run_id"] == run_copy.name
    assert result.stdout.startswith("RUN_RESULT {")


def test_resume_with_another_contract_exits_2_naming_both(run_copy, gates_dir, tmp_path):
    other = write_contract(tmp_path / "other", lambda d: d["budgets"].update(max_rounds=7), name="other.yaml")
    before = (run_copy / "run.json").read_bytes()
    result = _invoke("dispatch", other, "--resume", run_copy, "--gates-dir", gates_dir, *OFFLINE_ROLES)
    line = _usage_error(
        result.exit_code,
        result.stdout,
        result.stderr,
        f"--resume {run_copy} was started with {RMSNORM_CONTRACT}",
        f"{other} is a different contract",
        "start a new run",
    )
    assert json.loads(before)["contract_sha256"][:12] in line
    assert (run_copy / "run.json").read_bytes() == before


def test_resume_after_the_runs_contract_changed_exits_2(run_copy, gates_dir, tmp_path):
    import shutil

    moved = tmp_path / "contracts" / "rmsnorm.yaml"
    moved.parent.mkdir()
    shutil.copy(RMSNORM_CONTRACT, moved)
    log = json.loads((run_copy / "run.json").read_text())
    log["contract_path"] = str(moved)
    (run_copy / "run.json").write_text(json.dumps(log))
    moved.write_text(moved.read_text() + "# edited after the run started\n")
    result = _invoke("dispatch", "--resume", run_copy, "--gates-dir", gates_dir, *OFFLINE_ROLES)
    _usage_error(
        result.exit_code,
        result.stdout,
        result.stderr,
        f"--resume {run_copy} was started with {moved}",
        "which has changed since",
        str(run_copy / "contract.yaml"),
    )


def test_resume_of_a_folder_without_run_json_exits_2(tmp_path):
    result = _invoke("dispatch", "--resume", tmp_path, *OFFLINE_ROLES)
    _usage_error(result.exit_code, result.stdout, result.stderr, f"--resume {tmp_path} is not a run folder (no run.json)")


def test_resume_with_another_profile_exits_2(run_copy, gates_dir):
    result = _invoke("dispatch", "--resume", run_copy, "--profile", "gpu", "--gates-dir", gates_dir, *OFFLINE_ROLES)
    _usage_error(result.exit_code, result.stdout, result.stderr, f"--resume {run_copy} runs with profile cpu", "--profile gpu")
