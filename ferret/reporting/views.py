"""What a report shows, as small typed records built from the gate's and the dispatcher's own records
(`Verdict`, `VerdictSummary`, `ReportEntry`, `RunLog`): the templates only lay these out.

A candidate is shown from its whole verdict where one is found (a gate's `verdicts/`, a run's final
check), else from the verdict in brief the run log keeps, which has tolerances for failing stages only
and no timing samples; the view says which (`brief`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ferret.audit.models import AuditRecord
from ferret.dispatch.runlog import CandidateRecord, RunLog
from ferret.gate.metrics import StageMetrics
from ferret.gate.models import (
    PARTS,
    CaseSummary,
    GateManifest,
    ReportEntry,
    StageSummary,
    TimingResult,
    Verdict,
    VerdictSummary,
)


@dataclass(frozen=True)
class StageRow:
    """One stage of one variant against its tolerance."""

    variant: str
    stage: str
    status: str  # pass, fail or "not exposed"
    rel_l2: float | None = None
    rel_l2_limit: float | None = None
    max_abs_rel_peak: float | None = None
    max_abs_rel_peak_limit: float | None = None
    cosine: float | None = None
    cosine_min: float | None = None
    worst: str = ""
    reasons: str = ""

    @property
    def fraction_of_tolerance(self) -> float | None:
        """The larger error as a fraction of its bound (1.0 is the tolerance; above it fails), of rel_l2 and
        max_abs_rel_peak; the cosine's only where the stage has neither (1 - cosine grows as the square of the
        error, so beside them it would only exaggerate)."""
        fractions = [_ratio(self.rel_l2, self.rel_l2_limit), _ratio(self.max_abs_rel_peak, self.max_abs_rel_peak_limit)]
        known = [f for f in fractions if f is not None]
        if not known and self.cosine is not None and self.cosine_min is not None and self.cosine_min < 1:
            known.append(_ratio(1 - self.cosine, 1 - self.cosine_min) or 0.0)
        return max(known) if known else None


@dataclass(frozen=True)
class DetectionRow:
    cheat: str
    catalogue: str
    evidence: str
    source: str = ""
    where: str = ""


@dataclass(frozen=True)
class PartRow:
    name: str
    status: str
    detail: str = ""


@dataclass(frozen=True)
class CandidateView:
    """One judged candidate, as the report shows it."""

    title: str
    sha256: str
    passed: bool
    first_failing_stage: str | None
    parts: list[PartRow]
    detections: list[DetectionRow]
    stages: list[StageRow]
    failures: list[str]
    fault: str | None
    timing: TimingResult
    brief: bool = False

    @property
    def verdict_word(self) -> str:
        return "PASS" if self.passed else "FAIL"

    @property
    def failing_stages(self) -> list[StageRow]:
        return [row for row in self.stages if row.status == "fail"]


@dataclass(frozen=True)
class GateView:
    gate_hash: str
    op: str
    profile: str
    verdict_count: int
    entries: list[ReportEntry]
    candidates: list[CandidateView]
    reference_validation: str = ""
    # The gate's audit (`ferret gate audit`) where the trust registry vouches for its record, else why it is not shown.
    audit: AuditRecord | None = None
    audit_problem: str = ""


@dataclass(frozen=True)
class RoundCandidate:
    record: CandidateRecord
    file: str
    view: CandidateView | None


@dataclass(frozen=True)
class RoundView:
    number: int
    gate_verified: bool
    pivot_requested: bool
    candidates: list[RoundCandidate] = field(default_factory=list)


@dataclass(frozen=True)
class RunView:
    log: RunLog
    rounds: list[RoundView]
    winner: RoundCandidate | None
    final: CandidateView | None


def _ratio(value: float | None, limit: float | None) -> float | None:
    if value is None or limit is None or limit <= 0:
        return None
    if math.isnan(value):
        return math.inf
    return value / limit


# --- from a whole verdict ------------------------------------------------------------------------------


def _stage_row(variant: str, metrics: StageMetrics) -> StageRow:
    if not metrics.exposed:
        return StageRow(variant=variant, stage=metrics.stage, status="not exposed")
    tol = metrics.tolerance
    worst = metrics.worst
    where = ""
    if worst is not None and not metrics.passed:
        place = ", ".join(f"{k}={v}" for k, v in worst.named.items()) or str(worst.index)
        where = f"{place}: {worst.candidate:.6g} vs {worst.reference:.6g}"
    return StageRow(
        variant=variant,
        stage=metrics.stage,
        status="pass" if metrics.passed else "fail",
        rel_l2=metrics.rel_l2,
        rel_l2_limit=tol.rel_l2 if tol else None,
        max_abs_rel_peak=metrics.max_abs_rel_peak,
        max_abs_rel_peak_limit=tol.max_abs_rel_peak if tol else None,
        cosine=metrics.cosine,
        cosine_min=tol.cosine_min if tol else None,
        worst=where,
        reasons="; ".join(metrics.reasons),
    )


def _ordered_parts(parts: dict[str, tuple[str, str]]) -> list[PartRow]:
    """Every part, in the judge's order (PARTS), then any the report does not know yet."""
    names = [p for p in PARTS if p in parts] + sorted(p for p in parts if p not in PARTS)
    return [PartRow(name=name, status=parts[name][0], detail=parts[name][1]) for name in names]


def candidate_of_verdict(verdict: Verdict, title: str) -> CandidateView:
    """A candidate from its whole verdict."""
    fault = verdict.fault
    return CandidateView(
        title=title,
        sha256=verdict.candidate_sha256,
        passed=verdict.passed,
        first_failing_stage=verdict.first_failing_stage,
        parts=_ordered_parts({name: (part.status, part.detail) for name, part in verdict.parts.items()}),
        detections=[
            DetectionRow(
                cheat=d.cheat,
                catalogue=", ".join(map(str, d.catalogue)),
                evidence=d.evidence,
                source=d.source,
                where=_where(d.variant, d.file, d.line),
            )
            for d in verdict.detections
        ],
        stages=[_stage_row(v.id, s) for v in verdict.variants for s in v.stages],
        failures=[f"{v.id}: {v.failure.kind}: {v.failure.message}" for v in verdict.variants if v.failure],
        fault=f"{fault.kind} on {fault.variant}: {fault.message} ({len(fault.not_run)} not run)" if fault else None,
        timing=verdict.timing,
    )


def _where(variant: str | None, file: str | None, line: int | None) -> str:
    place = f"{file}:{line}" if file and line else (file or "")
    return ", ".join(p for p in (variant, place) if p)


# --- from a verdict in brief (the run log) -----------------------------------------------------------------


def _summary_stage_row(variant: str, stage: str, value: StageSummary | str) -> StageRow:
    if not isinstance(value, StageSummary):
        return StageRow(variant=variant, stage=stage, status="not exposed")
    tol = value.tolerance or {}
    worst = value.worst
    where = ", ".join(f"{k}={v}" for k, v in worst.items()) if isinstance(worst, dict) else (str(worst) if worst else "")
    return StageRow(
        variant=variant,
        stage=stage,
        status="pass" if value.passed else "fail",
        rel_l2=value.rel_l2,
        rel_l2_limit=tol.get("rel_l2"),
        max_abs_rel_peak=value.max_abs_rel_peak,
        max_abs_rel_peak_limit=tol.get("max_abs_rel_peak"),
        cosine=value.cosine,
        cosine_min=tol.get("cosine_min"),
        worst=where,
    )


def _summary_failures(cases: dict[str, CaseSummary]) -> list[str]:
    return [f"{case}: {c.failure}: {c.message or ''}" for case, c in cases.items() if c.failure]


def candidate_of_summary(summary: VerdictSummary, title: str) -> CandidateView:
    """A candidate from the verdict in brief a run log keeps."""
    fault = summary.fault
    return CandidateView(
        title=title,
        sha256=summary.candidate_sha256,
        passed=summary.passed,
        first_failing_stage=summary.first_failing_stage,
        parts=_ordered_parts({name: (status, "") for name, status in summary.parts.items()}),
        detections=[
            DetectionRow(cheat=d.cheat, catalogue=", ".join(map(str, d.catalogue)), evidence=d.evidence)
            for d in summary.detections
        ],
        stages=[_summary_stage_row(case, stage, value) for case, c in summary.cases.items() for stage, value in c.stages.items()],
        failures=_summary_failures(summary.cases),
        fault=f"{fault.kind} on {fault.variant}: {fault.message} ({fault.not_run} not run)" if fault else None,
        timing=summary.timing,
        brief=True,
    )


# --- a gate and a run ---------------------------------------------------------------------------------------


def gate_view(
    gate_hash: str,
    manifest: GateManifest | None,
    entries: list[ReportEntry],
    verdict_count: int,
    verdicts: list[tuple[ReportEntry, Verdict]],
    validation: str,
    audit: tuple[AuditRecord | None, str] = (None, ""),
) -> GateView:
    """A gate: its index, the verdicts given, newest first, and its audit (the record, or why there is none)."""
    candidates = [candidate_of_verdict(v, f"verdict {entry.index}: {v.candidate_path}") for entry, v in reversed(verdicts)]
    return GateView(
        gate_hash=gate_hash,
        op=manifest.op if manifest else "",
        profile=manifest.profile if manifest else "",
        verdict_count=verdict_count,
        entries=list(reversed(entries)),
        candidates=candidates,
        reference_validation=validation,
        audit=audit[0],
        audit_problem=audit[1],
    )


def run_relative(file: str, run_dir: Path) -> Path | None:
    """A candidate's file relative to its run folder (`round-NN/candidate-i.py`), where it is there: the
    log's path may be relative to wherever the run was started, or absolute on another machine."""
    path = Path(file)
    try:
        return path.resolve().relative_to(run_dir.resolve())
    except ValueError:
        tail = Path(path.parent.name, path.name)
        return tail if (run_dir / tail).is_file() else None


def _shown_path(file: str, run_dir: Path) -> str:
    relative = run_relative(file, run_dir)
    return relative.as_posix() if relative is not None else file


def _round_candidate(record: CandidateRecord, run_dir: Path, whole: dict[str, Verdict]) -> RoundCandidate:
    file = _shown_path(record.file, run_dir)
    title = f"round {record.round}, candidate {record.index} ({record.approach}): {file}"
    verdict = whole.get(record.sha256)
    if verdict is not None:
        view = candidate_of_verdict(verdict, title)
    else:
        view = candidate_of_summary(record.gate, title) if record.gate else None
    return RoundCandidate(record=record, file=file, view=view)


def run_view(log: RunLog, run_dir: Path, whole: dict[str, Verdict], final: Verdict | None) -> RunView:
    """A run: its rounds, each candidate (whole where its verdict is found, by sha256), the winner and
    its final check."""
    rounds = [
        RoundView(
            number=r.round,
            gate_verified=r.gate_verified,
            pivot_requested=r.pivot_requested,
            candidates=[_round_candidate(c, run_dir, whole) for c in r.candidates],
        )
        for r in log.rounds
    ]
    winner = _round_candidate(log.best, run_dir, whole) if log.best else None
    final_view = None
    if final is not None:
        final_view = candidate_of_verdict(final, "final acceptance check")
    elif log.final_check and log.final_check.verdict:
        final_view = candidate_of_summary(log.final_check.verdict, "final acceptance check")
    return RunView(log=log, rounds=rounds, winner=winner, final=final_view)
