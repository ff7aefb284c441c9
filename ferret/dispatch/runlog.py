"""One typed log per run: `runs/<id>/run.json`, rewritten after every round so nothing is lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from ferret.roles.base import ReviewVerdict

RunStatus = Literal["accepted", "correct_speed_not_measured", "correct_static_review_only", "rejected", "incomplete"]


class CandidateRecord(BaseModel):
    round: int
    index: int
    approach: str
    file: str = Field(description="The candidate's source, kept in the run folder.")
    sha256: str
    notes: str = ""
    gate: dict[str, Any] = Field(default_factory=dict, description="The GATE_RESULT summary of the judge's verdict.")
    gate_passed: bool = False
    review: ReviewVerdict | None = None
    speedup: float | None = None
    target_met: bool | None = None
    speed_measured: bool = False
    error: str | None = None


class RoundRecord(BaseModel):
    round: int
    gate_verified: bool
    candidates: list[CandidateRecord] = []
    pivot_requested: bool = False


class Established(BaseModel):
    """Exactly what the run showed about its best candidate."""

    correct: bool = False
    reviewed_by: str | None = None
    llm_reviewed: bool = False
    speed_measured: bool = False
    target_met: bool | None = None
    final_check_passed: bool | None = None


class RunLog(BaseModel):
    schema_version: Literal[1] = 1
    run_id: str
    op: str
    contract_path: str
    contract_sha256: str
    gate_hash: str | None = None
    profile: str
    optimizer: str
    reviewer: str
    reviewer_note: str = ""
    test_writer: str = Field("contract-cases", description="Who advised the gate's extra cases (`contract-cases`: none).")
    test_writer_note: str = ""
    extra_cases: list[str] = Field(default_factory=list, description="Adviser cases added to the gate, as profile:name.")
    rejected_cases: list[str] = Field(default_factory=list, description="Adviser cases refused, each with its reason.")
    stage_checks: list[dict[str, str]] = Field(default_factory=list, description="Adviser stage checks, recorded for the reviewer.")
    gate_contract_path: str | None = Field(
        None, description="The contract the gate was built from, when extra cases were added (runs/<id>/gate-contract.yaml)."
    )
    status: RunStatus = "incomplete"
    stop_reason: str = "not finished"
    established: Established = Established()
    rounds: list[RoundRecord] = []
    best: CandidateRecord | None = None
    final_check: dict[str, Any] = {}
    started_at: str
    ended_at: str | None = None
    versions: dict[str, str] = {}

    def save(self, folder: Path) -> Path:
        path = folder / "run.json"
        tmp = folder / "run.json.tmp"
        tmp.write_text(self.model_dump_json(indent=1))
        tmp.replace(path)
        return path
