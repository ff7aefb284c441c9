"""Resolving `module:function` entries of a contract (reference, baseline, oracle check)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def project_root_of(contract_path: str | Path) -> Path:
    """The folder holding the `tasks` package above a contract file (a contract may live anywhere under it).

    A `tasks/` folder that is not a package (such as the test suite's `tests/tasks/`, which mirrors the
    package layout) is passed over while a package lies further up, so that a contract kept under
    `tests/` still resolves `tasks.<op>.baseline` to the project's own code."""
    declared = _declared_project(Path(contract_path))
    if declared is not None:
        return declared
    start = Path(contract_path).resolve().parent
    folders = (start, *start.parents)
    for folder in folders:
        if (folder / "tasks" / "__init__.py").is_file():
            return folder
    for folder in folders:
        if (folder / "tasks").is_dir():
            return folder
    return start


def _declared_project(contract_path: Path) -> Path | None:
    """The contract's own `project:` field, if it has one (contracts derived by the dispatcher do)."""
    import yaml

    try:
        data = yaml.safe_load(contract_path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    project = data.get("project") if isinstance(data, dict) else None
    return Path(project) if isinstance(project, str) and Path(project).is_absolute() else None


def load_entry(entry: str, project_root: str | Path | None = None) -> Callable[..., Any]:
    module_name, _, attr = entry.partition(":")
    if project_root is not None and str(project_root) not in sys.path:
        sys.path.insert(0, str(project_root))
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import {module_name!r} for entry {entry!r}: {err}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ValueError(f"module {module_name!r} has no {attr!r} (entry {entry!r})") from None
