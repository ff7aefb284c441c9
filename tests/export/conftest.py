"""Exported packages shared by tests/export (tests/fixtures/export_kit.py): each op exported and imported once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from export_kit import exported  # noqa: E402


@pytest.fixture(scope="session")
def export_gates_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("export-gates")


@pytest.fixture(scope="session")
def export_out(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("exported")
    sys.path.insert(0, str(out))
    return out


@pytest.fixture(scope="session")
def rmsnorm_package(export_gates_dir, export_out):
    return exported("rmsnorm", export_gates_dir, export_out)


@pytest.fixture(scope="session")
def mla_package(export_gates_dir, export_out):
    return exported("mla_attention", export_gates_dir, export_out)


@pytest.fixture(scope="session")
def mla_paged_package(export_gates_dir, export_out):
    return exported("mla_attention_paged", export_gates_dir, export_out)
