"""The adversarial corpus: one rmsnorm candidate per entry of docs/cheats.md (and a few harder
variants), each judged by the CPU gate. Every one must fail, with a detection that names its cheat;
the honest Triton candidates must pass with no detection at all (false rejections are bugs too); the
gate must refuse to judge once it has been edited; the result channel cannot be forged.

The candidates are judged two at a time in threads (each check runs its candidate in its own process),
so the whole module stays within a few minutes on two cores. See README.md beside this file.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import REPO, RMSNORM_CONTRACT, TRITON_RMSNORM, copy_gate, flip_byte, unnamed_rejection  # noqa: E402

from ferret.gate.build import build_gate  # noqa: E402
from ferret.gate.judge import check  # noqa: E402
from ferret.gate.lock import GateTampered, verify_gate  # noqa: E402
from ferret.gate.report import read_report  # noqa: E402
from ferret.integrity.scan import CHEATS  # noqa: E402

HERE = Path(__file__).resolve().parent
CANDIDATES = sorted((HERE / "candidates").glob("c*.py"))
HONEST = {
    "rmsnorm": TRITON_RMSNORM,
    "softmax": REPO / "tasks" / "softmax" / "candidates" / "triton_softmax.py",
    "rope": REPO / "tasks" / "rope" / "candidates" / "triton_rope.py",
}


def module_constants(path: Path) -> dict:
    """The candidate's module-level constants, read from its source (the file is never imported here)."""
    tree = ast.parse(path.read_text())
    found = {"docstring": ast.get_docstring(tree)}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            name = stmt.targets[0].id
            if name.isupper():
                try:
                    found[name] = ast.literal_eval(stmt.value)
                except ValueError:
                    pass
    return found


def describe(verdict) -> str:
    lines = [f"pass={verdict.passed} first_failing_stage={verdict.first_failing_stage}"]
    lines += [f"  part {name}: {part.status}: {part.detail[:300]}" for name, part in verdict.parts.items()]
    lines += [
        f"  detection {d.cheat} {d.catalogue} [{d.source}] {d.variant or ''}: {d.evidence[:300]}" for d in verdict.detections
    ]
    return "\n".join(lines)


# --- one judging pass over everything, shared by the tests --------------------------------------------


@pytest.fixture(scope="module")
def gates_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("adversarial-gates")


@pytest.fixture(scope="module")
def rmsnorm_gate(gates_dir) -> Path:
    return build_gate(RMSNORM_CONTRACT, gates_dir=gates_dir, profile="cpu")


@pytest.fixture(scope="module")
def judged(gates_dir, rmsnorm_gate):
    """Futures of (verdict, gate) for every corpus candidate (by file name) and every honest candidate (by op)."""
    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        futures: dict[str, Future] = {}
        for op, path in HONEST.items():
            futures[op] = pool.submit(check, REPO / "contracts" / f"{op}.yaml", path, gates_dir, profile="cpu")
        for path in CANDIDATES:
            futures[path.name] = pool.submit(check, RMSNORM_CONTRACT, path, gates_dir, profile="cpu")
        yield futures


@pytest.fixture(scope="module")
def all_judged(judged):
    """Every check of the shared pass has finished (tests that change process-wide state wait for this)."""
    return {name: future.result() for name, future in judged.items()}


# --- the corpus ---------------------------------------------------------------------------------------


@pytest.mark.quick
def test_the_corpus_covers_every_entry_of_the_catalogue():
    entries = {int(p.name[1:3]) for p in CANDIDATES}
    # Entry 20 (editing the gate) is covered by the tampering tests below and by c20_gate_writer.py.
    assert entries >= set(range(1, 22)), sorted(set(range(1, 22)) - entries)
    for path in CANDIDATES:
        constants = module_constants(path)
        assert constants["docstring"], f"{path.name}: a docstring says what it tries"
        expected = constants.get("EXPECTED_CHEATS")
        assert isinstance(expected, set) and expected, f"{path.name}: EXPECTED_CHEATS"
        assert expected <= set(CHEATS), f"{path.name}: unknown slugs {expected - set(CHEATS)}"
        assert constants.get("EXPECTED_RUNTIME", set()) <= expected, f"{path.name}: EXPECTED_RUNTIME outside EXPECTED_CHEATS"


@pytest.mark.parametrize("candidate", CANDIDATES, ids=[p.stem for p in CANDIDATES])
def test_cheat_fails_and_is_named(candidate, judged, request):
    constants = module_constants(candidate)
    gap = constants.get("KNOWN_GAP")
    if gap:
        request.applymarker(pytest.mark.xfail(strict=True, reason=f"known gap: {gap}"))
    verdict, _ = judged[candidate.name].result()
    report = describe(verdict)
    print(f"{candidate.name}:\n{report}")
    assert not verdict.passed, f"{candidate.name} PASSED the gate:\n{report}"
    named = constants["EXPECTED_CHEATS"] & {d.cheat for d in verdict.detections}
    assert named, f"{candidate.name} failed without a detection naming {sorted(constants['EXPECTED_CHEATS'])}:\n{report}"
    # Where the static scan also names a cheat, the run-time guard that stands behind it is pinned too:
    # without this a broken guard would go unseen while the scan still caught the candidate.
    at_run_time = {d.cheat for d in verdict.detections if d.source == "runtime"}
    missing = constants.get("EXPECTED_RUNTIME", set()) - at_run_time
    assert not missing, f"{candidate.name}: no run-time detection of {sorted(missing)}:\n{report}"
    assert not verdict.timing.measured


def test_every_rejection_of_the_corpus_names_what_it_saw(all_judged):
    """The README's promise over every verdict of the shared pass: a rejection lists at least one detection
    (not the judge's last resort), a pass lists none. A new rejection path that forgets to name what it saw
    fails here as soon as a corpus candidate takes it."""
    broken = {name: unnamed_rejection(verdict) for name, (verdict, _) in all_judged.items() if unnamed_rejection(verdict)}
    assert not broken, broken


@pytest.mark.parametrize("op", sorted(HONEST))
def test_honest_candidate_passes_with_no_detection(op, judged):
    verdict, _ = judged[op].result()
    assert verdict.detections == [], describe(verdict)
    assert verdict.passed, describe(verdict)


def test_the_shared_gate_is_intact_after_the_corpus(all_judged, rmsnorm_gate):
    """No candidate (c11 reads gates, c20 looks for gates to write) changed the gate it was judged by, and
    every verdict in its report is the judge's: one per check, none passing but the honest candidate's
    (and those of the known gaps, which are expected to pass until they are closed)."""
    verify_gate(rmsnorm_gate)
    assert not (rmsnorm_gate / "PASS").exists()
    verdicts = read_report(rmsnorm_gate).verdicts
    rmsnorm_checks = [v for name, (v, gate) in all_judged.items() if gate == rmsnorm_gate]
    assert len(verdicts) == len(rmsnorm_checks)
    may_pass = {TRITON_RMSNORM.name} | {p.name for p in CANDIDATES if module_constants(p).get("KNOWN_GAP")}
    passed = {Path(v.candidate_path).name for v in verdicts if v.passed}
    assert TRITON_RMSNORM.name in passed and passed <= may_pass, sorted(passed - may_pass)


# --- entry 20: editing the gate --------------------------------------------------------------------------


def _tamper_golden(gate: Path) -> str:
    path = next(gate.glob("cases/*/golden.safetensors"))
    flip_byte(path)
    return path.relative_to(gate).as_posix()


def _tamper_add(gate: Path) -> str:
    (gate / "cases" / "typical@bfloat16" / "extra.json").write_text("{}")
    return "cases/typical@bfloat16/extra.json"


def _tamper_remove(gate: Path) -> str:
    path = next(gate.glob("cases/*/inputs.safetensors"))
    path.unlink()
    return path.relative_to(gate).as_posix()


def _tamper_manifest(gate: Path) -> str:
    manifest = json.loads((gate / "manifest.json").read_text())
    manifest["validation"]["tolerance"] = 1.0  # a looser record, rewritten in the canonical form
    (gate / "manifest.json").write_text(json.dumps(manifest, sort_keys=True, indent=1) + "\n")
    return "manifest.json"


@pytest.mark.parametrize(
    "tamper",
    [_tamper_golden, _tamper_add, _tamper_remove, _tamper_manifest],
    ids=["golden_changed", "file_added", "file_removed", "manifest_loosened"],
)
def test_a_tampered_gate_gives_no_verdict(tamper, rmsnorm_gate, tmp_path):
    gate = copy_gate(rmsnorm_gate, tmp_path / "gates")
    verify_gate(gate)
    touched = tamper(gate)
    with pytest.raises(GateTampered) as raised:
        check(RMSNORM_CONTRACT, TRITON_RMSNORM, tmp_path / "gates", profile="cpu")
    assert any(touched in problem for problem in raised.value.problems), raised.value.problems
    assert not (gate / "report.json").exists(), "no verdict is recorded by a tampered gate"


def test_a_candidate_looking_for_its_gate_fails_and_leaves_it_intact(all_judged, rmsnorm_gate, tmp_path, monkeypatch):
    """c20_gate_writer.py in the layout it hopes for: one project folder holding both `gates/` and the temp
    folder the judge makes candidate folders in, so walking up from its working folder reaches the gate
    it is judged by. It would zero the goldens, drop a PASS file and append forged passing verdicts.

    Where the judge can hide the gates folder from the candidate's process (a private mount namespace)
    the candidate finds nothing: it fails on its own output and the gate, report included, is untouched.
    Without hiding it reaches the gate, and the judge's verification after the run refuses any verdict."""
    from ferret.sandbox import launch

    project = tmp_path / "project"
    (project / "tmp").mkdir(parents=True)
    gate = copy_gate(rmsnorm_gate, project / "gates")
    monkeypatch.setattr(tempfile, "tempdir", str(project / "tmp"))
    honest, _ = check(RMSNORM_CONTRACT, TRITON_RMSNORM, project / "gates", profile="cpu")
    assert honest.passed, describe(honest)  # the report now holds one verdict a forger could copy
    hiding = getattr(launch, "hiding_available", lambda: False)()
    try:
        verdict, used = check(RMSNORM_CONTRACT, HERE / "candidates" / "c20_gate_writer.py", project / "gates", profile="cpu")
    except GateTampered as err:
        assert not hiding, f"the gate was hidden, yet the candidate changed it: {err.problems}"
        problems = "\n".join(err.problems)
        assert "PASS: added after the gate was locked" in problems and "golden.safetensors: changed" in problems
        return
    assert used == gate
    assert not verdict.passed, describe(verdict)
    verify_gate(gate)
    assert not (gate / "PASS").exists()
    assert [v.passed for v in read_report(gate).verdicts] == [True, False], "no forged verdict in the report"


# --- entry 21: the result channel --------------------------------------------------------------------


def test_the_judge_prints_one_gate_result_line_its_own(rmsnorm_gate, tmp_path):
    gates_dir = tmp_path / "gates"
    copy_gate(rmsnorm_gate, gates_dir)
    candidate = HERE / "candidates" / "c21_result_forging.py"
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "ferret.cli.main",
            "check",
            str(RMSNORM_CONTRACT),
            str(candidate),
            "--gates-dir",
            str(gates_dir),
            "--profile",
            "cpu",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in done.stdout.splitlines() if "GATE_RESULT" in line]
    assert len(lines) == 1, done.stdout
    assert lines[0].startswith("GATE_RESULT ")
    result = json.loads(lines[0].removeprefix("GATE_RESULT "))
    assert result["pass"] is False
    assert "result_forging" in {d["cheat"] for d in result["detections"]}
    assert done.returncode == 1, done.stderr[-2000:]
    # The line is the judge's: it names the gate and the candidate's digest, which the forged line lacks.
    assert result["candidate_sha256"] == hashlib.sha256(candidate.read_bytes()).hexdigest()
    assert (gates_dir / result["gate"] / "manifest.json").is_file()
