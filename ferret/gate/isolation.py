"""What a process running candidate code must not see, and how this machine isolates it."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ferret.gate.models import SandboxRecord
from ferret.gate.trust import trust_dir
from ferret.sandbox import allow, audit
from ferret.sandbox.launch import BUBBLEWRAP, DENY_LIST, NAMESPACE, sandbox_failures, sandbox_kind

_SANDBOXES = {
    BUBBLEWRAP: "bubblewrap showing only an allow-list of the host's files (the Python runtime, its libraries, the "
    "backend's toolchain, the GPU's devices) and the process's own folder",
    NAMESPACE: "private mount namespace (unshare) showing only an allow-list of the host's files (the Python runtime, "
    "its libraries, the backend's toolchain, the GPU's devices) and the process's own folder",
    DENY_LIST: "private mount namespace hiding the gates folder, the trust registry and tasks/ (a deny-list: the "
    "rest of the host's files are visible)",
}


def isolation_summary() -> str:
    base = "own process, empty working folder, scrubbed environment, fixed import path, timeout, RSS watchdog"
    base += (
        "; audit hooks refusing process creation, file access and native loads outside allow-lists"
        if audit.wanted()
        else "; audit hooks OFF (FERRET_SANDBOX_AUDIT=0 in the judge's environment)"
    )
    kind = sandbox_kind()
    if kind in _SANDBOXES:
        return f"{base}; {_SANDBOXES[kind]}"
    return (
        base + "; no sandbox on this machine (no bwrap, no mount namespace): golden files are never given to the "
        "candidate, but not hidden"
    )


def sandbox_record() -> SandboxRecord:
    """The verdict's record of the sandbox that confines candidate processes on this machine."""
    kind = sandbox_kind()
    allowed = kind in (BUBBLEWRAP, NAMESPACE)
    shown = list(allow.allow_list_for(Path(tempfile.gettempdir()) / "candidate").read_only) if allowed else []
    return SandboxRecord(
        kind=kind,  # type: ignore[arg-type]
        allow_list=allowed,
        audit_hooks=audit.wanted(),
        shown=shown,
        skipped=sandbox_failures(),
    )


def hidden_from_candidates(gate: Path, project: Path) -> list[Path]:
    """What a process running candidate code must not see, on top of the allow-list (and all the deny-list
    fallback hides): the gates folder, the trust registry, and the project's tasks/ (the reference) and gates/."""
    trust_dir().mkdir(parents=True, exist_ok=True)
    return [gate.parent.resolve(), trust_dir().resolve(), project / "tasks", project / "gates"]
