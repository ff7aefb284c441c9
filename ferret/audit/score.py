"""The audit's numbers from its results: the mutation score (killed / harmful) overall and per operator, the
honest false-rejection rate, the part that first caught each killed mutant, and each survivor with why the gate let
it through."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ferret.audit.models import AuditRecord, CaseError, Judgement, MutantResult, OperatorScore, Survivor
from ferret.contract.task import Task
from ferret.gate.lock import sha256_file


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


def operator_scores(results: list[MutantResult], operators: list[str]) -> list[OperatorScore]:
    scores = {name: OperatorScore(operator=name) for name in operators}
    for result in results:
        score = scores.setdefault(result.mutant.operator, OperatorScore(operator=result.mutant.operator))
        score.mutants += 1
        kind = result.classification.kind
        setattr(score, kind, getattr(score, kind) + 1)
        if kind == "harmful" and result.judgement is not None and result.judgement.killed:
            score.killed += 1
    for score in scores.values():
        score.mutation_score = _ratio(score.killed, score.harmful)
    return list(scores.values())


def _caught(judgement: Judgement) -> str:
    stage = f", stage {judgement.first_failing_stage}" if judgement.first_failing_stage else ""
    return f"{judgement.caught_by or 'unnamed'}{stage}"


def why_survived(task: Task, error: CaseError | None) -> str:
    """In words: the independent case the mutant fails and the bound it breaks there, against what the gate held."""
    if error is None:
        return "no harmful case recorded"
    where = (
        f"{error.case} ({error.dtype}, dims {error.dims}" + (f", strata {', '.join(error.strata)}" if error.strata else "") + ")"
    )
    if error.raised is not None:
        return f"raises on {where}: {error.raised}; no case of the gate's, fixed or fresh, raised it"
    broken = [s for s in error.stages if not s.passed]
    bounds = "; ".join(f"{s.stage}: {', '.join(s.reasons)}" for s in broken)
    tolerances = "; ".join(
        f"{s.stage} {task.contract.tolerance(error.dtype, s.stage).model_dump(exclude_none=True)}" for s in broken
    )
    return (
        f"over the tolerance on {where}: {bounds}. The gate's cases and its fresh draws held no input like this one, "
        f"or held it where the error stayed within {tolerances}"
    )


def summarise(
    task: Task,
    gate_hash: str,
    profile: str,
    candidate: Path,
    sampling: tuple[int, int, list[str]],
    results: list[MutantResult],
    honest_results: tuple[list[Judgement], list[str]],
    independent_cases: int,
    started_at: str,
    seconds: float,
) -> AuditRecord:
    """The audit record. `sampling`: (seed, budget, operators); `honest_results`: the gate's judgements of the honest
    candidates and the independent cases where one of them was over the tolerance."""
    seed, budget, operators = sampling
    honest, over = honest_results
    harmful = [r for r in results if r.classification.kind == "harmful"]
    killed = [r for r in harmful if r.judgement is not None and r.judgement.killed]
    counts = Counter(r.classification.kind for r in results)
    survivors = [
        Survivor(mutant=r.mutant, error=r.classification.worst, why=why_survived(task, r.classification.worst))
        for r in harmful
        if r.judgement is not None and not r.judgement.killed and not r.judgement.unjudged
    ]
    rejections = sum(j.killed for j in honest)  # a gate that rejects an honest candidate
    score = _ratio(len(killed), len(harmful))
    audit = task.contract.audit
    min_score = audit.min_score if audit is not None else None
    return AuditRecord(
        gate_hash=gate_hash,
        op=task.contract.op,
        profile=profile,
        contract=str(task.path),
        candidate=str(candidate),
        candidate_sha256=sha256_file(candidate),
        operators=operators,
        seed=seed,
        budget=budget,
        independent_cases=independent_cases,
        started_at=started_at,
        seconds=seconds,
        mutants=len(results),
        harmful=len(harmful),
        killed=len(killed),
        benign=counts["benign"],
        band=counts["band"],
        stillborn=counts["stillborn"],
        unjudged=sum(1 for r in harmful if r.judgement is None or r.judgement.unjudged),
        mutation_score=score,
        honest_checks=len(honest),
        honest_false_rejections=rejections,
        honest_false_rejection_rate=_ratio(rejections, len(honest)),
        honest_over_tolerance=over,
        per_operator=operator_scores(results, operators),
        caught_by=dict(Counter(r.judgement.caught_by or "unnamed" for r in killed if r.judgement is not None)),
        caught={r.mutant.id: _caught(r.judgement) for r in killed if r.judgement is not None},
        judged_by={r.mutant.id: r.judgement.worker for r in results if r.judgement is not None and r.judgement.worker},
        survivors=survivors,
        min_score=min_score,
        meets_min=None if min_score is None or score is None else score >= min_score,
    )
