"""One typed log per run: `runs/<id>/run.json`, rewritten after every round so nothing is lost."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from ferret.gate.models import VerdictSummary, passed_field
from ferret.roles.base import ReviewVerdict

RunStatus = Literal["accepted", "correct_speed_not_measured", "correct_static_review_only", "rejected", "incomplete"]


class StopReason(str, Enum):
    """Why the rounds stopped; `RunLog.stop_reason` says it in words. The CLI maps it (with the status) to
    its exit code."""

    TARGET_MET = "target_met"
    NOTHING_TO_TRY = "nothing_to_try"
    MAX_ROUNDS = "max_rounds"
    GATE_TAMPERED = "gate_tampered"
    INTERRUPTED = "interrupted"
    ERROR = "error"


class CandidateRecord(BaseModel):
    round: int
    index: int
    approach: str
    file: str = Field(description="The candidate's source, kept in the run folder.")
    sha256: str
    notes: str = ""
    gate: VerdictSummary | None = Field(default=None, description="The judge's verdict in brief (None if the judge failed).")
    gate_passed: bool = False
    review: ReviewVerdict | None = None
    speedup: float | None = None
    target_met: bool | None = None
    speed_measured: bool = False
    error: str | None = None
    judged_on: str | None = Field(
        default=None, description="With --gpus: the worker (host, pid, GPU) whose judge checked it; None: the run's own judge."
    )


class FinalCheck(BaseModel):
    """The best candidate judged again by `ferret check` in a fresh process, on fresh private cases; its
    verdict comes back as a file (`--verdict-out`), validated, not scraped from its output."""

    passed: bool = passed_field()
    exit_code: int | None = Field(
        description="`ferret check`'s exit status; None where it was not run (the judged "
        "candidate's file is not in the run folder as the round judged it)."
    )
    verdict: VerdictSummary | None = None
    error: str | None = Field(default=None, description="Why there is no verdict (the check's last output).")
    seeds_fresh: bool = True


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
    earlier_gates: list[str] = Field(
        default_factory=list,
        description="Gates that earlier rounds were judged under, where a resume found another (the contract's cases or "
        "the judge's code changed since): those rounds keep their verdicts, each naming its gate.",
    )
    profile: str
    optimizer: str
    reviewer: str
    reviewer_note: str = ""
    test_writer: str = Field(default="contract-cases", description="Who advised the gate's extra cases (`contract-cases`: none).")
    test_writer_note: str = ""
    extra_cases: list[str] = Field(default_factory=list, description="Adviser cases added to the gate, as profile:name.")
    rejected_cases: list[str] = Field(default_factory=list, description="Adviser cases refused, each with its reason.")
    stage_checks: list[dict[str, str]] = Field(
        default_factory=list, description="Adviser stage checks, recorded for the reviewer."
    )
    gate_contract_path: str | None = Field(
        default=None,
        description="The contract the gate was built from, when extra cases were added (runs/<id>/gate-contract.yaml).",
    )
    audit_score: float | None = Field(
        default=None, description="The mutation score of the gate's last trusted audit (`ferret gate audit`), if one was read."
    )
    audit_note: str = Field(default="", description="What the run made of the gate's audit, in words.")
    status: RunStatus = "incomplete"
    stop: StopReason | None = None
    stop_reason: str = "not finished"
    interrupted_by: int | None = Field(default=None, description="The signal that stopped the run, if one did.")
    established: Established = Established()
    rounds: list[RoundRecord] = []
    best: CandidateRecord | None = None
    final_check: FinalCheck | None = None
    started_at: str
    ended_at: str | None = None
    versions: dict[str, str] = {}

    def save(self, folder: Path) -> Path:
        path = folder / "run.json"
        tmp = folder / "run.json.tmp"
        tmp.write_text(self.model_dump_json(indent=1, by_alias=True))
        tmp.replace(path)
        return path
