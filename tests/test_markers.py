"""The quick subset (`pytest -m quick`) reaches every test package: each folder of tests/ and the top-level test files
hold at least one test marked `quick`. Read from the test files' syntax, so that the check costs no imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
# Folders whose tests cannot run in the quick subset: tests/gpu needs a CUDA GPU (`pytest -m gpu` is its subset).
NOT_QUICK = {"gpu"}


def _marks(node: ast.expr) -> set[str]:
    """The names of `pytest.mark.<name>` in a decorator or a `pytestmark` value (a mark, called or not, or a list)."""
    if isinstance(node, (ast.List, ast.Tuple)):
        return set().union(*(_marks(element) for element in node.elts))
    if isinstance(node, ast.Call):
        return _marks(node.func)
    if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "pytest.mark":
        return {node.attr}
    return set()


def quick_tests(path: Path) -> list[str]:
    """The tests of one test file the quick mark selects: every test of a module marked quick, else each one marked."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module_marks: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets):
            module_marks |= _marks(node.value)
    tests = [
        node
        for node in ast.walk(tree)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test")
    ]
    if "quick" in module_marks:
        return [test.name for test in tests]
    return [test.name for test in tests if any("quick" in _marks(d) for d in test.decorator_list)]


def packages_of_tests() -> dict[str, list[Path]]:
    """Each folder of tests/ holding test files (its subfolders' included), and the top-level files as '.'."""
    packages: dict[str, list[Path]] = {".": sorted(TESTS.glob("test_*.py"))}
    for folder in sorted(p for p in TESTS.iterdir() if p.is_dir() and p.name not in ("fixtures", "__pycache__")):
        files = sorted(folder.rglob("test_*.py"))
        if files:
            packages[folder.name] = files
    return packages


def test_the_quick_and_slow_marks_are_registered(pytestconfig):
    markers = pytestconfig.getini("markers")
    assert any(m.startswith("quick:") for m in markers) and any(m.startswith("slow:") for m in markers)


@pytest.mark.quick
def test_every_test_package_has_a_quick_test():
    packages = packages_of_tests()
    assert {"gate", "tasks", "sandbox", "."} <= set(packages)  # the walk finds the folders it should
    missing = [name for name, files in packages.items() if name not in NOT_QUICK and not any(quick_tests(f) for f in files)]
    assert not missing, f"test packages with no test marked quick: {missing}"


def test_the_check_reads_marks_as_pytest_does(tmp_path: Path):
    """A decorated test, a module marked with a list, a mark on another name, and a quick test outside a test file's
    tests: the first two count, the others do not."""
    marked = tmp_path / "test_marked.py"
    marked.write_text("import pytest\n\n@pytest.mark.quick\ndef test_a():\n    pass\n\ndef test_b():\n    pass\n")
    module = tmp_path / "test_module.py"
    module.write_text("import pytest\npytestmark = [pytest.mark.quick, pytest.mark.slow]\n\ndef test_c():\n    pass\n")
    other = tmp_path / "test_other.py"
    other.write_text(
        "import pytest\n\n@pytest.mark.slow\ndef test_d():\n    pass\n\n@pytest.mark.quick\ndef helper():\n    pass\n"
    )
    assert quick_tests(marked) == ["test_a"]
    assert quick_tests(module) == ["test_c"]
    assert quick_tests(other) == []
