"""Turning evidence into names, so a rejection says what was seen: the cheats of docs/cheats.md
(with their numbers) and the plain failures (a math mismatch at its first failing stage, a wrong shape,
bytes that change over repeats, a fault, a failed stress run), each with its evidence."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from ferret import wire
from ferret.gate.metrics import ROW_REASON, StageMetrics
from ferret.gate.models import Detection, PartResult, VariantResult
from ferret.gate.rounding import Rounding, rounding_of

# Failure kinds of the candidate's process that are cheats in themselves.
_FAILURE_CHEATS = {
    "input_mutated": ("input_mutation", [3], "inputs changed by the call (a reference run on them would agree)"),
    "bad_output": ("lazy_result", [14], "a result that is not a plain torch.Tensor with real storage"),
    "thread_left_running": ("side_stream_or_thread", [13], "work left running in a background thread"),
    "harness_tampered": ("harness_patching", [15], "the harness's own functions were replaced"),
    "result_missing": ("result_forging", [21], "the result channel was tampered with"),
    # Refused by the sandbox's audit hooks (ferret/sandbox/audit.py).
    "process_spawned": ("side_stream_or_thread", [13, 21], "the candidate started a process (work outside the watched one)"),
    "file_read_refused": ("reading_expected", [10, 11], "the candidate read a file outside its folder and the runtime"),
    "file_write_refused": ("gate_tampering", [20, 21], "the candidate wrote a file outside its own folder"),
    "native_load_refused": ("library_call", [9], "the candidate loaded a native library outside the runtime"),
    # The runner's checks of the buffers it handed out (ferret/sandbox/buffers.py).
    "output_relabelled": (
        "output_relabelled",
        [28],
        "an input or output was re-pointed or re-labelled in place instead of written into",
    ),
    "write_outside_outputs": (
        "write_outside_outputs",
        [23],
        "the call wrote outside the buffers it was given (a guard region, or a buffer of an earlier call)",
    ),
}
# Failure kinds that are no cheat in themselves, named by what happened (`not_run` is named by the fault
# on the variant it happened on).
_FAILURE_NAMES = {
    "exception": "the candidate raised",
    "crash": "the candidate's process crashed",
    "timeout": "the candidate ran out of time",
    "out_of_memory": "the candidate ran out of memory",
    "internal": "the harness failed on this case",
}


def from_failure(result: VariantResult) -> list[Detection]:
    """A variant that failed to run: the cheat its failure kind is, or else the failure itself (kind and message)."""
    if result.failure is None or result.failure.kind == "not_run":
        return []
    kind, message = result.failure.kind, result.failure.message
    if kind in _FAILURE_CHEATS:
        cheat, catalogue, what = _FAILURE_CHEATS[kind]
        return [
            Detection(cheat=cheat, catalogue=catalogue, evidence=f"{what}: {message[:300]}", source="runtime", variant=result.id)
        ]
    return [
        Detection(
            cheat=kind,
            catalogue=[],
            source="run",
            variant=result.id,
            evidence=f"{_FAILURE_NAMES.get(kind, kind)} on {result.id}: {message[:400]}",
        )
    ]


def from_runtime(
    result: VariantResult, status: wire.VariantStatus, got: dict[str, torch.Tensor], outputs: list[str], bitwise_equal
) -> list[Detection]:
    """What the candidate's process saw while it ran. Launches are those of Triton's launch entry points and of the
    CUDA backend's `Source.launch`, both counted and both made no-ops in the no-op run, whatever the language."""
    found = []
    if status.aten_compute:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(status.aten_compute.items()))
        found.append(
            Detection(
                cheat="library_call",
                catalogue=[9],
                source="runtime",
                variant=result.id,
                evidence=f"PyTorch computed floating-point results while the candidate ran: {ops}",
            )
        )
    if status.watch_evasion:
        calls = ", ".join(f"{k} x{v}" for k, v in sorted(status.watch_evasion.items()))
        found.append(
            Detection(
                cheat="library_call",
                catalogue=[9, 15],
                source="runtime",
                variant=result.id,
                evidence=f"the candidate took the ATen watch off the dispatch stack while it ran: {calls}",
            )
        )
    if status.host_numerics:
        where = ", ".join(f"{k} x{v}" for k, v in sorted(status.host_numerics.items()))
        found.append(
            Detection(
                cheat="host_numerics",
                catalogue=[31],
                source="runtime",
                variant=result.id,
                evidence=f"the candidate's own code took floating-point data out of its tensors to the host, where "
                f"Python or NumPy can do the kernel's math: {where[:400]}",
            )
        )
    if status.launches == 0:
        found.append(
            Detection(
                cheat="decoy_kernel",
                catalogue=[8, 9],
                source="runtime",
                variant=result.id,
                evidence="no kernel (Triton, or CUDA through Source.launch) was launched by the fast path",
            )
        )
    found += _left_as_filled(result, status, got, outputs)
    noop_same = [n for n in outputs if wire.noop_key(n) in got and bitwise_equal(got[wire.noop_key(n)], got[wire.fast_key(0, n)])]
    if noop_same:
        found.append(
            Detection(
                cheat="decoy_kernel",
                catalogue=[8],
                source="runtime",
                variant=result.id,
                evidence=f"with every kernel launch made a no-op, outputs {noop_same} came out bitwise the same: "
                "the kernels did not produce them",
            )
        )
    return found


# What a wrong answer of the call on moved inputs is (`ferret.gate.answers.check_sampled_answers` says which).
_MOVED_CALL_CATALOGUE = {"content_replay": [22, 16], "warmup_detection": [17, 16]}


def from_moved_call(result: VariantResult, flags: list[str]) -> list[Detection]:
    """The judge's check of the runner's call on moved inputs (`ferret.gate.answers.check_moved_call`): each flag,
    `slug: evidence`, a detection. Run-time evidence like the no-op call's: a probe call of the candidate's process,
    judged from its tensors, so it fails the variant and the integrity part."""
    found = []
    for flag in flags:
        cheat, _, evidence = flag.partition(": ")
        found.append(
            Detection(
                cheat=cheat,
                catalogue=_MOVED_CALL_CATALOGUE.get(cheat, []),
                source="runtime",
                variant=result.id,
                evidence=f"{evidence} (a few elements of each floating-point read-only input moved, at positions drawn "
                "from the OS's randomness; the reference run by the judge on its own copy moved the same way)",
            )
        )
    return found


# Pre-fills that an honest kernel's answer matches only by chance (zeros it may well write).
_TELLING_FILLS = {"random", "stale", "nan"}


def _left_as_filled(
    result: VariantResult, status: wire.VariantStatus, got: dict[str, torch.Tensor], outputs: list[str]
) -> list[Detection]:
    """Calls after the first that gave other bytes than the first while at least 1% of an output's entries still held
    their pre-fill: the kernel skipped those entries, or read its outputs before writing them (wrote only where NaN,
    returned when they already held numbers). Named only when repeats or the traced run differ: a kernel that
    writes everything gives the same bytes whatever the fill."""
    if result.repeats_bitwise_equal is not False and result.traced_equals_fast is not False:
        return []
    seen = []
    for call, counts in status.left_as_filled.items():
        how = status.prefills.get(call, "")
        if call == "fast0" or how not in _TELLING_FILLS:
            continue
        for name, count in counts.items():
            first = got.get(wire.fast_key(0, name))
            if name in outputs and first is not None and count and count >= 0.01 * first.numel():
                seen.append(f"{name} after {call} (pre-filled with {how}): {count} of {first.numel()} entries")
    if not seen:
        return []
    return [
        Detection(
            cheat="unwritten_output",
            catalogue=[1, 6],
            source="runtime",
            variant=result.id,
            evidence="outputs still held the judge's pre-fill where the first call's answer differs, so the kernel "
            f"left them unwritten or read them before writing: {'; '.join(seen)[:400]}",
        )
    ]


def from_outputs(
    result: VariantResult,
    got: dict[str, torch.Tensor],
    golden: dict[str, torch.Tensor],
    outputs: list[str],
    repeat_diffs: Sequence[str] = (),
    traced_diffs: Sequence[str] = (),
    values: Mapping[str, torch.Tensor] | None = None,
) -> list[Detection]:
    """What the tensors show: poison or constants in an output, bytes that change over repeats or between the
    traced and the fast run (`repeat_diffs`, `traced_diffs`: where, in words), and the first failing stage.
    `values`: each stage's tensor as the candidate gave it, which the rounding test reads (none: no evidence)."""
    found, named = _poison_and_constants(result, got, golden, outputs)
    if result.repeats_bitwise_equal is False:
        where = f": {'; '.join(repeat_diffs)[:400]}" if repeat_diffs else ""
        found.append(
            Detection(
                cheat="warmup_detection",
                catalogue=[6, 16, 17],
                source="outputs",
                variant=result.id,
                evidence=f"repeated calls on identical inputs gave different bytes{where} (uninitialised "
                "reads, races, or behaviour that changes after the first calls)",
            )
        )
    if result.traced_equals_fast is False:
        where = f": {'; '.join(traced_diffs)[:400]}" if traced_diffs else ""
        found.append(
            Detection(
                cheat="traced_differs",
                catalogue=[],
                source="outputs",
                variant=result.id,
                evidence=f"the traced run's final outputs differ bitwise from the fast path's{where}: the "
                "stages it exposes are not checked against what the fast path computes",
            )
        )
    return found + _stage_failures(result, named, golden, values or {})


def _poison_and_constants(
    result: VariantResult, got: dict[str, torch.Tensor], golden: dict[str, torch.Tensor], outputs: list[str]
) -> tuple[list[Detection], set[str]]:
    """NaN/Inf where the reference is finite, and constant outputs where the output fails its stage (a constant
    within the tolerance is no cheat: two rows of one column, +-w each, differ by one rounding); with the outputs
    they name."""
    found, named = [], set()
    passing = {s.stage for s in result.stages if s.passed}
    for name in outputs:
        cand = got.get(wire.fast_key(0, name))
        ref = golden.get(name)
        if cand is None or ref is None or cand.shape != ref.shape:
            continue
        cand64, ref64 = cand.double(), ref.double()
        poisoned = int((~torch.isfinite(cand64) & torch.isfinite(ref64)).sum())
        if poisoned:
            named.add(name)
            found.append(
                Detection(
                    cheat="unwritten_output",
                    catalogue=[1, 6, 7],
                    source="outputs",
                    variant=result.id,
                    evidence=f"{name}: {poisoned} of {ref.numel()} entries are NaN/Inf where the reference is finite (entries "
                    "left as the judge's NaN poison, garbage from a reused or uninitialised buffer, or NaN used as a wildcard)",
                )
            )
        finite = torch.isfinite(ref64) & torch.isfinite(cand64)
        constant = finite.sum() > 1 and float(cand64[finite].std()) == 0
        if constant and name not in passing and _varies_in(ref[finite], cand.dtype):
            named.add(name)
            found.append(
                Detection(
                    cheat="constant_output",
                    catalogue=[2],
                    source="outputs",
                    variant=result.id,
                    evidence=f"{name}: every entry is {float(cand64[finite][0])!r} while the reference varies",
                )
            )
    return found, named


def _varies_in(reference: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the reference still varies once rounded to the output's dtype: a reference that differs only below
    that dtype's resolution (one column: every row is +-w up to eps) is written as a constant by an honest kernel."""
    values = reference.to(dtype) if dtype.is_floating_point else reference
    return float(values.double().std()) > 0


def _stage_failures(
    result: VariantResult, named: set[str], golden: Mapping[str, torch.Tensor], values: Mapping[str, torch.Tensor]
) -> list[Detection]:
    """Failing stages: a precision cut only where the evidence holds (`_precision_cut`); else the first failing
    stage that nothing above named, as a math mismatch (or a wrong shape) with its numbers and, where a stage was
    close enough to be read for rounding, why it is not named a precision cut."""
    failing = [s for s in result.stages if not s.passed and s.exposed]
    found = _wrong_rows(result, failing)
    named = named | {s.stage for s in failing if _rows_only(s)}
    rest = [s for s in failing if s.stage not in named]
    readings = {s.stage: _reading(s, golden, values) for s in rest}
    cut = _precision_cut(rest, readings)
    if cut is not None:
        found.append(Detection(cheat="lower_precision", catalogue=[4], source="outputs", variant=result.id, evidence=cut))
        named = named | {s.stage for s in rest}
    unexplained = [s for s in failing if s.stage not in named]
    if unexplained:
        why_not = "; ".join(f"{name}: {r.why}" for name, r in readings.items() if r.finding != "rounding" and r.why)
        found.append(_math_mismatch(result, unexplained[0], f"not a precision cut: {why_not}" if why_not else ""))
    return found


def _reading(stage: StageMetrics, golden: Mapping[str, torch.Tensor], values: Mapping[str, torch.Tensor]) -> Rounding:
    """The rounding test of one failing stage (ferret/gate/rounding.py), where its error is small enough and its
    direction kept (`_within_rounding`); nothing read (an empty `why`) where it is not: that is said by its numbers."""
    if stage.nonfinite_mismatches or not _within_rounding(stage):
        return Rounding("not_rounding", "")
    if not stage.own_norm:
        return Rounding("too_small", "judged against its error scale, not its own norm: no evidence of rounding alone")
    if stage.stage not in values or stage.stage not in golden:
        return Rounding("too_small", "")
    return rounding_of(values[stage.stage], golden[stage.stage])


def _precision_cut(failing: list[StageMetrics], readings: Mapping[str, Rounding]) -> str | None:
    """The evidence of a precision cut, or None. Every failing stage must be within rounding of the reference by its
    size and direction; the first failing stage whose tensors tell (in contract order, where the divergence starts)
    must show rounding at a named precision. The stages after it carry its error (a statistic rounded per row scales
    whole rows, which leans on few rows), so their own pattern is not asked for."""
    if not failing or any(not _within_rounding(s) or s.nonfinite_mismatches for s in failing):
        return None
    telling = next((s for s in failing if readings[s.stage].finding != "too_small"), None)
    if telling is None or readings[telling.stage].finding != "rounding":
        return None
    reading = readings[telling.stage]
    return (
        f"rounding at {reading.precision} where the contract's dtypes ask for more: {telling.stage} (cosine "
        f"{telling.cosine:.5f}, rel_l2 {telling.rel_l2:.2e}): {reading.why}; failing stages "
        f"{[s.stage for s in failing]} are outside the tolerance derived for the contract's dtypes"
    )


def _rows_only(stage: StageMetrics) -> bool:
    """Whether the stage fails on its row bound alone: every stage-wide bound holds."""
    return bool(stage.reasons) and all(r.startswith(ROW_REASON) for r in stage.reasons)


def _wrong_rows(result: VariantResult, failing: list[StageMetrics]) -> list[Detection]:
    """Stages wrong on some rows while every stage-wide bound holds: an error the stage's averages hide."""
    return [
        Detection(
            cheat="wrong_rows",
            catalogue=[30],
            source="outputs",
            variant=result.id,
            evidence=f"stage {s.stage}: its stage-wide errors are inside the tolerance (rel_l2 {s.rel_l2:.3g}, "
            f"max_abs_rel_peak {s.max_abs_rel_peak:.3g}) but one row is not: {'; '.join(s.reasons)[:300]}",
        )
        for s in failing
        if _rows_only(s) and s.rel_l2 is not None and s.max_abs_rel_peak is not None
    ]


# The unit roundoff of fp8 e4m3 (2^-4), the coarsest float format kernels compute in: an error larger than
# this, relative to the stage's norm, is not something rounding to a narrower format could cause.
COARSEST_ROUNDOFF = 2.0**-4


def _within_rounding(stage: StageMetrics) -> bool:
    """An error a lower precision could explain by its size: the direction kept (cosine above 0.999) and a
    relative L2 error no larger than the coarsest format's roundoff. A scale error keeps the direction but not
    the norm (the wrong softmax scale of MLA: cosine 0.999, rel_l2 0.69): that is different math, not precision.
    Being within rounding is necessary, never enough: the pattern is read from the tensors (`_reading`)."""
    return stage.cosine is not None and stage.cosine > 0.999 and stage.rel_l2 is not None and stage.rel_l2 <= COARSEST_ROUNDOFF


def _math_mismatch(result: VariantResult, first: StageMetrics, note: str = "") -> Detection:
    """The first failing stage, with its numbers and tolerance: the candidate computes something else from there
    on. No numbers at all: its tensor has the wrong shape (or is not a real tensor)."""
    reasons = "; ".join(first.reasons)[:300]
    if first.rel_l2 is None and first.cosine is None and not first.nonfinite_mismatches:
        return Detection(
            cheat="wrong_shape", catalogue=[], source="outputs", variant=result.id, evidence=f"stage {first.stage}: {reasons}"
        )
    numbers = [
        f"rel_l2 {first.rel_l2:.3g}" if first.rel_l2 is not None else None,
        f"cosine {first.cosine:.5f}" if first.cosine is not None else None,
        f"max_abs_rel_peak {first.max_abs_rel_peak:.3g}" if first.max_abs_rel_peak is not None else None,
        f"{first.nonfinite_mismatches} NaN/Inf mismatches" if first.nonfinite_mismatches else None,
        f"{first.beyond_allowance} entries past their allowance (exact but at rounding ties)" if first.beyond_allowance else None,
    ]
    tolerance = first.tolerance.model_dump(exclude_none=True) if first.tolerance else {}
    ratio = (
        f", {first.rel_l2 / tolerance['rel_l2']:.0f}x the tolerance"
        if first.rel_l2 is not None and tolerance.get("rel_l2")
        else ""
    )
    where = f" worst at {first.worst.named or first.worst.index}" if first.worst else ""
    return Detection(
        cheat="math_mismatch",
        catalogue=[],
        source="outputs",
        variant=result.id,
        evidence=f"stage {first.stage} differs from the contract's math: "
        f"{', '.join(n for n in numbers if n)}{ratio} (tolerance {tolerance});{where}; {reasons}"
        + (f"; {note[:400]}" if note else ""),
    )


def from_stress(stress: wire.StressResult | None) -> list[Detection]:
    """A failed stress run (GPU): what went wrong in it, with its numbers."""
    if stress is None:
        return [Detection(cheat="stress_failed", catalogue=[], source="run", evidence="the stress run did not complete")]
    if stress.error is not None:
        return [
            Detection(
                cheat="stress_failed",
                catalogue=[],
                source="run",
                variant=stress.variant or None,
                evidence=f"the stress run failed: {stress.error[:400]}",
            )
        ]
    found = []
    if stress.outputs_differing_from_first > 0:
        found.append(
            Detection(
                cheat="stress_drift",
                catalogue=[6, 16],
                source="outputs",
                variant=stress.variant or None,
                evidence=f"{stress.outputs_differing_from_first} of {stress.iterations} calls on {stress.variant} gave outputs "
                "that differ from the first call's (races, uninitialised reads, or state kept across calls)",
            )
        )
    if stress.memory_growth_bytes > 0:
        found.append(
            Detection(
                cheat="memory_growth",
                catalogue=[],
                source="run",
                variant=stress.variant or None,
                evidence=f"device memory grew {stress.memory_growth_bytes} bytes over {stress.iterations} calls on "
                f"{stress.variant}",
            )
        )
    return found


def unnamed(parts: dict[str, PartResult]) -> list[Detection]:
    """The last resort for a rejection nothing above named (a bug of the judge: the tests forbid it): the
    failing parts and their detail, so that no rejection is silent."""
    failing = "; ".join(f"{name}: {part.detail[:200]}" for name, part in parts.items() if part.status == "fail")
    return [Detection(cheat="unnamed_rejection", catalogue=[], source="run", evidence=f"failing parts: {failing}")]


# What shows that a candidate depends on the case it is given, beside its outputs: the scan's or the run's findings
# of case dims compared or tabulated, of answers read from where the judge keeps them, of results kept across calls.
_CASE_DEPENDENCE = {"hardcoded_cases", "reading_expected", "cross_call_caching"}


def _dims_key(dims: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    return tuple(sorted(dims.items()))


def hardcoded_cases(
    frozen: list[VariantResult],
    fresh: list[VariantResult],
    dims: Mapping[str, Mapping[str, int]] | None = None,
    found: Sequence[Detection] = (),
) -> list[Detection]:
    """Every gate case passes and a fresh case fails. That is `hardcoded_cases` only with evidence that the candidate
    depends on the case: a finding of the scan or the run (`_CASE_DEPENDENCE`, in `found`), or a fresh case with a
    gate case's own dims (`dims`: each variant's, by id) failing where that gate case passed (the same shape, new
    values). Otherwise it is a math mismatch on fresh cases, and the detection says why it is not named more."""
    if not (frozen and fresh and all(r.passed for r in frozen) and any(not r.passed for r in fresh)):
        return []
    dims = dims or {}
    failed = [r for r in fresh if not r.passed]
    gate_dims = {_dims_key(dims[r.id]) for r in frozen if r.id in dims}
    same_shape = [r.id for r in failed if r.id in dims and _dims_key(dims[r.id]) in gate_dims]
    seen = sorted({d.cheat for d in found if d.cheat in _CASE_DEPENDENCE and d.source in ("static", "runtime")})
    where = ", ".join(f"{r.id} {dict(dims[r.id]) if r.id in dims else ''}".strip() for r in failed)
    if seen or same_shape:
        because = [f"the scan or the run found {', '.join(seen)}"] if seen else []
        if same_shape:
            because.append(f"fresh cases with a gate case's own dims and new values fail too ({same_shape})")
        return [
            Detection(
                cheat="hardcoded_cases",
                catalogue=[5, 16],
                source="outputs",
                evidence=f"every gate case passes but fresh private cases fail ({where}), and the candidate depends "
                f"on the case: {'; '.join(because)}",
            )
        ]
    return [
        Detection(
            cheat="math_mismatch",
            catalogue=[],
            source="outputs",
            evidence=f"every gate case passes but fresh private cases fail ({where}); not named hard-coded cases: "
            "nothing shows that the candidate depends on the case (no scan or run finding of case dims, gate files or "
            "kept results, and no failure at a gate case's own dims), so this is math it gets wrong where the "
            "gate's own cases do not look",
        )
    ]


def unique(detections: list[Detection]) -> list[Detection]:
    seen, kept = set(), []
    for d in detections:
        key = (d.cheat, d.source, d.evidence)
        if key not in seen:
            seen.add(key)
            kept.append(d)
    return kept
