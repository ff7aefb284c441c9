"""The audit's typed records: a mutant, its class against the float64 reference, the gate's judgement of it, one
result line per mutant (`MutantResult`, appended to the audit's log as it comes) and the whole audit
(`AuditRecord`, `gates/<hash>/audit.json`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

MutantClass = Literal["harmful", "benign", "band", "stillborn"]
"""harmful: over the contract's tolerance (or no result) on some independent case; benign: within the honest
candidates' spread on every one; band: worse than honest, inside the tolerance (reported, unscored); stillborn:
raised on every independent case (it tests nothing but that the candidate runs; unscored)."""


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


class Mutant(_Record):
    id: str
    operator: str
    condition: str | None = Field(default=None, description="The conditional wrapper, or None for a plain mutant.")
    line: int = Field(description="The mutated line in the honest candidate.")
    description: str
    diff: str = Field(description="Unified diff against the honest candidate (as ast.unparse writes it).")


class StageError(_Record):
    """One stage of one independent case, measured the gate's way (`ferret.gate.metrics.compare_stage`)."""

    stage: str
    passed: bool
    reasons: list[str] = []
    rel_l2: float | None = None
    max_abs_rel_peak: float | None = None
    max_row_rel: float | None = None
    nonfinite_mismatches: int = 0


class CaseError(_Record):
    """A candidate's error on one independent case: every exposed stage, or what it raised."""

    case: str
    dtype: str
    dims: dict[str, int]
    strata: list[str] = []
    stages: list[StageError] = []
    raised: str | None = None

    @property
    def within_tolerance(self) -> bool:
        return self.raised is None and all(s.passed for s in self.stages)


class Classification(_Record):
    kind: MutantClass
    detail: str
    worst: CaseError | None = Field(default=None, description="The first harmful case, or for band the worst one.")


class Judgement(_Record):
    """What the gate said of a harmful mutant."""

    killed: bool
    caught_by: str | None = Field(default=None, description="The first failing part of the verdict, in PARTS order.")
    first_failing_stage: str | None = None
    detections: list[str] = []
    detail: str = ""
    seconds: float = 0.0
    unjudged: bool = Field(
        default=False,
        description="No verdict (the audit's time-box ended the check, or the judge failed): not killed, the gate said nothing.",
    )
    worker: str | None = Field(
        default=None,
        description="Where the check ran: a local worker's host and pid, or a Ray worker's node, worker id, host and pid.",
    )


class MutantResult(_Record):
    """One line of the audit's log: a mutant, its class and (harmful ones) the gate's judgement."""

    mutant: Mutant
    classification: Classification
    judgement: Judgement | None = None


class OperatorScore(_Record):
    operator: str
    mutants: int = 0
    harmful: int = 0
    killed: int = 0
    benign: int = 0
    band: int = 0
    stillborn: int = 0
    mutation_score: float | None = Field(default=None, description="killed / harmful; None with no harmful mutant.")


class Survivor(_Record):
    mutant: Mutant
    error: CaseError | None
    why: str = Field(description="Why the gate let it through: which tolerance it stayed within, which case it lacks.")


class RedTeamSummary(_Record):
    """The red-team role's result, where one ran: its attempts, how many passed the gate, where they were saved."""

    attempts: int
    passed_cheats: int
    saved_paths: list[str] = []


class AuditRecord(_Record):
    """`gates/<hash>/audit.json`: a gate's strength, measured by mutation testing."""

    gate_hash: str
    op: str
    profile: str
    contract: str
    candidate: str
    candidate_sha256: str
    operators: list[str]
    seed: int
    budget: int
    independent_cases: int
    started_at: str
    seconds: float
    mutants: int
    harmful: int
    killed: int
    benign: int
    band: int
    stillborn: int
    unjudged: int = Field(default=0, description="Harmful mutants the gate gave no verdict on (time-box, judge failure).")
    mutation_score: float | None = Field(description="killed / harmful over every operator; None with no harmful mutant.")
    honest_checks: int
    honest_false_rejections: int
    honest_false_rejection_rate: float | None
    honest_over_tolerance: list[str] = Field(
        default_factory=list,
        description="Independent cases where an honest candidate itself broke the tolerance or raised: the table or "
        "the candidate needs a look, since the audit's classes rest on both.",
    )
    per_operator: list[OperatorScore]
    caught_by: dict[str, int] = Field(default_factory=dict, description="Killed mutants by the verdict part that first failed.")
    caught: dict[str, str] = Field(
        default_factory=dict,
        description="Each killed mutant's id -> the verdict part that first failed, and the first failing contract stage.",
    )
    judged_by: dict[str, str] = Field(
        default_factory=dict, description="Each judged mutant's id -> the worker that judged it (`Judgement.worker`)."
    )
    survivors: list[Survivor] = []
    min_score: float | None = Field(default=None, description="The contract's minimum (audit.min_score), if it states one.")
    meets_min: bool | None = None
    red_team: RedTeamSummary | None = None
