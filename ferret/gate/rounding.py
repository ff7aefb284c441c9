"""Whether a stage's error has the pattern of rounding at a named precision, so that `lower_precision` is said
only where that evidence holds (`ferret/gate/detect.py`). Small size and a kept direction are not enough: a wrong
divisor, a wrong scale or one wrong row among many right ones is as small and keeps the direction, and it is
different math.

Two tests, either of which is evidence of a cut at precision p:
1. **On p's grid**: the candidate's values (stored in a finer dtype) are values of p, where the reference's are
   not, and the candidate is as close to the reference rounded to p as that rounding is to the reference: the
   stage, or what it was computed from last, was rounded to p.
2. **Rounding noise of p's size**: the error beyond the stage's own dtype (candidate minus the reference rounded
   to that dtype) is between 1/16 and 8 of p's unit roundoff relative to the stage's norm, it does not lean along
   the reference (|cosine(error, reference)| <= 1/2: a scale error or a wrong divisor moves every entry the same
   way, cosine 1), and it touches at least a quarter of the entries (rounding touches every entry; one wrong row
   among many right ones does not).
A stage of fewer than 16 judged entries, off every grid, is too small to tell: no evidence either way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

# Formats a kernel may cut to, coarsest last, with their unit roundoff (half an ulp at 1). fp16's is tf32's too.
PRECISIONS: tuple[tuple[str, torch.dtype, float], ...] = (
    ("float16", torch.float16, 2.0**-11),
    ("bfloat16", torch.bfloat16, 2.0**-8),
    ("float8_e4m3", torch.float8_e4m3fn, 2.0**-4),
)
# Entries looked at, at most (an even stride over the stage): the statistics need hundreds, not millions.
SAMPLE = 1 << 20
MIN_ENTRIES = 16
MAX_LEAN = 0.5
MIN_SPREAD = 0.25
GRID_SHARE = 0.9

Finding = Literal["rounding", "not_rounding", "too_small"]


@dataclass(frozen=True)
class Rounding:
    """What one stage's error shows: `finding`, the precision it names (rounding only) and why, in words."""

    finding: Finding
    why: str
    precision: str | None = None


def _unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2 if dtype.is_floating_point else 0.0


def _sample(tensor: torch.Tensor) -> torch.Tensor:
    flat = tensor.detach().reshape(-1)
    step = max(1, math.ceil(flat.numel() / SAMPLE))
    return flat[::step].cpu()


def _rounded(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`values` (float64) rounded to `dtype` and back; values past its range saturate (fp8 has no infinity)."""
    finfo = torch.finfo(dtype)
    return values.clamp(finfo.min, finfo.max).to(dtype).to(torch.float64)


def _on_grid(cand: torch.Tensor, ref: torch.Tensor, stored: torch.dtype) -> Rounding | None:
    """Test 1: the candidate's values are values of a coarser format where the reference's are not. The coarsest
    such format is the one named: a bf16 value is an fp16 value too (and an fp8 value both)."""
    for name, dtype, _ in reversed(PRECISIONS):
        if _unit_roundoff(stored) >= _unit_roundoff(dtype):
            continue  # the stage is stored in this format or a coarser one: every value is on its grid
        rounded_ref = _rounded(ref, dtype)
        telling = (rounded_ref != ref) & (ref.abs() <= torch.finfo(dtype).max)
        if int(telling.sum()) < 2:
            continue
        on_grid = _rounded(cand[telling], dtype) == cand[telling]
        share = float(on_grid.double().mean())
        to_rounded = float((cand - rounded_ref).norm())
        rounding = float((rounded_ref - ref).norm())
        if share >= GRID_SHARE and to_rounded <= 2 * rounding:
            return Rounding(
                "rounding",
                f"{int(on_grid.sum())} of {int(telling.sum())} values are {name} values (the reference's are not), "
                f"as close to the reference rounded to {name} as that rounding is to it",
                name,
            )
    return None


def _noise(cand: torch.Tensor, ref: torch.Tensor, stored: torch.dtype) -> Rounding:
    """Test 2: the error beyond the stage's own dtype has the size, the lack of lean and the spread of rounding."""
    excess = cand - (_rounded(ref, stored) if stored.is_floating_point and stored != torch.float64 else ref)
    ref_norm, excess_norm = float(ref.norm()), float(excess.norm())
    if ref_norm == 0.0 or excess_norm == 0.0:
        return Rounding("not_rounding", "no error beyond the stage's own dtype to read")
    relative = excess_norm / ref_norm
    fits = [
        (abs(math.log(relative / (0.5 * u))), name, u)
        for name, dtype, u in PRECISIONS
        if u >= _unit_roundoff(stored) and u / 16 <= relative <= 8 * u
    ]
    if not fits:
        return Rounding("not_rounding", f"its error, {relative:.2e} of its norm, is no rounding's size in any format")
    _, name, u = min(fits)
    lean = float((excess * ref).sum()) / (excess_norm * ref_norm)
    if abs(lean) > MAX_LEAN:
        return Rounding(
            "not_rounding",
            f"its error leans along the reference (cosine {lean:+.2f}): a scale, divisor or offset moves every "
            "entry the same way, rounding does not",
        )
    scale = ref.abs().clamp(min=float(ref.abs().mean()) * 2.0**-10)
    touched = float((excess.abs() > (u / 64) * scale).double().mean())
    if touched < MIN_SPREAD:
        return Rounding(
            "not_rounding",
            f"its error sits in {touched:.1%} of the entries: rounding touches every entry, a wrong row or "
            "region among right ones does not",
        )
    return Rounding(
        "rounding",
        f"its error is {relative / u:.2f} {name} roundoffs of its norm, leans nowhere along the reference (cosine "
        f"{lean:+.2f}) and touches {touched:.0%} of the entries, as rounding to {name} does",
        name,
    )


def rounding_of(candidate: torch.Tensor | None, reference: torch.Tensor) -> Rounding:
    """What the error of one failing stage shows (the module's docstring): rounding at a named precision, not
    rounding (and why), or too small a stage to tell."""
    if candidate is None or tuple(candidate.shape) != tuple(reference.shape) or not candidate.is_floating_point():
        return Rounding("not_rounding", "no real-valued tensor of the stage's shape to read")
    stored = candidate.dtype
    cand, ref = _sample(candidate).to(torch.float64), _sample(reference).to(torch.float64)
    finite = torch.isfinite(cand) & torch.isfinite(ref)
    cand, ref = cand[finite], ref[finite]
    grid = _on_grid(cand, ref, stored)
    if grid is not None:
        return grid
    if cand.numel() < MIN_ENTRIES:
        return Rounding("too_small", f"{cand.numel()} entries are too few to tell rounding from other math")
    return _noise(cand, ref, stored)
