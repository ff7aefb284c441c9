"""One driver for the maintained benchmarks (`python -m benchmarks NAME`, benchmarks/__init__.py): each registered
name is a module with a docstring and a `main(argv)`, listed by the driver; an unknown name is refused with the list;
benchmarks/README.md describes every registered benchmark, and each has its test file in tests/benchmarks/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import benchmarks

REPO = Path(__file__).resolve().parents[2]


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        timeout=120,
        check=False,
    )


def test_at_most_five_benchmarks_each_a_module_with_a_main():
    assert 1 <= len(benchmarks.BENCHMARKS) <= 5
    for name in benchmarks.BENCHMARKS:
        module = benchmarks.load(name)
        assert callable(module.main) and benchmarks.summary(name), name


@pytest.mark.quick
def test_the_driver_lists_every_benchmark_and_refuses_an_unknown_name():
    listed = _run()
    assert listed.returncode == 0, listed.stderr
    for name in benchmarks.BENCHMARKS:
        assert f"  {name}  " in listed.stdout.replace(" " * 3, "  "), listed.stdout
    unknown = _run("no-such-bench")
    assert unknown.returncode == 2 and "no benchmark named 'no-such-bench'" in unknown.stderr


@pytest.mark.parametrize("name", sorted(benchmarks.BENCHMARKS))
def test_each_benchmark_takes_its_options_through_the_driver(name):
    done = _run(name, "--help")
    assert done.returncode == 0, done.stderr
    assert f"python -m benchmarks {name}" in done.stdout


@pytest.mark.parametrize("name", sorted(benchmarks.BENCHMARKS))
def test_each_benchmark_is_documented_and_tested(name):
    assert f"`python -m benchmarks {name}" in (REPO / "benchmarks" / "README.md").read_text()
    module = benchmarks.BENCHMARKS[name].rsplit(".", 1)[1]
    assert (REPO / "tests" / "benchmarks" / f"test_{module}.py").is_file()
