"""What the judge asks of a candidate's language: the `Backend` protocol, one implementation per language
(ferret/backends/triton.py, ferret/backends/cuda.py), found through the registry (ferret/backends/registry.py)."""

from __future__ import annotations

import ast
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

KernelName = Callable[[Any, tuple[Any, ...], dict[str, Any]], str]
"""The launched kernel's name, from the wrapped entry point's (self, args, kwargs)."""


@dataclass(frozen=True)
class LaunchPoint:
    """One entry point through which a language's kernels launch, `owner.attribute`: the launch recorder
    (ferret.sandbox.watch.LaunchRecorder) wraps it to count launches by kernel name and, in the no-op run, to
    make them do nothing."""

    owner: type
    attribute: str
    label: str
    kernel_name: KernelName


class Backend(Protocol):
    """What differs from one candidate language to another. The contract, the judge, the sandbox, the timer and
    the scan ask a language's backend (through the registry) instead of testing its name."""

    name: str
    """As a contract writes it (`backend.language`, `backend.allowed_languages`)."""
    title: str
    """As a message names it ("CUDA")."""
    module: str | None
    """The module a candidate imports to be written in this language (None: the language of every source no
    other backend claims)."""
    scan_preset: str
    """The integrity scan's preset for its candidates (ferret.integrity.presets)."""
    imports: tuple[str, ...]
    """The modules a candidate may import to write in this language (the scan's allow-list,
    ferret.integrity.tables.ALLOWED_IMPORTS)."""

    def claims(self, tree: ast.Module) -> bool:
        """Detection: whether a candidate's parsed source is written in this language."""
        ...

    def unavailable(self, device: str, profile: str) -> str | None:
        """Availability and usage: None where a candidate in this language can be judged on `device` (cpu or
        cuda) under `profile`, else why not, said to the user ("it runs on a GPU, and ...")."""
        ...

    def load_before_sandbox(self, on_gpu: bool) -> None:
        """The runner's and the timer's loader: what the language loads from native libraries as a candidate's
        process starts, done before the sandbox refuses such loading. BackendUnavailable where it cannot."""
        ...

    def launch_points(self) -> list[LaunchPoint]:
        """The entry points its kernels launch through (none that cannot be imported here)."""
        ...

    def settings(self, workdir: Path, compile_flags: Mapping[str, Any]) -> dict[str, str]:
        """Settings a process that runs candidate code in `workdir` needs for this language, given the
        contract's `backend.compile_flags`: carried in its job (`CandidateJob.settings`), not its environment."""
        ...

    def configure(self, settings: Mapping[str, str]) -> None:
        """In the process that runs candidate code, before it is loaded: take this language's `settings` from the job."""
        ...


def imports_module(tree: ast.Module, module: str) -> bool:
    """Whether the source imports `module`: `import a.b`, `from a.b import x` or `from a import b`."""
    package, _, last = module.rpartition(".")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(alias.name == module for alias in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and (
            node.module == module or (package and node.module == package and any(alias.name == last for alias in node.names))
        ):
            return True
    return False
