"""The sha256 lock of a gate: reproducible, and every changed, added or removed byte is named."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT, copy_gate, flip_byte  # noqa: E402

import ferret.gate.lock as lock  # noqa: E402
from ferret.cli.main import app  # noqa: E402
from ferret.gate.build import build_gate  # noqa: E402
from ferret.gate.lock import MANIFEST_FILE, GateTampered, canonical_json, locked_files, verify_gate  # noqa: E402

VARIANT = "typical@float32"


def _tampered(gate: Path) -> GateTampered:
    with pytest.raises(GateTampered) as info:
        verify_gate(gate)
    return info.value


def test_intact_gate_verifies(rmsnorm_gate):
    manifest = verify_gate(rmsnorm_gate)
    assert manifest["op"] == "rmsnorm"
    assert manifest["profile"] == "cpu"
    assert hashlib.sha256((rmsnorm_gate / MANIFEST_FILE).read_bytes()).hexdigest() == rmsnorm_gate.name
    files = locked_files(rmsnorm_gate)
    assert sorted(manifest["files"]) == files
    assert "contract.json" in files
    assert f"cases/{VARIANT}/golden.safetensors" in files
    assert f"cases/{VARIANT}/inputs.safetensors" in files
    # The judge's own source is pinned too.
    assert "ferret/gate/judge.py" in manifest["judge_sources"]
    assert "ferret/sandbox/runner.py" in manifest["judge_sources"]
    assert manifest["validation"]["ran"] is True and manifest["validation"]["passed"] is True


def test_gate_files_are_read_only(rmsnorm_gate):
    for name in locked_files(rmsnorm_gate) + [MANIFEST_FILE]:
        assert (rmsnorm_gate / name).stat().st_mode & 0o222 == 0, name


def test_build_is_reused(rmsnorm_gate, rmsnorm_gates_dir):
    assert build_gate(RMSNORM_CONTRACT, gates_dir=rmsnorm_gates_dir, profile="cpu") == rmsnorm_gate


def test_build_is_reproducible(rmsnorm_gate, tmp_path):
    first = build_gate(RMSNORM_CONTRACT, gates_dir=tmp_path / "a", profile="cpu", reuse=False)
    second = build_gate(RMSNORM_CONTRACT, gates_dir=tmp_path / "b", profile="cpu", reuse=False)
    assert first.name == second.name == rmsnorm_gate.name
    assert first.parent != second.parent
    for name in locked_files(first) + [MANIFEST_FILE]:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


@pytest.mark.parametrize(
    "name",
    [f"cases/{VARIANT}/golden.safetensors", f"cases/{VARIANT}/inputs.safetensors", "contract.json", MANIFEST_FILE],
)
def test_one_changed_byte_is_named(rmsnorm_gate, tmp_path, name):
    gate = copy_gate(rmsnorm_gate, tmp_path)
    verify_gate(gate)  # the copy itself is intact
    flip_byte(gate / name)
    err = _tampered(gate)
    assert any(p.startswith(f"{name}:") for p in err.problems), err.problems
    assert name in str(err)
    if name != MANIFEST_FILE:
        assert err.problems == [f"{name}: changed (sha256 differs from the lock)"]


def test_rehashed_manifest_does_not_match_the_gate_hash(rmsnorm_gate, tmp_path):
    """Replacing a golden file and updating its hash in the manifest still breaks the gate's name."""
    gate = copy_gate(rmsnorm_gate, tmp_path)
    golden = gate / f"cases/{VARIANT}/golden.safetensors"
    flip_byte(golden)
    manifest = json.loads((gate / MANIFEST_FILE).read_text())
    manifest["files"][f"cases/{VARIANT}/golden.safetensors"] = lock.sha256_file(golden)
    (gate / MANIFEST_FILE).write_bytes(canonical_json(manifest))
    err = _tampered(gate)
    assert len(err.problems) == 1 and err.problems[0].startswith(f"{MANIFEST_FILE}: sha256"), err.problems


def test_expected_hash_is_checked(rmsnorm_gate):
    verify_gate(rmsnorm_gate, expected_hash=rmsnorm_gate.name)
    with pytest.raises(GateTampered, match=MANIFEST_FILE):
        verify_gate(rmsnorm_gate, expected_hash="0" * 64)


@pytest.mark.parametrize(
    "name", ["notes.txt", f"cases/{VARIANT}/extra.safetensors", "cases/new_case@bfloat16/golden.safetensors"]
)
def test_added_file_is_named(rmsnorm_gate, tmp_path, name):
    gate = copy_gate(rmsnorm_gate, tmp_path)
    (gate / name).parent.mkdir(parents=True, exist_ok=True)
    (gate / name).write_bytes(b"extra")
    err = _tampered(gate)
    assert err.problems == [f"{name}: added after the gate was locked"]


@pytest.mark.parametrize("name", [f"cases/{VARIANT}/golden.safetensors", "contract.json"])
def test_removed_file_is_named(rmsnorm_gate, tmp_path, name):
    gate = copy_gate(rmsnorm_gate, tmp_path)
    (gate / name).unlink()
    err = _tampered(gate)
    assert err.problems == [f"{name}: missing"]


def test_removed_manifest(rmsnorm_gate, tmp_path):
    gate = copy_gate(rmsnorm_gate, tmp_path)
    (gate / MANIFEST_FILE).unlink()
    err = _tampered(gate)
    assert err.problems == [f"{MANIFEST_FILE}: missing"]


def test_several_problems_are_all_named(rmsnorm_gate, tmp_path):
    gate = copy_gate(rmsnorm_gate, tmp_path)
    flip_byte(gate / "contract.json")
    (gate / f"cases/{VARIANT}/inputs.safetensors").unlink()
    (gate / "extra.bin").write_bytes(b"x")
    err = _tampered(gate)
    assert sorted(err.problems) == sorted(
        [
            "contract.json: changed (sha256 differs from the lock)",
            f"cases/{VARIANT}/inputs.safetensors: missing",
            "extra.bin: added after the gate was locked",
        ]
    )


def test_report_files_are_outside_the_lock(rmsnorm_gate, tmp_path):
    gate = copy_gate(rmsnorm_gate, tmp_path)
    (gate / "report.json").write_text('{"anything": true}')
    (gate / "report.json.lock").write_text("")
    verify_gate(gate)
    # Only those names: a report-like file elsewhere is still an addition.
    (gate / "cases" / "report.json").write_text("{}")
    assert _tampered(gate).problems == ["cases/report.json: added after the gate was locked"]


def test_changed_judge_source_is_tampering(rmsnorm_gate, monkeypatch):
    real = lock.judge_source_hashes()
    assert "ferret/gate/metrics.py" in real

    changed = dict(real, **{"ferret/gate/metrics.py": "0" * 64})
    monkeypatch.setattr(lock, "judge_source_hashes", lambda: changed)
    assert _tampered(rmsnorm_gate).problems == ["judge source ferret/gate/metrics.py: changed since the gate was built"]

    added = dict(real, **{"ferret/gate/backdoor.py": "1" * 64})
    monkeypatch.setattr(lock, "judge_source_hashes", lambda: added)
    assert _tampered(rmsnorm_gate).problems == ["judge source ferret/gate/backdoor.py: added since the gate was built"]

    removed = {k: v for k, v in real.items() if k != "ferret/sandbox/launch.py"}
    monkeypatch.setattr(lock, "judge_source_hashes", lambda: removed)
    assert _tampered(rmsnorm_gate).problems == ["judge source ferret/sandbox/launch.py: missing"]

    monkeypatch.undo()
    verify_gate(rmsnorm_gate)


def test_judge_source_hashes_cover_what_the_judge_imports():
    """Derived from the code: the judge's modules, the wire and the runner's, the static scan it calls; not
    the layers above it (dispatcher, roles, models, CLI), whose edits must not invalidate gates."""
    hashes = lock.judge_source_hashes()
    for name in (
        "ferret/gate/judge.py",
        "ferret/gate/timing.py",
        "ferret/wire.py",
        "ferret/errors.py",
        "ferret/sandbox/runner.py",
        "ferret/sandbox/watch.py",
        "ferret/bench/process.py",
        "ferret/integrity/scan.py",
        "ferret/contract/model.py",
        "ferret/__init__.py",
    ):
        assert name in hashes, name
    for layer in ("cli", "dispatch", "roles", "models"):
        assert not any(name.startswith(f"ferret/{layer}/") for name in hashes), layer
    path = Path(lock.__file__)
    assert hashes["ferret/gate/lock.py"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_module_the_judge_starts_importing_is_locked_from_then_on(tmp_path):
    root = tmp_path / "ferret"
    (root / "gate").mkdir(parents=True)
    (root / "sandbox").mkdir()
    (root / "bench").mkdir()
    for name in (
        "__init__.py",
        "gate/__init__.py",
        "sandbox/__init__.py",
        "bench/__init__.py",
        "helper.py",
        "sandbox/runner.py",
        "bench/process.py",
        "gate/build.py",
        "unrelated.py",
    ):
        (root / name).write_text("")
    (root / "gate" / "judge.py").write_text("def f():\n    from ferret import helper\n")
    files = {p.relative_to(root).as_posix() for p in lock.judge_source_files(root)}
    assert "helper.py" in files and "unrelated.py" not in files and "gate/judge.py" in files


def test_the_judge_source_is_parsed_again_when_it_changes(tmp_path):
    """What each module imports is remembered by its content, not its name or time: a check verifies the
    gate several times and parses the judge's source once, and any edit is read again."""
    root = tmp_path / "ferret"
    for name in (
        "__init__.py",
        "gate/__init__.py",
        "helper.py",
        "hidden.py",
        "sandbox/runner.py",
        "bench/process.py",
        "gate/build.py",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("")
    judge = root / "gate" / "judge.py"
    judge.write_text("from ferret import helper\n")
    before = {p.name for p in lock.judge_source_files(root)}
    assert "helper.py" in before and "hidden.py" not in before
    assert {p.name for p in lock.judge_source_files(root)} == before
    stamp = judge.stat()
    judge.write_text("from ferret import hidden\n")  # as many bytes, and the same modification time
    os.utime(judge, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    after = {p.name for p in lock.judge_source_files(root)}
    assert "hidden.py" in after and "helper.py" not in after


def test_files_hashed_together_hash_as_one_by_one(rmsnorm_gate):
    names = locked_files(rmsnorm_gate)
    assert len(names) > 2
    assert lock.sha256_files(rmsnorm_gate, names) == {n: lock.sha256_file(rmsnorm_gate / n) for n in names}


def test_cli_verify_intact(rmsnorm_gate):
    result = CliRunner().invoke(app, ["gate", "verify", str(rmsnorm_gate)])
    assert result.exit_code == 0, result.output
    assert f"intact: {rmsnorm_gate.name}" in result.stdout


def test_cli_verify_tampered(rmsnorm_gate, tmp_path):
    gate = copy_gate(rmsnorm_gate, tmp_path)
    flip_byte(gate / f"cases/{VARIANT}/golden.safetensors")
    result = CliRunner().invoke(app, ["gate", "verify", str(gate)])
    assert result.exit_code == 3, result.output
    assert "TAMPERED" in result.stderr
    assert f"cases/{VARIANT}/golden.safetensors: changed" in result.stderr


def test_cli_verify_missing_folder(tmp_path):
    result = CliRunner().invoke(app, ["gate", "verify", str(tmp_path / "nope")])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr


def test_a_gate_another_process_locked_first_is_kept(rmsnorm_gate, tmp_path, monkeypatch):
    """Two builds of one contract sharing a gates folder (parallel test workers, two dispatches): the one
    that renames second finds the folder taken, keeps the other's identical gate, and leaves no staging."""
    import shutil

    real_replace = os.replace

    def another_process_wins(src, dst):
        if Path(src).name.startswith(".building-"):
            shutil.copytree(rmsnorm_gate, dst)  # the same bytes, locked by "the other process" just now
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", another_process_wins)
    gates_dir = tmp_path / "gates"
    gate = build_gate(RMSNORM_CONTRACT, gates_dir=gates_dir, profile="cpu", reuse=False)
    assert gate == gates_dir / rmsnorm_gate.name
    verify_gate(gate)
    assert [p.name for p in gates_dir.iterdir()] == [rmsnorm_gate.name]


def test_cli_gate_build_reuses(rmsnorm_gate, rmsnorm_gates_dir):
    result = CliRunner().invoke(
        app, ["gate", "build", str(RMSNORM_CONTRACT), "--gates-dir", str(rmsnorm_gates_dir), "--profile", "cpu"]
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(rmsnorm_gate)


def test_a_damaged_trust_registry_is_refused_naming_the_file(tmp_path, monkeypatch):
    from ferret.gate.trust import is_trusted, record_gate

    monkeypatch.setenv("FERRET_TRUST_DIR", str(tmp_path))
    record_gate("a" * 64, {"op": "rmsnorm"})
    assert is_trusted("a" * 64)
    (tmp_path / "trusted_gates.json").write_text('{"truncated": ')
    with pytest.raises(GateTampered, match="trusted_gates.json"):
        is_trusted("a" * 64)
    with pytest.raises(GateTampered):
        record_gate("b" * 64, {"op": "rmsnorm"})
    assert (tmp_path / "trusted_gates.json").read_text() == '{"truncated": '  # not overwritten


# --- The project's files the judge loads for a contract (the task's modules, the tolerance file) ------------
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def project_gate(tmp_path_factory):
    """A copy of the project's rmsnorm task (modules and contract with its tolerance file) and its CPU gate:
    tests edit the copy's files and put their bytes back."""
    import shutil

    root = tmp_path_factory.mktemp("project")
    shutil.copytree(REPO / "tasks" / "rmsnorm", root / "tasks" / "rmsnorm", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "tasks" / "__init__.py", root / "tasks" / "__init__.py")
    (root / "contracts").mkdir()
    for name in ("rmsnorm.yaml", "rmsnorm.tolerances.yaml"):
        shutil.copy(REPO / "contracts" / name, root / "contracts" / name)
    gate = build_gate(root / "contracts" / "rmsnorm.yaml", gates_dir=root / "gates", profile="cpu")
    return root, gate


def _appended(path: Path, line: str = "# one more line\n"):
    """Append `line` to `path` for the duration of a with-block."""
    import contextlib

    @contextlib.contextmanager
    def edit():
        before = path.read_bytes()
        path.write_bytes(before + line.encode())
        try:
            yield
        finally:
            path.write_bytes(before)

    return edit()


def test_the_project_files_the_judge_loads_are_locked(project_gate):
    root, gate = project_gate
    project = verify_gate(gate)["project"]
    assert project["root"] == str(root.resolve())
    assert project["entry_modules"] == ["tasks.rmsnorm.baseline", "tasks.rmsnorm.reference"]
    assert project["tolerance_file"] == "contracts/rmsnorm.tolerances.yaml"
    assert sorted(project["files"]) == [
        "contracts/rmsnorm.tolerances.yaml",
        "tasks/__init__.py",
        "tasks/rmsnorm/__init__.py",
        "tasks/rmsnorm/baseline.py",
        "tasks/rmsnorm/reference.py",
    ]


@pytest.mark.parametrize(
    "name",
    [
        "tasks/rmsnorm/reference.py",
        "tasks/rmsnorm/baseline.py",
        "tasks/rmsnorm/__init__.py",
        "tasks/__init__.py",
        "contracts/rmsnorm.tolerances.yaml",
    ],
)
def test_an_appended_line_in_a_project_file_is_tampering(project_gate, name):
    root, gate = project_gate
    with _appended(root / name):
        problems = _tampered(gate).problems
        result = CliRunner().invoke(app, ["gate", "verify", str(gate)])
    assert problems == [f"project file {name}: changed since the gate was built; {lock.REBUILD}"]
    assert result.exit_code == 3 and f"project file {name}: changed" in result.stderr and "ferret gate build" in result.stderr
    verify_gate(gate)  # the bytes put back: intact again


def test_a_changed_project_file_gets_a_new_gate(project_gate):
    """The project's files are in the build key: `ferret gate build` after an edit builds a fresh gate (it
    does not reuse, nor fail on, the old one), and the old one is intact again once the edit is undone."""
    root, gate = project_gate
    with _appended(root / "tasks/rmsnorm/reference.py"):
        rebuilt = build_gate(root / "contracts" / "rmsnorm.yaml", gates_dir=root / "gates", profile="cpu")
        assert rebuilt != gate
        verify_gate(rebuilt)
    verify_gate(gate)


def test_a_module_the_reference_starts_importing_is_named(project_gate):
    root, gate = project_gate
    helper = root / "tasks" / "rmsnorm" / "helper.py"
    helper.write_text("EPS = 1e-6\n")
    try:
        assert verify_gate(gate)  # not imported by anything the judge loads: not part of the gate
        with _appended(root / "tasks/rmsnorm/reference.py", "from tasks.rmsnorm import helper  # noqa\n"):
            problems = _tampered(gate).problems
    finally:
        helper.unlink()
    added = "project file tasks/rmsnorm/helper.py: loaded by the judge now but not when the gate was built"
    assert f"{added}; {lock.REBUILD}" in problems
    assert "project file tasks/rmsnorm/reference.py: changed since the gate was built; " + lock.REBUILD in problems


def test_a_removed_project_file_is_named(project_gate):
    root, gate = project_gate
    tolerances = root / "contracts" / "rmsnorm.tolerances.yaml"
    before = tolerances.read_bytes()
    tolerances.unlink()
    try:
        problems = _tampered(gate).problems
    finally:
        tolerances.write_bytes(before)
    assert problems == [f"project file contracts/rmsnorm.tolerances.yaml: missing; {lock.REBUILD}"]


def test_a_manifest_without_the_project_record_is_refused(rmsnorm_gate):
    manifest = json.loads((rmsnorm_gate / MANIFEST_FILE).read_text())
    del manifest["project"]
    assert lock._project_problems(manifest.get("project")) == [
        f"project files: not recorded (a gate built before the task's files were locked); {lock.REBUILD}"
    ]


def test_the_mla_task_locks_what_its_judge_loads():
    """Derived from the contract's entries and their imports: the oracle module imports the reference; the
    input generator of tests/tasks/mla_attention (inputs.py) is loaded by no entry, so it is not the gate's
    (the judge draws inputs from the contract's own distributions, pinned in contract.json)."""
    from ferret.contract.load import load_contract

    path = REPO / "contracts" / "mla_attention.yaml"
    project = lock.project_lock(path, load_contract(path), REPO)
    assert sorted(project["files"]) == [
        "contracts/mla_attention.tolerances.yaml",
        "tasks/__init__.py",
        "tasks/mla_attention/__init__.py",
        "tasks/mla_attention/baseline.py",
        "tasks/mla_attention/oracle.py",
        "tasks/mla_attention/reference.py",
    ]


@pytest.fixture
def ferret_copy(tmp_path, monkeypatch):
    """The judge's source read from a copy of the ferret package (same bytes), so that a test can edit it."""
    import shutil

    import ferret

    copy = tmp_path / "ferret"
    shutil.copytree(Path(ferret.__file__).resolve().parent, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(ferret, "__file__", str(copy / "__init__.py"))
    return copy


def test_an_appended_line_in_the_static_scan_is_tampering(rmsnorm_gate, ferret_copy):
    verify_gate(rmsnorm_gate)
    with _appended(ferret_copy / "integrity" / "scan.py"):
        assert _tampered(rmsnorm_gate).problems == ["judge source ferret/integrity/scan.py: changed since the gate was built"]
    verify_gate(rmsnorm_gate)


@pytest.mark.parametrize("layer", ["dispatch", "roles", "models", "cli"])
def test_editing_code_the_judge_never_runs_leaves_gates_intact(rmsnorm_gate, project_gate, ferret_copy, layer):
    files = sorted((ferret_copy / layer).rglob("*.py"))
    assert files
    for path in files:
        path.write_bytes(path.read_bytes() + b"# one more line\n")
    verify_gate(rmsnorm_gate)
    verify_gate(project_gate[1])


def test_a_task_importing_ferret_does_not_pull_ferret_into_the_project_files(tmp_path):
    """ferret's modules are the judge's source, locked (or not: the CLI) as such, never as task files."""
    for name, text in {
        "tasks/__init__.py": "",
        "tasks/op/__init__.py": "",
        "tasks/op/helper.py": "",
        "tasks/op/reference.py": "import ferret.cli.main\nfrom tasks.op import helper\n",
        "ferret/__init__.py": "",
        "ferret/cli/__init__.py": "",
        "ferret/cli/main.py": "",
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    files = lock.project_source_hashes({"root": str(tmp_path), "entry_modules": ["tasks.op.reference"]})
    assert sorted(files) == ["tasks/__init__.py", "tasks/op/__init__.py", "tasks/op/helper.py", "tasks/op/reference.py"]
