"""A task: a contract loaded once, with what it names resolved. Everything after loading (the judge, the
dispatcher, the timing) takes a Task instead of a path and re-reads nothing."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ferret.backends import registry
from ferret.contract.imports import load_entry, project_root_of
from ferret.contract.load import load_contract
from ferret.contract.model import Contract


@dataclass(frozen=True)
class Task:
    path: Path = field(metadata={"doc": "The contract file."})
    contract: Contract
    project_root: Path = field(metadata={"doc": "The folder whose `tasks` package the contract's entries name."})

    @classmethod
    def load(cls, path: str | Path, require_tolerances: bool = True) -> Task:
        """Read and validate the contract (a ContractError names the file, field and line)."""
        path = Path(path)
        return cls(path, load_contract(path, require_tolerances=require_tolerances), project_root_of(path))

    def with_contract(self, path: str | Path) -> Task:
        """Another contract of the same project (the dispatcher's gate contract with extra cases)."""
        return Task.load(path)

    @cached_property
    def reference(self) -> Callable[..., Any]:
        """The canonical reference: inputs, params -> every stage (float64)."""
        return load_entry(self.contract.reference.entry, self.project_root)

    @cached_property
    def baseline(self) -> Callable[..., Any]:
        """The kernel being replaced, with the candidate ABI."""
        return load_entry(self.contract.baseline.entry, self.project_root)

    @property
    def baseline_file(self) -> Path:
        """The baseline's source file (copied, with the project modules it imports, into the reference timer's folder)."""
        source = inspect.getsourcefile(self.baseline)
        if source is None:
            raise ValueError(f"{self.contract.baseline.entry}: the baseline has no source file")
        return Path(source)

    @property
    def templates_dir(self) -> Path:
        """Where the offline optimizer's kernel templates of this op live: `<project>/tasks/<op>/templates`, and its
        folder named for the contract's `backend.language` (`cuda/`) where that is not the default language."""
        folder = self.project_root / "tasks" / self.contract.op / "templates"
        language = self.contract.backend.language
        return folder if language == registry.DEFAULT else folder / language
