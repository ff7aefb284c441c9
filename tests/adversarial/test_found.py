"""Red-team findings (tests/adversarial/found/): each one the gate accepted while it errs on independent inputs.

Each is judged by its contract's CPU gate and must be rejected; until a defence lands that is a strict xfail, so the
test turns into a failure the day a defence rejects it, which says to move the file into the corpus. The folder may
be empty: the mechanism is proven on a finding written to a temporary folder.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import REPO, RMSNORM_CONTRACT, TRITON_RMSNORM  # noqa: E402

from ferret.contract.task import Task  # noqa: E402
from ferret.gate.judge import check  # noqa: E402
from ferret.roles.red_team import FoundHeader, RedTeamAttempt, read_found_header, save_found  # noqa: E402

FOUND = Path(__file__).resolve().parent / "found"
MOVE_IT = "once a defence rejects it, move it into candidates/ with its EXPECTED_CHEATS and its docs/cheats.md entry"


def found_cases(folder: Path) -> list:
    """One parameter per finding in `folder`, each a strict xfail naming its attack."""
    cases = []
    for path in sorted(folder.glob("*.py")):
        header = read_found_header(path)
        reason = f"red-team finding ({header.attack}): the gate still accepts it; {MOVE_IT}"
        cases.append(pytest.param(path, header, id=path.stem, marks=pytest.mark.xfail(strict=True, reason=reason)))
    return cases


def judged_passed(finding: Path, header: FoundHeader, gates_dir: Path) -> bool:
    verdict, _ = check(REPO / header.contract, finding, gates_dir, profile="cpu", measure_speed=False, run_stress=False)
    return verdict.passed


@pytest.fixture(scope="module")
def gates_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("found-gates")


@pytest.mark.parametrize(("finding", "header"), found_cases(FOUND))
def test_a_finding_is_rejected_by_its_gate(finding, header, gates_dir):
    assert not judged_passed(finding, header, gates_dir), f"{finding.name} ({header.attack}) is accepted by the gate"


def test_a_saved_finding_becomes_a_strict_xfail_judged_by_its_contract(tmp_path, gates_dir):
    task = Task.load(RMSNORM_CONTRACT)
    source = TRITON_RMSNORM.read_text()
    attempt = RedTeamAttempt(
        round=1, attack="honest_control", candidate="x.py", candidate_sha256="c0ffee" * 10, status="accepted", passed=True
    )
    save_found(tmp_path, task, attempt, source, "0f" * 32)
    (case,) = found_cases(tmp_path)
    path, header = case.values
    (mark,) = case.marks
    assert path == tmp_path / "rmsnorm_c0ffeec0ff.py" and header.contract == "contracts/rmsnorm.yaml"
    assert mark.name == "xfail" and mark.kwargs["strict"] is True and "honest_control" in mark.kwargs["reason"]
    # The body the parametrized test runs: the honest kernel under a finding's header is accepted, so its strict xfail
    # holds (an accepted finding xfails; a rejected one would xpass, a failure under strict).
    assert judged_passed(path, header, gates_dir) is True


def test_every_finding_in_the_folder_has_its_header():
    for path in sorted(FOUND.glob("*.py")):
        header = read_found_header(path)
        assert (REPO / header.contract).is_file() and header.attack, path.name
        assert path.name.startswith(Task.load(REPO / header.contract).contract.op + "_"), path.name
