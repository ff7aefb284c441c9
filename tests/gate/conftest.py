"""One rmsnorm CPU gate for the whole tests/gate folder: tests that tamper with it work on copies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import RMSNORM_CONTRACT  # noqa: E402


@pytest.fixture(scope="session")
def rmsnorm_gates_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rmsnorm-gates")


@pytest.fixture(scope="session")
def rmsnorm_gate(rmsnorm_gates_dir) -> Path:
    from ferret.gate.build import build_gate

    return build_gate(RMSNORM_CONTRACT, gates_dir=rmsnorm_gates_dir, profile="cpu")
