"""What a process running candidate code must not see, and how this machine isolates it."""

from __future__ import annotations

from pathlib import Path

from ferret.gate.trust import trust_dir
from ferret.sandbox import audit
from ferret.sandbox.launch import hiding_available


def isolation_summary() -> str:
    base = "own process, empty working folder, scrubbed environment, fixed import path, timeout, RSS watchdog"
    base += ("; audit hooks refusing process creation, file access and native loads outside allow-lists"
             if audit.wanted() else "; audit hooks OFF (FERRET_SANDBOX_AUDIT=0 in the judge's environment)")
    if hiding_available():
        return base + "; private mount namespace hiding the gates folder, the trust registry and tasks/"
    return base + "; no mount namespace on this machine: golden files are never given to the candidate, but not hidden"


def hidden_from_candidates(gate: Path, project: Path) -> list[Path]:
    """What a process running candidate code must not see: the gates folder, the trust registry, and the
    project's tasks/ (the reference) and gates/."""
    trust_dir().mkdir(parents=True, exist_ok=True)
    return [gate.parent.resolve(), trust_dir().resolve(), project / "tasks", project / "gates"]
