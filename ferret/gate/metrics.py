"""Comparing one stage of a candidate with the golden value: several metrics, a strict NaN/Inf policy,
and where the worst error sits."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
from pydantic import BaseModel, ConfigDict

from ferret.contract.model import Stage, Tolerance


class WorstError(BaseModel):
    # NaN/Inf are legitimate values here (a NaN where the reference is finite): keep them in the report's
    # JSON as NaN/Infinity, which read back, instead of pydantic's default null, which does not.
    model_config = ConfigDict(ser_json_inf_nan="constants")

    index: list[int]
    named: dict[str, int] = {}
    candidate: float
    reference: float


class StageMetrics(BaseModel):
    model_config = ConfigDict(ser_json_inf_nan="constants")

    stage: str
    exposed: bool = True
    passed: bool
    # An informative stage (`Stage.informative`): its metrics are reported, its bounds fail nothing (`passed` is
    # True, `reasons` says what they would have said).
    informative: bool = False
    # Entries past their allowance (`Stage.exact_within`), where the stage declares one.
    beyond_allowance: int = 0
    reasons: list[str] = []
    max_abs_err: float | None = None
    max_abs_rel_peak: float | None = None
    rel_l2: float | None = None
    cosine: float | None = None
    nonfinite_mismatches: int = 0
    worst: WorstError | None = None
    # The largest error of any one row (`Tolerance.max_row_rel`: each vector along the last axis) and where that
    # row is, by axis name; None for a stage of one axis.
    max_row_rel: float | None = None
    worst_row: dict[str, int] | None = None
    tolerance: Tolerance | None = None
    # False where rel_l2 divides by more than the reference's own norm (the stage's error scale, or its floor when
    # its values are near zero): then rel_l2 bounds the error against that scale, not the stage's own relative
    # error, and the cosine of a stage that small (one score) says nothing about the direction.
    own_norm: bool = True


def _ignored_mask(reference: torch.Tensor, stage: Stage) -> torch.Tensor:
    if stage.ignore_where_reference is None:
        return torch.zeros_like(reference, dtype=torch.bool)
    if stage.ignore_where_reference == "nan":
        return torch.isnan(reference)
    value = math.inf if stage.ignore_where_reference == "inf" else -math.inf
    return reference == value


def _judged_scales(
    ref_norm: float, peak: float, entries: int, tol: Tolerance, error_scale: tuple[float, float] = (0.0, 0.0)
) -> tuple[float, float, bool]:
    """(the norm rel_l2 divides by, the peak max_abs_rel_peak divides by, whether something other than the
    reference's own norm set the norm). At least: the stage's error scale where it declares one (the (norm, peak)
    of `error_scale_of`'s tensor over the judged entries: a dot product whose terms cancel keeps the error of its
    terms), the stage's natural scale (`tol.scale_floor` per entry) when all its values happen to be near zero, and
    a peak of at least `tol.peak_floor` (a stage of a few entries has no peak of its own)."""
    norm = max(ref_norm, error_scale[0])
    peak = max(peak, error_scale[1], tol.peak_floor or 0.0)
    if tol.scale_floor is not None:
        norm = max(norm, tol.scale_floor * math.sqrt(entries))
        peak = max(peak, tol.scale_floor)
    return norm, peak, ref_norm < norm


def error_scale_of(golden: Mapping[str, torch.Tensor], stage: Stage) -> torch.Tensor | None:
    """The reference's error scale of `stage` (`Stage.error_scale`) from the golden values, or None: none declared,
    or a golden set without it, which judges the stage against its own values alone (never looser)."""
    return golden.get(stage.error_scale) if stage.error_scale else None


def as_float64_on(tensor: torch.Tensor, device: str) -> torch.Tensor:
    """`tensor` in float64 on `device`: moved there in its own dtype, then converted there. A blocking copy from the
    host that also changes the dtype converts on the host (torch's copy does, to spare device memory) and moves the
    float64's 2-8x the bytes: an MLA stage of 151M entries spent seconds so. The values are the same either way
    (one conversion to float64, round to nearest, wherever it runs)."""
    return tensor.detach().to(device).to(torch.float64)


# Rows of fewer judged entries are not held to the row bound. A row's relative error is about the RMS of its entries'
# rounding errors, which concentrates as the row grows: over many draws, rows of 512 entries of a faithful bf16 kernel
# stay under 0.004, while one entry alone reaches 0.005 (a single bf16 rounding, and a second where the kernel rounds
# twice). A bound derived over short rows would be set by them and admit a cut several times the faithful error on
# every long row; short rows stay under the stage-wide bounds.
ROW_MIN_ENTRIES = 64

# How a failed row bound's reason starts (`compare_stage`): the verdict names a stage that fails on it alone.
ROW_REASON = "row error"

# Entries compared at a time. In one piece, a stage took several float64 temporaries of its whole size (the MLA
# gate's largest, the [64, 16384, 576] cache, is 9.7 GB for the two values alone), and a timed check's process held
# 51 GiB of an H100. In chunks the comparison's memory is bounded whatever the stage: an untimed check's process
# peaked at 3.0 GiB (an H100).
COMPARE_CHUNK = 1 << 24


@dataclass
class _Rows:
    """Per-row sums over a stage of two or more axes (a row: one vector along the last axis), in float64."""

    length: int  # entries per row
    diff_squares: torch.Tensor
    ref_squares: torch.Tensor
    scale_squares: torch.Tensor
    judged: torch.Tensor

    @classmethod
    def of(cls, shape: tuple[int, ...], device: str) -> _Rows | None:
        if len(shape) < 2 or not math.prod(shape):  # one axis, or no entries: no rows to judge
            return None
        rows = math.prod(shape[:-1])
        zeros = [torch.zeros(rows, dtype=torch.float64, device=device) for _ in range(4)]
        return cls(shape[-1], *zeros)

    def add(self, start: int, diff: torch.Tensor, ref: torch.Tensor, scale: torch.Tensor | None, both: torch.Tensor) -> None:
        row = torch.arange(start, start + diff.numel(), device=diff.device) // self.length
        self.diff_squares.index_add_(0, row, diff.square())
        self.ref_squares.index_add_(0, row, ref.square())
        self.judged.index_add_(0, row, both.to(torch.float64))
        if scale is not None:
            self.scale_squares.index_add_(0, row, scale.square())

    def worst(self, scale_floor: float | None) -> tuple[float, int]:
        """(the largest row error, its row): each row's error norm over the largest of its own norm, its error
        scale's and `scale_floor` per judged entry, over the rows of at least ROW_MIN_ENTRIES judged entries. A row
        of no error scores 0 whatever its norm (an all-zero or all-masked row); an error on a row of no scale at all
        scores inf."""
        norm = torch.maximum(self.ref_squares, self.scale_squares).sqrt()
        if scale_floor is not None:
            norm = torch.maximum(norm, scale_floor * self.judged.sqrt())
        diff = self.diff_squares.sqrt()
        tiny = 1e-30
        unscaled = torch.where(diff > tiny, torch.full_like(diff, math.inf), torch.zeros_like(diff))
        rel = torch.where(norm > tiny, diff / norm.clamp_min(tiny), unscaled)
        rel = torch.where(self.judged >= ROW_MIN_ENTRIES, rel, torch.zeros_like(rel))
        at = int(rel.argmax())
        return float(rel[at]), at


@dataclass
class _Totals:
    """What compare_stage needs of a stage, summed over its chunks in order (flat indices into the whole stage)."""

    nonfinite_mismatches: int = 0
    first_mismatch: int | None = None  # the first non-finite mismatch
    max_abs: float = 0.0
    max_at: int = 0  # the first entry of the largest absolute error
    peak: float = 0.0  # the largest |reference| over the judged entries
    judged: int = 0  # entries where both are finite and the stage does not ignore the reference
    # sums of squares over the judged entries (their square roots are the norms), and of reference x candidate
    ref_squares: float = 0.0
    diff_squares: float = 0.0
    cand_squares: float = 0.0
    dot: float = 0.0
    scale_squares: float = 0.0
    scale_peak: float = 0.0
    beyond_allowance: int = 0
    rows: _Rows | None = None

    def add(
        self,
        start: int,
        cand: torch.Tensor,
        ref: torch.Tensor,
        scale: torch.Tensor | None,
        stage: Stage,
        allowance: torch.Tensor | None = None,
    ) -> None:
        """One chunk, its entries `start` onward of the flattened stage, in float64 on the compare device."""
        compared = ~_ignored_mask(ref, stage)
        ref_finite = torch.isfinite(ref)
        # The gate owns the NaN/Inf policy: a non-finite value is right only where the reference has the same.
        same_nonfinite = (torch.isnan(cand) & torch.isnan(ref)) | ((cand == ref) & ~ref_finite & ~torch.isnan(ref))
        mismatch = compared & (~torch.isfinite(cand) | ~ref_finite) & ~same_nonfinite
        bad = int(mismatch.sum())
        if bad and self.first_mismatch is None:
            self.first_mismatch = start + int(mismatch.nonzero()[0, 0])
        self.nonfinite_mismatches += bad
        both = compared & ref_finite & torch.isfinite(cand)
        diff = torch.where(both, (cand - ref).abs(), 0.0)
        ref_f, cand_f = torch.where(both, ref, 0.0), torch.where(both, cand, 0.0)
        largest = float(diff.max())
        if largest > self.max_abs:  # strictly: an equal error in a later chunk is not the first
            self.max_abs, self.max_at = largest, start + int(diff.argmax())
        self.peak = max(self.peak, float(ref_f.abs().max()))
        self.judged += int(both.sum())
        self.ref_squares += float(ref_f.square().sum())
        self.diff_squares += float(diff.square().sum())
        self.cand_squares += float(cand_f.square().sum())
        self.dot += float((ref_f * cand_f).sum())
        values = None
        if scale is not None:
            values = torch.where(both, scale.abs(), 0.0).nan_to_num(0.0, 0.0, 0.0)
            self.scale_squares += float(values.square().sum())
            self.scale_peak = max(self.scale_peak, float(values.max()))
        if allowance is not None:
            self.beyond_allowance += int((both & ~(diff <= allowance.abs())).sum())
        if self.rows is not None:
            self.rows.add(start, diff, ref_f, values, both)


def _flat_like(reference: torch.Tensor, companion: torch.Tensor | None, misshapen: torch.Tensor | None) -> torch.Tensor | None:
    """A companion of the stage (its error scale, its allowance) flattened, where it has the stage's shape; else
    `misshapen` (None: an error scale of another shape is ignored; a zero allowance: exact, never looser)."""
    if companion is not None and tuple(companion.shape) == tuple(reference.shape):
        return companion.detach().reshape(-1)
    return misshapen


def _totals(
    candidate: torch.Tensor,
    reference: torch.Tensor,
    error_scale: torch.Tensor | None,
    stage: Stage,
    device: str,
    chunk: int,
    allowance: torch.Tensor | None = None,
) -> _Totals:
    """The stage's totals, `chunk` entries at a time, each moved to `device` and made float64 there."""
    totals = _Totals(rows=_Rows.of(tuple(reference.shape), device))
    cand, ref = candidate.detach().reshape(-1), reference.detach().reshape(-1)
    scale = _flat_like(reference, error_scale, None)
    exact = None if allowance is None else _flat_like(reference, allowance, torch.zeros_like(ref))
    for start in range(0, ref.numel(), chunk):
        piece = slice(start, start + chunk)
        totals.add(
            start,
            as_float64_on(cand[piece], device),
            as_float64_on(ref[piece], device),
            None if scale is None else as_float64_on(scale[piece], device),
            stage,
            None if exact is None else as_float64_on(exact[piece], device),
        )
    return totals


def _unravel(flat: int, shape: tuple[int, ...]) -> list[int]:
    """The index of entry `flat` of a row-major tensor of `shape` (torch.unravel_index took seconds of a check)."""
    index = []
    for size in reversed(shape):
        flat, at = divmod(flat, size) if size else (flat, 0)
        index.append(at)
    return index[::-1]


def _worst_entry(candidate: torch.Tensor, reference: torch.Tensor, totals: _Totals, stage: Stage) -> WorstError:
    """The worst entry: the first non-finite mismatch if any, else the first entry of the largest absolute error."""
    if not reference.numel():  # an empty stage has no worst entry (index []), so it names no axis
        return WorstError(index=[], named={}, candidate=0.0, reference=0.0)
    flat = totals.first_mismatch if totals.first_mismatch is not None else totals.max_at
    index = _unravel(flat, tuple(reference.shape))
    return WorstError(
        index=index,
        named=dict(zip(stage.dims, index, strict=False)) if stage.dims else {},
        candidate=float(candidate.reshape(-1)[flat]),
        reference=float(reference.reshape(-1)[flat]),
    )


def _worst_row(
    totals: _Totals, reference: torch.Tensor, stage: Stage, tol: Tolerance
) -> tuple[float | None, dict[str, int] | None]:
    """The largest row error and where its row is: by axis name (the stage's names but the last), else `axis<i>`."""
    if totals.rows is None:
        return None, None
    rel, at = totals.rows.worst(tol.scale_floor)
    shape = tuple(reference.shape[:-1])
    index = _unravel(at, shape)
    names = list(stage.dims[:-1]) if stage.dims and len(stage.dims) == len(reference.shape) else []
    names = names or [f"axis{i}" for i in range(len(shape))]
    return rel, dict(zip(names, index, strict=True))


def compare_stage(
    candidate: torch.Tensor | None,
    reference: torch.Tensor,
    stage: Stage,
    tol: Tolerance,
    device: str = "cpu",
    error_scale: torch.Tensor | None = None,
    chunk: int = COMPARE_CHUNK,
    allowance: torch.Tensor | None = None,
) -> StageMetrics:
    """Metrics of `candidate` against `reference`, computed in float64 on `device`, `chunk` entries at a time; pass
    only if every bound holds. `error_scale`: the reference's error scale of the stage (`error_scale_of`), which its
    norm and peak are judged against at least; `allowance`: each entry's largest allowed error (`allowance_of`), for a
    stage that declares one. An informative stage's metrics pass whatever they are, their reasons kept."""
    metrics = _compare(candidate, reference, stage, tol, device, error_scale, chunk, allowance)
    if stage.informative:
        return metrics.model_copy(update={"passed": True, "informative": True})
    return metrics


def compare_to_golden(
    candidate: torch.Tensor | None,
    golden: Mapping[str, torch.Tensor],
    stage: Stage,
    tol: Tolerance,
    device: str = "cpu",
) -> StageMetrics:
    """`compare_stage` against the golden set's value of `stage`, with the companions the stage declares (its error
    scale, its allowance) read from the same set: every check that judges a stage judges it this one way. A check
    that passed the tolerance alone would let an exact stage (`Stage.exact_within`) be off by anything the
    tolerance absorbs, a sign flipped on its small entries among them."""
    return compare_stage(
        candidate,
        golden[stage.name],
        stage,
        tol,
        device=device,
        error_scale=error_scale_of(golden, stage),
        allowance=allowance_of(golden, stage),
    )


def allowance_of(golden: Mapping[str, torch.Tensor], stage: Stage) -> torch.Tensor | None:
    """The reference's allowance of `stage` (`Stage.exact_within`), or None where it declares none. A golden set
    without it gives zeros: every entry exact, never looser."""
    if not stage.exact_within:
        return None
    reference = golden.get(stage.name)
    return golden.get(stage.exact_within, None if reference is None else torch.zeros_like(reference))


def _compare(
    candidate: torch.Tensor | None,
    reference: torch.Tensor,
    stage: Stage,
    tol: Tolerance,
    device: str,
    error_scale: torch.Tensor | None,
    chunk: int,
    allowance: torch.Tensor | None,
) -> StageMetrics:
    if candidate is None:
        return StageMetrics(stage=stage.name, exposed=False, passed=True, tolerance=tol)
    if tuple(candidate.shape) != tuple(reference.shape):
        return StageMetrics(
            stage=stage.name,
            passed=False,
            reasons=[f"shape {list(candidate.shape)} != expected {list(reference.shape)}"],
            tolerance=tol,
        )
    if not isinstance(candidate, torch.Tensor) or candidate.is_complex():
        return StageMetrics(stage=stage.name, passed=False, reasons=["not a real-valued tensor"], tolerance=tol)
    totals = _totals(candidate, reference, error_scale, stage, device, max(chunk, 1), allowance)
    reasons: list[str] = []
    n_bad = totals.nonfinite_mismatches
    if n_bad:
        reasons.append(f"{n_bad} NaN/Inf entries where the reference differs")
    if totals.beyond_allowance:
        reasons.append(f"{totals.beyond_allowance} entries off by more than allowed (exact but at rounding ties)")
    ref_norm, diff_norm, cand_norm = (
        math.sqrt(totals.ref_squares),
        math.sqrt(totals.diff_squares),
        math.sqrt(totals.cand_squares),
    )
    max_abs = totals.max_abs
    tiny = 1e-30
    ref_norm_judged, peak_judged, floored = _judged_scales(
        ref_norm, totals.peak, totals.judged, tol, (math.sqrt(totals.scale_squares), totals.scale_peak)
    )
    rel_l2 = diff_norm / ref_norm_judged if ref_norm_judged > tiny else (0.0 if diff_norm <= tiny else math.inf)
    max_rel_peak = max_abs / peak_judged if peak_judged > tiny else (0.0 if max_abs <= tiny else math.inf)
    if ref_norm > tiny and cand_norm > tiny:
        cosine = totals.dot / (ref_norm * cand_norm)
    else:
        cosine = 1.0 if (ref_norm <= tiny and cand_norm <= tiny) else 0.0
    worst = _worst_entry(candidate, reference, totals, stage)
    row_rel, worst_row = _worst_row(totals, reference, stage, tol)

    if tol.rel_l2 is not None and not rel_l2 <= tol.rel_l2:
        reasons.append(f"rel_l2 {rel_l2:.3e} > {tol.rel_l2:.3e}")
    if tol.max_abs_rel_peak is not None and not max_rel_peak <= tol.max_abs_rel_peak:
        reasons.append(f"max_abs_rel_peak {max_rel_peak:.3e} > {tol.max_abs_rel_peak:.3e}")
    if tol.cosine_min is not None and not floored and not cosine >= tol.cosine_min:
        reasons.append(f"cosine {cosine:.6f} < {tol.cosine_min:.6f}")
    if tol.max_row_rel is not None and row_rel is not None and not row_rel <= tol.max_row_rel:
        where = ", ".join(f"{k} {v}" for k, v in (worst_row or {}).items())
        reasons.append(f"{ROW_REASON} {row_rel:.3e} > max_row_rel {tol.max_row_rel:.3e} at {where}")
    return StageMetrics(
        stage=stage.name,
        passed=not reasons,
        reasons=reasons,
        max_abs_err=max_abs,
        max_abs_rel_peak=max_rel_peak,
        rel_l2=rel_l2,
        cosine=cosine,
        nonfinite_mismatches=n_bad,
        beyond_allowance=totals.beyond_allowance,
        own_norm=not floored,
        worst=worst,
        max_row_rel=row_rel,
        worst_row=worst_row,
        tolerance=tol,
    )


def bitwise_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Same dtype, shape and bytes (NaN payloads included, unlike torch.equal)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8), b.contiguous().reshape(-1).view(torch.uint8))


def where_different(a: torch.Tensor, b: torch.Tensor) -> str:
    """Where two tensors' bytes differ, in words: how many entries, and the first one's index and values."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return f"{a.dtype} {list(a.shape)} against {b.dtype} {list(b.shape)}"
    n = a.numel()
    if n == 0:
        return "no entries differ"
    bytes_a = a.detach().cpu().contiguous().reshape(-1).view(torch.uint8).reshape(n, -1)
    bytes_b = b.detach().cpu().contiguous().reshape(-1).view(torch.uint8).reshape(n, -1)
    differ = (bytes_a != bytes_b).any(dim=1)
    count = int(differ.sum())
    if count == 0:
        return "no entries differ"
    first = int(differ.nonzero()[0, 0])
    index = _unravel(first, tuple(a.shape)) if a.dim() else []
    values = (a.reshape(-1)[first].item(), b.reshape(-1)[first].item())
    return f"{count} of {n} entries differ, first at {index} ({values[0]!r} against {values[1]!r})"
