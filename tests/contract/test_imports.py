"""Where a contract's `tasks.<op>...` entries are imported from."""

from pathlib import Path

from ferret.contract.imports import project_root_of

REPO = Path(__file__).resolve().parents[2]


def test_contract_under_tests_resolves_to_the_project_tasks_package():
    # tests/tasks/ mirrors the package layout but is not a package: the GPU tests' own contract must
    # still find tasks.rmsnorm.baseline in the project (a miss here failed the H200 timing run).
    assert (REPO / "tests" / "tasks").is_dir()
    assert project_root_of(REPO / "tests/gpu/contracts/rmsnorm_small.yaml") == REPO
    assert project_root_of(REPO / "contracts/rmsnorm.yaml") == REPO


def test_user_project_without_a_tasks_package_still_resolves(tmp_path):
    (tmp_path / "tasks" / "myop").mkdir(parents=True)
    (tmp_path / "contracts").mkdir()
    assert project_root_of(tmp_path / "contracts" / "myop.yaml") == tmp_path
    assert project_root_of(tmp_path / "elsewhere" / "c.yaml") == tmp_path


def test_a_contract_may_name_its_project(tmp_path):
    (tmp_path / "runs" / "r1").mkdir(parents=True)
    derived = tmp_path / "runs" / "r1" / "gate-contract.yaml"
    derived.write_text(f"op: rmsnorm\nproject: {REPO}\n")
    assert project_root_of(derived) == REPO
    derived.write_text("op: rmsnorm\nproject: relative/path\n")  # only an absolute folder counts
    assert project_root_of(derived) == tmp_path / "runs" / "r1"
