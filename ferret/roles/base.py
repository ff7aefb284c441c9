"""The three roles as protocols: the test-writer (ferret.gate.build), the optimizer and the reviewer.

Implementations are registered by name so a run can name them as data (`--optimizer template-search`).
"""

from __future__ import annotations

from typing import Any, Callable, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field


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
    review: str = ""


class OptimizerContext(BaseModel):
    op: str
    contract_yaml: str = Field(description="The contract as the user wrote it.")
    baseline_source: str
    abi: str
    history: list[RoundFeedback] = []
    tried_approaches: list[str] = []
    must_pivot: bool = Field(False, description="No progress for N rounds: propose an approach not tried yet.")
    round: int = 1


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
    gate_summary: dict[str, Any]
    static_findings: list[str] = []
    next_plan: str = ""


@runtime_checkable
class Reviewer(Protocol):
    name: str

    def review(self, context: ReviewContext) -> ReviewVerdict: ...


@runtime_checkable
class TestWriter(Protocol):
    """The test-writer's adviser: extra cases from the contract (ferret/roles/test_writer.py)."""

    name: str

    def propose_cases(self, context: Any) -> Any: ...


# Roles that need no model, by the name the command line gives them. A registered class builds itself
# with `from_contract(contract_path)`; any other name on the command line is a model spec for the LLM role.
OPTIMIZERS: dict[str, Callable[..., Optimizer]] = {}
REVIEWERS: dict[str, Callable[..., Reviewer]] = {}
TEST_WRITERS: dict[str, Callable[..., TestWriter]] = {}


def register_optimizer(name: str):
    def decorate(factory):
        OPTIMIZERS[name] = factory
        return factory

    return decorate


def register_reviewer(name: str):
    def decorate(factory):
        REVIEWERS[name] = factory
        return factory

    return decorate


def register_test_writer(name: str):
    def decorate(factory):
        TEST_WRITERS[name] = factory
        return factory

    return decorate
