"""Deciding: each variant's tensors against its golden stages (every stage, determinism, the read-only
inputs, the runtime watches' evidence), and the verdict's parts from the variants."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import torch
from safetensors.torch import load_file

from ferret import wire
from ferret.contract.model import Contract
from ferret.gate import detect
from ferret.gate.inputs import tensor_content_sha256
from ferret.gate.metrics import StageMetrics, bitwise_equal, compare_to_golden, where_different
from ferret.gate.models import PARTS, Detection, PartName, PartResult, RunFailure, VariantResult

VariantIds = tuple[str, str, str, PartName]
"""A variant's id, case, dtype and part."""

MovedCheck = Callable[[dict[str, torch.Tensor]], list[str]]
"""The judge's check of a variant's call on moved inputs, from the variant's tensors: its flags, `slug: evidence`
(`ferret.gate.answers.check_moved_call`, which needs the task and the judge's own copy of the inputs)."""


class _VariantBase(TypedDict):
    """The fields every VariantResult of one variant starts from."""

    id: str
    case: str
    dtype: str
    part: PartName


def _result_missing(base: _VariantBase, message: str) -> VariantResult:
    result = VariantResult(**base, passed=False, failure=RunFailure(kind=wire.FailureKind.RESULT_MISSING, message=message))
    result.detections = detect.from_failure(result)
    return result


def _differences(
    got: dict[str, torch.Tensor], outputs: list[str], inout: list[str], repeats: int, traced: bool
) -> tuple[list[str], list[str]]:
    """Where, in words, the repeated fast calls differ bitwise from the first (outputs and in-place inputs), and
    where the traced run's outputs differ from the fast path's (where there was one: `traced`): empty lists when
    they do not."""
    key = {n: (wire.fast_key if n in outputs else wire.inout_key) for n in outputs + inout}
    repeat_diffs = [
        f"{n}: call {r + 1} against call 1: {where_different(got[key[n](0, n)], got[key[n](r, n)])}"
        for n in key
        for r in range(1, repeats)
        if not bitwise_equal(got[key[n](0, n)], got[key[n](r, n)])
    ]
    traced_diffs = [
        f"{n}: {where_different(got[wire.fast_key(0, n)], got[wire.traced_key(n)])}"
        for n in outputs
        if traced and not bitwise_equal(got[wire.fast_key(0, n)], got[wire.traced_key(n)])
    ]
    return repeat_diffs, traced_diffs


def case_is_traced(contract: Contract, case: str) -> bool:
    """False for a contract case marked `traced: false` (judged on its outputs alone); True for every other,
    the fresh and strata cases the judge draws included."""
    return all(c.traced for c in contract.cases.cpu + contract.cases.gpu if c.name == case)


def _stage_value(got: dict[str, torch.Tensor], stage: str, outputs: list[str], inout: list[str]) -> torch.Tensor | None:
    """A stage's tensor as the candidate gave it: an output and an inout from the fast path's first call, the other
    stages from the traced run (None where the candidate exposed none)."""
    if stage in outputs:
        return got[wire.fast_key(0, stage)]
    if stage in inout:
        return got[wire.inout_key(0, stage)]
    return got.get(wire.trace_key(stage))


def _stage_values(contract: Contract, got: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Every exposed stage's tensor, by name (what the rounding test of `detect` reads)."""
    outputs = [o.name for o in contract.outputs]
    inout = [i.name for i in contract.inputs if i.role == "inout"]
    values = {s.name: _stage_value(got, s.name, outputs, inout) for s in contract.stages}
    return {name: value for name, value in values.items() if value is not None}


def _compare_stages(
    contract: Contract,
    got: dict[str, torch.Tensor],
    golden: dict[str, torch.Tensor],
    outputs: list[str],
    inout: list[str],
    dtype: str,
    own_row: str | None,
    device: str,
) -> list[StageMetrics]:
    """Every stage of the contract compared on `device`: an output and an inout from the fast path's first call,
    the other stages from the traced run (None where the candidate exposed none)."""
    stages: list[StageMetrics] = []
    for stage in contract.stages:
        stages.append(
            compare_to_golden(
                _stage_value(got, stage.candidate_stage, outputs, inout),
                golden,
                stage,
                contract.tolerance(dtype, stage.name, own_row),
                device=device,
            )
        )
    return stages


def _compare_stages_anywhere(
    contract: Contract,
    got: dict[str, torch.Tensor],
    golden: dict[str, torch.Tensor],
    outputs: list[str],
    inout: list[str],
    dtype: str,
    own_row: str | None,
) -> list[StageMetrics]:
    """`_compare_stages` on the GPU where there is one (large stages; the candidate's process is long gone), on the
    host where the card is short of memory (other processes hold it): the same float64 metrics, slower. A
    comparison that cannot be made is the judge's fault, never the candidate's."""
    if torch.cuda.is_available():
        try:
            return _compare_stages(contract, got, golden, outputs, inout, dtype, own_row, "cuda")
        except torch.OutOfMemoryError:
            torch.cuda.empty_cache()
    return _compare_stages(contract, got, golden, outputs, inout, dtype, own_row, "cpu")


def judge_variant(
    contract: Contract,
    ids: VariantIds,
    golden: dict[str, torch.Tensor],
    status: wire.VariantStatus | None,
    tensors_file: Path,
    input_digests: dict[str, str],
    moved: MovedCheck | None = None,
) -> VariantResult:
    """One variant's result from its tensors; `moved`: the check of its call on moved inputs, where the job asked for
    one (`wire.CandidateJob.moved_call`)."""
    vid, case, dtype, part = ids
    base: _VariantBase = {"id": vid, "case": case, "dtype": dtype, "part": part}
    if status is None:
        return _result_missing(
            base, "no result for this case: the candidate's process ended the run early (a forged done marker?)"
        )
    if not status.ok:
        failure = RunFailure(kind=status.kind or wire.FailureKind.EXCEPTION, message=status.message, traceback=status.traceback)
        result = VariantResult(**base, passed=False, failure=failure, seconds=status.seconds, phase_seconds=status.phase_seconds)
        result.detections = detect.from_failure(result)
        return result
    try:
        got = load_file(str(tensors_file))
    except Exception as err:  # noqa: BLE001 - a missing or corrupt result is the candidate's doing
        return _result_missing(
            base,
            f"the result file is missing or unreadable ({type(err).__name__}): written over or deleted by the candidate",
        )
    outputs = [o.name for o in contract.outputs]
    inout = [i.name for i in contract.inputs if i.role == "inout"]
    traced = case_is_traced(contract, case)
    if not traced:  # judged on its outputs alone: whatever else the result file holds is not read
        got = {k: v for k, v in got.items() if not k.startswith(wire.trace_key(""))}
    repeat_diffs, traced_diffs = _differences(got, outputs, inout, contract.budgets.fast_calls(part, traced), traced)
    repeats_equal, traced_equal = not repeat_diffs, not traced_diffs
    own_row = None if part == "fresh_cases" else case  # a fresh case is never judged by a frozen case's own row
    stages = _compare_stages_anywhere(contract, got, golden, outputs, inout, dtype, own_row)
    first_failing = next((s.stage for s in stages if not s.passed), None)
    result = VariantResult(
        **base,
        passed=first_failing is None and repeats_equal and traced_equal,
        stages=stages,
        first_failing_stage=first_failing,
        repeats_bitwise_equal=repeats_equal,
        traced_equals_fast=traced_equal,
        triton_launches=status.launches,
        kernels=status.kernels,
        aten_compute=status.aten_compute,
        host_numerics=status.host_numerics,
        host_cpu_seconds=status.host_cpu_seconds,
        seconds=status.seconds,
        phase_seconds=status.phase_seconds,
    )
    # The read-only inputs as the candidate left them, checked here against the content hashes the judge
    # holds (the gate's manifest; the fresh cases' own), not against the copy in the candidate's folder.
    changed = [
        n
        for n, digest in input_digests.items()
        if wire.after_key(n) in got and tensor_content_sha256(got[wire.after_key(n)]) != digest
    ]
    if changed:
        result.passed = False
        result.failure = RunFailure(
            kind=wire.FailureKind.INPUT_MUTATED, message=f"read-only inputs {changed} changed during the call"
        )
    result.detections = (
        detect.from_failure(result)
        + detect.from_runtime(result, status, got, outputs, bitwise_equal)
        + detect.from_outputs(result, got, golden, outputs, repeat_diffs, traced_diffs, _stage_values(contract, got))
        # The moved call is evidence only where the variant's own answer is right: a kernel already wrong there
        # answers moved inputs wrongly too, which says nothing of a replay.
        + (detect.from_moved_call(result, moved(got)) if moved is not None and first_failing is None else [])
    )
    if any(d.source == "runtime" for d in result.detections):
        result.passed = False
    return result


def case_part(results: list[VariantResult]) -> PartResult:
    """A part made of case variants: each failure named; variants not run counted once, with the reason."""
    not_run = [r for r in results if r.failure is not None and r.failure.kind == "not_run"]
    failed = [
        r for r in results if not r.passed and r not in not_run and (r.failure is not None or r.first_failing_stage is not None)
    ]
    detail = [
        f"{r.id}: {r.failure.kind}: {r.failure.message[:200]}" if r.failure else f"{r.id}: stage {r.first_failing_stage}"
        for r in failed
    ]
    if not_run:
        first = not_run[0].failure
        assert first is not None  # not_run holds only variants whose failure is `not_run`
        detail.append(f"{len(not_run)} of {len(results)} variants not run ({first.message.removeprefix('not run: ')})")
    return PartResult(status="fail" if failed or not_run else "pass", detail="; ".join(detail) or f"{len(results)} case variants")


def parts_of(
    results: list[VariantResult],
    stress: wire.StressResult | None,
    device: str,
    run_stress: bool,
    detections: list[Detection],
    batch: PartResult | None = None,
) -> dict[str, PartResult]:
    parts: dict[str, PartResult] = {
        "batch_invariance": batch or PartResult(status="skipped", detail="not asked for by the contract")
    }
    for part in ("correctness", "dtypes", "edge_cases", "fresh_cases"):
        mine = [r for r in results if r.part == part]
        if not mine:
            parts[part] = PartResult(status="skipped", detail="no such cases in the contract")
            continue
        parts[part] = case_part(mine)
    ran = [r for r in results if r.failure is None]
    nondet = [r.id for r in ran if not r.repeats_bitwise_equal]
    traced = [r.id for r in ran if not r.traced_equals_fast]
    detail = []
    if nondet:
        detail.append(f"repeated fast runs differ bitwise on {nondet}")
    if traced:
        detail.append(f"traced run's final outputs differ bitwise from the fast path on {traced}")
    parts["determinism"] = PartResult(
        status="fail" if detail or not ran else "pass",
        detail="; ".join(detail) or (f"{len(ran)} variants bitwise equal over repeats" if ran else "no variant ran"),
    )
    integrity = [d for d in detections if d.source in ("static", "runtime")]
    parts["integrity"] = PartResult(
        status="fail" if integrity else "pass",
        detail="; ".join(f"{d.cheat} (docs/cheats.md {d.catalogue}): {d.evidence[:200]}" for d in integrity)
        or "static scan clean; no library compute, launches checked, harness intact",
    )
    if device != "cuda":
        parts["stress"] = PartResult(status="skipped", detail="needs a GPU")
    elif not run_stress:
        parts["stress"] = PartResult(status="skipped", detail="not requested")
    elif stress is None:
        parts["stress"] = PartResult(status="fail", detail="the stress run did not complete")
    elif stress.error is not None:
        parts["stress"] = PartResult(status="fail", detail=stress.error)
    else:
        bad = stress.outputs_differing_from_first > 0 or stress.memory_growth_bytes > 0
        parts["stress"] = PartResult(
            status="fail" if bad else "pass",
            detail=f"{stress.iterations} iterations on {stress.variant}: {stress.outputs_differing_from_first} "
            f"outputs differed from the first, device memory grew {stress.memory_growth_bytes} bytes",
        )
    return {p: parts[p] for p in PARTS}


def mark(result: VariantResult) -> str:
    """One variant's outcome in a progress line."""
    if result.passed:
        return "ok"
    if result.failure:
        return f"FAIL ({result.failure.kind}: {result.failure.message[:160]})"
    if result.first_failing_stage:
        failing = next(st for st in result.stages if st.stage == result.first_failing_stage)
        return f"FAIL at stage {result.first_failing_stage}: {'; '.join(failing.reasons)}"
    if result.repeats_bitwise_equal and result.traced_equals_fast and result.detections:
        return f"FAIL ({result.detections[0].cheat}: {result.detections[0].evidence[:160]})"
    if not result.repeats_bitwise_equal:
        return "FAIL (not bitwise deterministic)"
    return "FAIL (traced run differs from the fast path)"
