"""What every step of a check reads of the gate: the task, the gate's verified manifest and its folder, made once
by the judge (`ferret.gate.judge.Judge`) and passed whole."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ferret.contract.model import Contract
from ferret.contract.task import Task
from ferret.gate.models import GateManifest


@dataclass(frozen=True)
class GateContext:
    """One task's locked gate on this machine: the task (its contract and project), the manifest the lock was
    verified against, and the gate's folder."""

    task: Task
    manifest: GateManifest
    gate: Path

    @property
    def contract(self) -> Contract:
        return self.task.contract
