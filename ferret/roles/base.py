"""The three roles as protocols: the test-writer's case adviser (ferret.gate.build builds the gate), the
optimizer and the reviewer.

Implementations that need no model are registered by name so a run can name them as data
(`--optimizer template-search`); `ferret.roles.resolve.resolve_role` is the one place that makes a role.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import (
    Any,
    Literal,
    Protocol,
    TypeVar,
    runtime_checkable,
)

from pydantic import BaseModel, Field

from ferret.gate.models import CaseTiming, Detection, VerdictSummary


class CaseSpeed(BaseModel):
    """One timed case as the optimizer sees it: how fast against the baseline, how far from the physical
    limit, and where the candidate's time goes (its kernels, by the profiler: names are its own text)."""

    case: str
    candidate_us: float
    speedup: float
    speedup_vs_compiled: float | None = None
    floor_us: float | None = None
    fraction_of_floor: float | None = Field(default=None, description="floor / candidate time: 1.0 is the limit.")
    achieved_tb_per_s: float | None = None
    achieved_tflop_per_s: float | None = None
    unstable: bool = False
    kernels_us: dict[str, float] = Field(default_factory=dict, description="The candidate's slowest kernels, us per call.")

    @staticmethod
    def of(timing: CaseTiming, kernels: int = 6) -> CaseSpeed:
        return CaseSpeed(
            case=timing.case,
            candidate_us=timing.candidate_ms * 1e3,
            speedup=timing.speedup,
            speedup_vs_compiled=timing.speedup_vs_compiled,
            floor_us=timing.floor_ms * 1e3 if timing.floor_ms is not None else None,
            fraction_of_floor=timing.fraction_of_floor,
            achieved_tb_per_s=timing.achieved_tb_per_s,
            achieved_tflop_per_s=timing.achieved_tflop_per_s,
            unstable=timing.unstable,
            kernels_us=dict(list(timing.kernels.items())[:kernels]),
        )


class RoundFeedback(BaseModel):
    """What the optimizer may see of an earlier round: the gate's numbers and the reviewer's words,
    never golden values or gate files."""

    round: int
    approach: str
    passed: bool
    first_failing_stage: str | None = None
    failures: list[str] = Field(default_factory=list, description="stage, metric, value, tolerance; or the failure kind")
    detections: list[str] = []
    timing: dict[str, Any] = {}
    speed: list[CaseSpeed] = Field(default_factory=list, description="Each timed case (GPU runs only).")
    review: str = ""


class OptimizerContext(BaseModel):
    op: str
    contract_yaml: str = Field(description="The contract as the user wrote it.")
    baseline_source: str
    abi: str
    history: list[RoundFeedback] = []
    tried_approaches: list[str] = []
    must_pivot: bool = Field(default=False, description="No progress for N rounds: propose an approach not tried yet.")
    round: int = 1
    languages: list[str] = Field(
        default_factory=lambda: ["triton"],
        description="What a candidate may be written in (the contract's backend): triton, cuda.",
    )
    cuda_flags: list[str] = Field(default_factory=list, description="NVRTC options CUDA candidates are compiled with.")


class Proposal(BaseModel):
    source: str = Field(description="The whole candidate file.")
    approach: str = Field(description="A short name of the approach, to track what was tried.")
    notes: str = ""


@runtime_checkable
class Optimizer(Protocol):
    name: str

    def propose(self, context: OptimizerContext) -> list[Proposal]: ...


class ReviewFinding(BaseModel):
    file: str
    line: int
    message: str


class ReviewVerdict(BaseModel):
    integrity: Literal["pass", "fail"]
    plan: Literal["pass", "fail"]
    findings: list[ReviewFinding] = []
    recommendation: str = ""
    reviewer: str = Field(description="Which reviewer ruled (an LLM model name, or 'static-scan').")


class ReviewContext(BaseModel):
    op: str
    candidate_path: str
    candidate_source: str
    gate_summary: VerdictSummary = Field(description="The gate's verdict in brief (never a golden value).")
    static_findings: list[Detection] = Field(
        default_factory=list, description="The static scan's findings, each with file and line."
    )
    next_plan: str = ""


@runtime_checkable
class Reviewer(Protocol):
    name: str

    def review(self, context: ReviewContext) -> ReviewVerdict: ...


# The test-writer's models live here, beside the protocol they type, so that this module imports nothing
# of ferret.roles.test_writer (which imports the registry from here); test_writer re-exports them.
class ProposedCase(BaseModel):
    profile: str | None = Field(description="cpu or gpu; anything else is refused by merge_cases, case by case.")
    case: dict[str, Any] = Field(description="The case entry as proposed (name, kind, dims, seed, description, edits).")


class StageCheck(BaseModel):
    stage: str
    check: str
    why: str


class CaseAdvice(BaseModel):
    """The adviser's answer (the `submit_cases` tool's input, typed)."""

    cases: list[ProposedCase] = []
    stage_checks: list[StageCheck] = []
    notes: str = ""

    @classmethod
    def from_tool_input(cls, payload: dict[str, Any]) -> CaseAdvice:
        cases = []
        for entry in payload.get("cases", []):
            entry = dict(entry)
            profile = entry.pop("profile", None)
            cases.append(ProposedCase(profile=profile, case=entry))
        return cls(cases=cases, stage_checks=payload.get("stage_checks", []), notes=payload.get("notes", ""))


class TestWriterContext(BaseModel):
    op: str
    contract_yaml: str
    reference_doc: str


@runtime_checkable
class TestWriter(Protocol):
    """The test-writer's case adviser: extra cases from the contract (ferret/roles/test_writer.py)."""

    name: str

    def propose_cases(self, context: TestWriterContext) -> CaseAdvice: ...


Built_co = TypeVar("Built_co", covariant=True)


class FromContract(Protocol[Built_co]):
    """A role that needs no model, registered by name: its class builds it from the contract alone."""

    def from_contract(self, contract_path: Path) -> Built_co: ...


# Roles that need no model, by the name the command line gives them; any other name is a model spec for
# the LLM role (ferret.roles.resolve).
OPTIMIZERS: dict[str, FromContract[Optimizer]] = {}
REVIEWERS: dict[str, FromContract[Reviewer]] = {}
TEST_WRITERS: dict[str, FromContract[TestWriter]] = {}

# The class registered is checked to build its role: `from_contract(contract_path) -> the role`.
OptimizerClass = TypeVar("OptimizerClass", bound=FromContract[Optimizer])
ReviewerClass = TypeVar("ReviewerClass", bound=FromContract[Reviewer])
TestWriterClass = TypeVar("TestWriterClass", bound=FromContract[TestWriter])


def register_optimizer(name: str) -> Callable[[OptimizerClass], OptimizerClass]:
    def decorate(role_class: OptimizerClass) -> OptimizerClass:
        OPTIMIZERS[name] = role_class
        return role_class

    return decorate


def register_reviewer(name: str) -> Callable[[ReviewerClass], ReviewerClass]:
    def decorate(role_class: ReviewerClass) -> ReviewerClass:
        REVIEWERS[name] = role_class
        return role_class

    return decorate


def register_test_writer(name: str) -> Callable[[TestWriterClass], TestWriterClass]:
    def decorate(role_class: TestWriterClass) -> TestWriterClass:
        TEST_WRITERS[name] = role_class
        return role_class

    return decorate
