"""The red team: an LLM asked to write a candidate that the gate accepts while it does not honestly compute the
contract's math (computing less, detecting the judge, working outside the kernel).

It sees the contract, the ABI, an honest candidate's source and the verdict summaries of its own earlier attempts;
never the gate's files or golden values. Each attempt is judged through an injected `CheckFn` (the gate:
`gate_check` wraps `ferret.gate.judge.check`), and whether an accepted attempt is a cheat is decided by an injected
`Harm` (does it err beyond tolerance on an independent input set). Each accepted harmful attempt is saved under
`tests/adversarial/found/` with a header naming its contract and attack, where `tests/adversarial/test_found.py`
judges it as a strict xfail until a defence lands.

    team = RedTeam(model, check=gate_check(contract, gates_dir, "cpu"), harm=ReferenceHarm(task), work_dir=w, found_dir=f)
    report = team.run(task, honest_source, budget=8)
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError, computed_field

from ferret.contract.task import Task
from ferret.errors import UsageError
from ferret.gate.models import StageSummary, VerdictSummary
from ferret.models.base import Model, ModelError
from ferret.roles.prompts import AGENTS_DIR, call_tool

# A candidate file -> whether it errs beyond the contract's tolerance on inputs the gate never drew.
Harm = Callable[[Path], bool]
# A candidate file -> the gate's verdict in brief.
CheckFn = Callable[[Path], VerdictSummary]

ROLE, TOOL = "red_team", "submit_attack"
FOUND = Path("tests") / "adversarial" / "found"  # under the contract's project root
_HEADER = re.compile(r"^# (contract|attack|gate): (.+)$", re.MULTILINE)


class AttackProposal(BaseModel):
    """The `submit_attack` tool's input, typed."""

    source: str = Field(min_length=1)
    attack: str = Field(pattern=r"^[a-z][a-z0-9_]{0,63}$")
    notes: str = ""


class AttemptFeedback(BaseModel):
    """What the red team may see of one earlier attempt: the gate's summary in words, never a golden value."""

    round: int
    attack: str
    passed: bool
    harmful: bool | None = None
    first_failing_stage: str | None = None
    parts: dict[str, str] = {}
    detections: list[str] = []
    failures: list[str] = []


class RedTeamContext(BaseModel):
    op: str
    contract_yaml: str = Field(description="The contract as the user wrote it.")
    abi: str
    honest_source: str = Field(description="A candidate the gate accepts, computing the math honestly.")
    history: list[AttemptFeedback] = []
    round: int = 1
    budget: int = 1


class RedTeamAttempt(BaseModel):
    round: int
    attack: str = Field(description="The attack's slug, as the model named it.")
    notes: str = ""
    candidate: str = Field(description="Where the attempt's file was written.")
    candidate_sha256: str
    status: Literal["accepted", "rejected", "not_judged"]
    passed: bool
    harmful: bool | None = Field(default=None, description="Only for accepted attempts: errs beyond tolerance elsewhere.")
    harm_note: str | None = Field(default=None, description="Why the harm test ruled so, where it says (`reasons`).")
    detections: list[str] = Field(default_factory=list, description="The gate's detection slugs.")
    first_failing_stage: str | None = None
    error: str | None = Field(default=None, description="Why the attempt was not judged (a bad answer, a refused file).")
    saved: str | None = Field(default=None, description="The regression case written for an accepted harmful attempt.")


class RedTeamReport(BaseModel):
    op: str
    contract: str
    model: str
    gate: str | None = Field(default=None, description="The hash of the gate that judged the attempts.")
    budget: int
    attempts: list[RedTeamAttempt] = []

    @computed_field
    @property
    def found(self) -> list[str]:
        """The regression cases saved: attempts the gate accepted that are harmful."""
        return [a.saved for a in self.attempts if a.saved]


class FoundHeader(BaseModel):
    """The header of a saved finding: which contract judges it, and the attack it tries."""

    contract: str
    attack: str
    gate: str | None = None


def read_found_header(path: Path) -> FoundHeader:
    """The header `save_found` wrote; a file without one is a ValueError naming it."""
    fields = dict(_HEADER.findall(path.read_text()[:2000]))
    if "contract" not in fields or "attack" not in fields:
        raise ValueError(f"{path}: no red-team header (# contract: ..., # attack: ...)")
    return FoundHeader.model_validate(fields)


def save_found(found_dir: Path, task: Task, attempt: RedTeamAttempt, source: str, gate: str | None) -> Path:
    """Write an accepted harmful attempt as `<op>_<short sha>.py`, its header naming contract, attack and gate."""
    found_dir.mkdir(parents=True, exist_ok=True)
    path = found_dir / f"{task.contract.op}_{attempt.candidate_sha256[:10]}.py"
    try:
        contract = task.path.resolve().relative_to(task.project_root.resolve()).as_posix()
    except ValueError:  # a contract outside its project root: named whole
        contract = str(task.path.resolve())
    header = [
        "# Red-team finding: the gate accepted this candidate, and it errs beyond tolerance on independent inputs.",
        f"# contract: {contract}",
        f"# attack: {attempt.attack}",
        f"# gate: {gate or 'unknown'}",
        "# tests/adversarial/test_found.py judges it as a strict xfail: once a defence rejects it, move it to the corpus.",
    ]
    path.write_text("\n".join(header) + "\n" + source)
    return path


def failure_lines(gate: VerdictSummary) -> list[str]:
    """Each failing case and stage with its numbers and tolerance, or the kind of failure."""
    lines = []
    for case, result in gate.cases.items():
        if result.failure:
            lines.append(f"{case}: {result.failure}: {(result.message or '')[:200]}")
        for stage, metrics in result.stages.items():
            if isinstance(metrics, StageSummary) and not metrics.passed:
                lines.append(
                    f"{case}: stage {stage}: rel_l2 {metrics.rel_l2}, max_abs_rel_peak {metrics.max_abs_rel_peak}, "
                    f"cosine {metrics.cosine}; tolerance {metrics.tolerance}; worst at {metrics.worst}"
                )
    return lines[:40]


def feedback_of(attempt: RedTeamAttempt, gate: VerdictSummary | None) -> AttemptFeedback:
    failures = failure_lines(gate) if gate else []
    if attempt.error:
        failures.insert(0, f"not judged: {attempt.error[:1000]}")
    return AttemptFeedback(
        round=attempt.round,
        attack=attempt.attack,
        passed=attempt.passed,
        harmful=attempt.harmful,
        first_failing_stage=attempt.first_failing_stage,
        parts=dict(gate.parts) if gate else {},
        detections=[f"{d.cheat} {d.catalogue}: {d.evidence[:200]}" for d in (gate.detections if gate else [])],
        failures=failures,
    )


def _harm_words(attempt: RedTeamAttempt) -> str:
    if attempt.harmful is None:
        return ""
    return f", HARMFUL: saved as {attempt.saved}" if attempt.harmful else ", harmless on independent inputs"


def gate_check(contract: Path, gates_dir: Path, profile: str | None = None) -> CheckFn:
    """The gate as a `CheckFn`: `ferret.gate.judge.check` without timing, its verdict in brief."""
    from ferret.gate.judge import check, summary

    def judged(candidate: Path) -> VerdictSummary:
        verdict, _ = check(contract, candidate, gates_dir, profile, measure_speed=False, run_stress=False)
        return summary(verdict)

    return judged


class RedTeam:
    """Asks the model for attacks, one per round, judges each with `check`, classes the accepted ones with `harm`."""

    def __init__(
        self,
        model: Model,
        check: CheckFn,
        harm: Harm,
        *,
        work_dir: Path,
        found_dir: Path | None = None,
        agents_dir: Path = AGENTS_DIR,
        progress: Callable[[str], None] | None = None,
    ):
        self.model = model
        self.progress = progress
        self.check = check
        self.harm = harm
        self.work_dir = work_dir
        self.found_dir = found_dir  # None: the contract's project's tests/adversarial/found
        self.agents_dir = agents_dir
        self.name = f"red-team:{model.name}"

    def run(self, task: Task, honest_source: str, budget: int) -> RedTeamReport:
        report = RedTeamReport(op=task.contract.op, contract=str(task.path), model=self.model.name, budget=budget)
        context = RedTeamContext(
            op=task.contract.op,
            contract_yaml=task.path.read_text(),
            abi=task.contract.candidate_abi.signature,
            honest_source=honest_source,
            budget=budget,
        )
        self.work_dir.mkdir(parents=True, exist_ok=True)
        for number in range(1, budget + 1):
            context.round = number
            attempt, gate = self._attempt(task, context)
            report.attempts.append(attempt)
            report.gate = report.gate or (gate.gate if gate else None)
            context.history.append(feedback_of(attempt, gate))
            if self.progress is not None:
                self.progress(f"attempt {number}/{budget} {attempt.attack}: {attempt.status}{_harm_words(attempt)}")
        return report

    def _propose(self, context: RedTeamContext) -> AttackProposal | str:
        """The model's attack, or why there is none (a refused or malformed answer)."""
        try:
            return AttackProposal.model_validate(call_tool(self.model, self.agents_dir, ROLE, TOOL, context.model_dump()))
        except ModelError as err:
            return f"the model's answer was refused: {err}"
        except ValidationError as err:
            return f"the model's answer does not fit {TOOL}: {err.errors()[0]['msg']}"

    def _attempt(self, task: Task, context: RedTeamContext) -> tuple[RedTeamAttempt, VerdictSummary | None]:
        proposal = self._propose(context)
        if isinstance(proposal, str):
            empty = hashlib.sha256(b"").hexdigest()
            return RedTeamAttempt(
                round=context.round,
                attack="none",
                candidate="",
                candidate_sha256=empty,
                status="not_judged",
                passed=False,
                error=proposal,
            ), None
        path = self.work_dir / f"attempt_{context.round}_{proposal.attack}.py"
        path.write_text(proposal.source)
        attempt = RedTeamAttempt(
            round=context.round,
            attack=proposal.attack,
            notes=proposal.notes,
            candidate=str(path),
            candidate_sha256=hashlib.sha256(proposal.source.encode()).hexdigest(),
            status="not_judged",
            passed=False,
        )
        try:
            gate = self.check(path)
        except UsageError as err:  # the judge refused the file itself (a language the contract does not allow)
            attempt.error = str(err)
            return attempt, None
        attempt.status = "accepted" if gate.passed else "rejected"
        attempt.passed = gate.passed
        attempt.first_failing_stage = gate.first_failing_stage
        attempt.detections = sorted({d.cheat for d in gate.detections})
        if gate.passed:
            attempt.harmful = self.harm(path)
            # A harm test may keep why it ruled, by file (ReferenceHarm.reasons); a plain callable need not.
            attempt.harm_note = getattr(self.harm, "reasons", {}).get(str(path))
            if attempt.harmful:
                found_dir = self.found_dir or task.project_root / FOUND
                attempt.saved = str(save_found(found_dir, task, attempt, proposal.source, gate.gate))
        return attempt, gate
