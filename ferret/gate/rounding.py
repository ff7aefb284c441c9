"""Whether a stage's error has the pattern of rounding at a named precision, so that `lower_precision` is said
only where that evidence holds (`ferret/gate/detect.py`). Small size and a kept direction are not enough: a wrong
divisor, a wrong scale or one wrong row among many right ones is as small and keeps the direction, and it is
different math.

Two tests, either of which is evidence of a cut at precision p:
1. **On p's grid**: the candidate's values (stored in a finer dtype) are values of p, where the reference's are
   not (a value that underflows to zero is on every grid: it tells nothing), enough of them that chance cannot
   put them there (a bf16 value is an fp8 value one time in 16: four of them, not two), and the candidate is as
   close to the reference rounded to p as that rounding is to the reference: the stage, or what it was computed
   from last, was rounded to p.
2. **Rounding noise of p's size**: the error beyond the stage's own dtype (candidate minus the reference rounded
   to that dtype) is between 1/16 and 8 of p's unit roundoff relative to the stage's norm, it does not lean along
   the reference (|cosine(error, reference)| <= 1/2: a scale error or a wrong divisor moves every entry the same
   way, cosine 1), nor does its sign (rounding to nearest errs either way alike, row by row where a statistic
   rounded per row moves a whole row one way: a dropped term of one sign, whose size varies row to row, keeps a
   cosine near 1/2 but errs one way in every row), it touches at least a quarter of the entries and half of
   those that rounding the reference to p would touch, and its middle row (along the last dimension) has at
   least half the stage's relative error (rounding touches every entry and every row alike; a scale or a bug
   on some rows among right ones does not: its cosine with the whole stage is diluted by the right rows, its
   middle row is right).
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
# Bits of evidence the on-grid values must carry against chance: a value of a finer format lands on p's grid by
# chance one time in 2^(its mantissa bits - p's), so this many bits need that many values.
GRID_BITS = 16
# Bits of evidence against chance that the error's sign along the reference is not a fair coin's (two-sided),
# and the share of one sign it takes besides: over many rows a rounding slightly biased one way (a running sum
# that stagnates) is significant and still rounding; a dropped term of one sign moves nearly every row one way.
SIGN_BITS = 10
MIN_SIGN_SHARE = 0.75
# Rounding gives each row about the stage's relative error (a statistic rounded per row: a factor below p's
# roundoff on every row); a bug on some rows leaves the middle row with only the honest error.
MIN_ROW_SHARE = 0.5

Finding = Literal["rounding", "not_rounding", "too_small"]


@dataclass(frozen=True)
class Rounding:
    """What one stage's error shows: `finding`, the precision it names (rounding only) and why, in words."""

    finding: Finding
    why: str
    precision: str | None = None


def _unit_roundoff(dtype: torch.dtype) -> float:
    return torch.finfo(dtype).eps / 2 if dtype.is_floating_point else 0.0


def _rows(tensor: torch.Tensor) -> torch.Tensor:
    """The stage as float64 rows along its last dimension (a 1-D stage: one row), an even stride of its rows where
    it has more than SAMPLE entries (an even stride of its entries where one row has more)."""
    flat = tensor.detach()
    width = flat.shape[-1] if flat.dim() >= 2 and flat.shape[-1] > 0 else max(flat.numel(), 1)
    rows = flat.reshape(-1, width)
    if width > SAMPLE:
        return rows.reshape(1, -1)[:, :: math.ceil(rows.numel() / SAMPLE)].cpu().to(torch.float64)
    return rows[:: max(1, math.ceil(rows.numel() / SAMPLE))].cpu().to(torch.float64)


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
        # an entry that underflows to zero tells nothing: a zero is on every grid
        telling = (rounded_ref != ref) & (ref.abs() <= torch.finfo(dtype).max) & (rounded_ref != 0)
        if int(telling.sum()) < 2:
            continue
        on_grid = _rounded(cand[telling], dtype) == cand[telling]
        share = float(on_grid.double().mean())
        to_rounded = float((cand - rounded_ref).norm())
        rounding = float((rounded_ref - ref).norm())
        needed = math.ceil(GRID_BITS / math.log2(_unit_roundoff(dtype) / _unit_roundoff(stored)))
        if share >= GRID_SHARE and int(on_grid.sum()) >= needed and to_rounded <= 2 * rounding:
            return Rounding(
                "rounding",
                f"{int(on_grid.sum())} of {int(telling.sum())} values are {name} values (the reference's are not), "
                f"as close to the reference rounded to {name} as that rounding is to it",
                name,
            )
    return None


def _excess(cand: torch.Tensor, ref: torch.Tensor, stored: torch.dtype) -> torch.Tensor:
    """The error beyond the stage's own dtype: the candidate minus the reference rounded to that dtype."""
    return cand - (_rounded(ref, stored) if stored.is_floating_point and stored != torch.float64 else ref)


def _middle_row(cand_rows: torch.Tensor, ref_rows: torch.Tensor, stored: torch.dtype) -> float | None:
    """The middle row's relative error beyond the stage's dtype (the lower of two: one wrong row of two is no
    spread), as a share of the stage's; None where fewer than two rows have a norm to compare against."""
    excess = _excess(cand_rows, ref_rows, stored)
    norms = ref_rows.norm(dim=1)
    kept = norms > 0
    if int(kept.sum()) < 2 or float(ref_rows.norm()) == 0.0 or float(excess.norm()) == 0.0:
        return None
    per_row = excess[kept].norm(dim=1) / norms[kept]
    return float(per_row.median()) / (float(excess.norm()) / float(ref_rows.norm()))


def _leans_per_row(cand_rows: torch.Tensor, ref_rows: torch.Tensor, stored: torch.dtype) -> tuple[torch.Tensor, str]:
    """Each row's error along its reference row (each entry's, for a stage of one row): the units whose signs
    rounding to nearest leaves to chance, and what they are called."""
    along = _excess(cand_rows, ref_rows, stored) * ref_rows
    return (along.sum(dim=1), "rows") if along.shape[0] >= 2 else (along.reshape(-1), "entries")


def _one_sign(leans: torch.Tensor, unit: str) -> str | None:
    """Why the error errs one way along the reference in more rows than rounding to nearest could by chance (a
    sign test, SIGN_BITS of evidence); None where it does not."""
    along = leans[leans != 0]
    total, same = along.numel(), int((along > 0).sum())
    most = max(same, total - same)
    if total == 0 or most < MIN_SIGN_SHARE * total:
        return None
    # two-sided binomial tail P(one sign >= most) under a fair coin, in log space (thousands of rows overflow floats)
    counts = torch.arange(most, total + 1, dtype=torch.float64)
    fair = torch.distributions.Binomial(total, probs=torch.tensor(0.5, dtype=torch.float64))
    tail = min(1.0, 2 * math.exp(float(torch.logsumexp(fair.log_prob(counts), dim=0))))
    if tail >= 2.0**-SIGN_BITS:
        return None
    way = "away from zero" if most == same else "toward zero"
    return (
        f"its error moves {most} of {total} {unit} {way}: rounding errs either way alike "
        f"(chance gives this one time in {1 / tail:.3g}), a dropped or added term of one sign does not"
    )


def _noise(
    cand: torch.Tensor, ref: torch.Tensor, stored: torch.dtype, middle_row: float | None, leans: tuple[torch.Tensor, str]
) -> Rounding:
    """Test 2: the error beyond the stage's own dtype has the size, the lack of lean and the spread of rounding
    (`middle_row`: `_middle_row` of the stage; `leans`: `_leans_per_row`)."""
    excess = _excess(cand, ref, stored)
    ref_norm, excess_norm = float(ref.norm()), float(excess.norm())
    if ref_norm == 0.0 or excess_norm == 0.0:
        return Rounding("not_rounding", "no error beyond the stage's own dtype to read")
    relative = excess_norm / ref_norm
    fits = [
        (abs(math.log(relative / (0.5 * u))), name, u, dtype)
        for name, dtype, u in PRECISIONS
        if u >= _unit_roundoff(stored) and u / 16 <= relative <= 8 * u
    ]
    if not fits:
        return Rounding("not_rounding", f"its error, {relative:.2e} of its norm, is no rounding's size in any format")
    _, name, u, fmt = min(fits)
    lean = float((excess * ref).sum()) / (excess_norm * ref_norm)
    if abs(lean) > MAX_LEAN:
        return Rounding(
            "not_rounding",
            f"its error leans along the reference (cosine {lean:+.2f}): a scale, divisor or offset moves every "
            "entry the same way, rounding does not",
        )
    one_way = _one_sign(*leans)
    if one_way is not None:
        return Rounding("not_rounding", one_way)
    scale = ref.abs().clamp(min=float(ref.abs().mean()) * 2.0**-10)
    touched = float((excess.abs() > (u / 64) * scale).double().mean())
    # What rounding the reference to that format would touch itself: an error touching far fewer entries is no
    # such rounding (a wrong angle on some rows touches those rows alone).
    would = float((_excess(_rounded(ref, fmt), ref, stored).abs() > (u / 64) * scale).double().mean())
    if touched < max(MIN_SPREAD, would / 2):
        return Rounding(
            "not_rounding",
            f"its error sits in {touched:.1%} of the entries, where rounding to {name} would touch {would:.0%}: "
            "rounding touches every entry, a wrong row or region among right ones does not",
        )
    if middle_row is not None and middle_row < MIN_ROW_SHARE:
        return Rounding(
            "not_rounding",
            f"its middle row has {middle_row:.0%} of the stage's relative error: rounding gives every row its share, "
            "a scale or a bug on some rows among right ones does not",
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
    cand_rows, ref_rows = _rows(candidate), _rows(reference)
    finite = torch.isfinite(cand_rows) & torch.isfinite(ref_rows)
    cand, ref = cand_rows[finite], ref_rows[finite]
    grid = _on_grid(cand, ref, stored)
    if grid is not None:
        return grid
    if cand.numel() < MIN_ENTRIES:
        return Rounding("too_small", f"{cand.numel()} entries are too few to tell rounding from other math")
    # a non-finite entry counts as zero in both for the rows' errors (the flat statistics leave it out)
    zero = torch.zeros((), dtype=torch.float64)
    cand_kept, ref_kept = torch.where(finite, cand_rows, zero), torch.where(finite, ref_rows, zero)
    middle = _middle_row(cand_kept, ref_kept, stored)
    return _noise(cand, ref, stored, middle, _leans_per_row(cand_kept, ref_kept, stored))
