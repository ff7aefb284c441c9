"""The FP8 cache row's quantization in float64: FlashMLA's layout, the contract's rounding, and where it may tie.

The appended token's 512 latent values are the bf16 c_kv (the stage a serving stack's layernorm writes), cut in
4 blocks of 128; each block's scale is amax / 448 in float32 (e4m3's largest finite value: the block's largest
magnitude maps to it), and each code is value / scale (a float32 division, correctly rounded) rounded to e4m3 to
nearest, ties to even (a block of zeros: scale 0, codes 0). Every other step is exact here, so the codes are the contract's; a faithful
kernel computes the same codes but where its own arithmetic may land on the other side of a rounding tie:

- e4m3's: value / scale within 2^-20 of a midpoint between two e4m3 values (a GPU's approximate float32 division,
  or a multiply by the scale's reciprocal, is off by a few units of 2^-24);
- bf16's: a kernel's float32 layernorm gives c_kv within ~1e-6 of the float64 one, so where the float64 value lies
  within 2^-16 of a bf16 midpoint the kernel's bf16 c_kv may be the other neighbour; its code may then differ (and
  where it is the block's largest magnitude, so may the scale, and every code of the block near an e4m3 midpoint).

There, and only there, one e4m3 unit is allowed (`allowance`); everywhere else the code is exact. A block's scale
may be one bf16 unit off (2^-7 of it) where its largest value lies at a bf16 tie, else two float32 units (a kernel
may multiply by 1 / 448, or divide approximately).
"""
from __future__ import annotations

import torch

F64 = torch.float64
E4M3_MAX = 448.0
E4M3_MANTISSA_BITS = 3
E4M3_MIN_EXPONENT = -6  # the smallest normal's exponent; below it the grid is the subnormals' 2^-9
BF16_MANTISSA_BITS = 7
BLOCK = 128
# How near a midpoint a faithful kernel's arithmetic may cross it (relative to the value): its division's few
# float32 units (2^-20), and its layernorm's float32 error against a bf16 rounding tie (2^-16).
E4M3_TIE = 2.0**-20
BF16_TIE = 2.0**-16
# A scale off by one bf16 unit of the block's largest value (2^-7 relative at most) moves every value / scale so far.
SCALE_SHIFT = 2.0**-7
# amax / 448 as a kernel may compute it (times the reciprocal, or a GPU's approximate division): two float32 units.
SCALE_DIVISION = 2.0**-22


def _ulp(values: torch.Tensor, mantissa_bits: int, min_exponent: int | None = None) -> torch.Tensor:
    """The spacing of a format's grid at each value (float64): 2^(exponent - mantissa bits)."""
    magnitude = values.abs().clamp_min(torch.finfo(F64).tiny)
    exponent = torch.floor(torch.log2(magnitude))
    if min_exponent is not None:
        exponent = exponent.clamp_min(min_exponent)
    return torch.exp2(exponent - mantissa_bits)


def e4m3_ulp(values: torch.Tensor) -> torch.Tensor:
    """One e4m3 unit at each value (float64): the spacing of the normals, or the subnormals' 2^-9."""
    return _ulp(values, E4M3_MANTISSA_BITS, E4M3_MIN_EXPONENT)


def round_e4m3(values: torch.Tensor) -> torch.Tensor:
    """float64 values rounded to e4m3 (fn: no infinity), to nearest, ties to even, saturating at +-448."""
    ulp = e4m3_ulp(values)
    return (torch.round(values / ulp) * ulp).clamp(-E4M3_MAX, E4M3_MAX)


def _tie_distance(values: torch.Tensor, ulp: torch.Tensor) -> torch.Tensor:
    """How far each value lies from the nearest rounding midpoint of a grid of spacing `ulp`, relative to it."""
    steps = values.abs() / ulp
    return (steps - torch.floor(steps) - 0.5).abs() * ulp / values.abs().clamp_min(torch.finfo(F64).tiny)


def dequantize(codes: torch.Tensor, scales: torch.Tensor, block: int = BLOCK) -> torch.Tensor:
    """float64 values: each code times its block's scale (the last axis in blocks of `block`)."""
    return codes.to(F64) * scales.to(F64).repeat_interleave(block, dim=-1)


def _scales(bf16_values: torch.Tensor) -> torch.Tensor:
    """[..., blocks] float32 scales of bf16 values (float64, [..., blocks, BLOCK]): amax / 448, rounded to float32."""
    return (bf16_values.abs().amax(dim=-1) / E4M3_MAX).to(torch.float32).to(F64)


def _ratios(bf16_values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """value / scale as float32 divides them (correctly rounded), in float64: what the codes round."""
    divisor = torch.where(scales > 0, scales, torch.ones_like(scales)).unsqueeze(-1)
    return (bf16_values.to(torch.float32) / divisor.to(torch.float32)).to(F64)


def _codes(bf16_values: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    return round_e4m3(_ratios(bf16_values, scales))


def quantize_row(c_kv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(codes [B, 512] as float64 values of e4m3, scales [B, 4] float32 values in float64, the codes' allowance
    [B, 512]: one e4m3 unit where a faithful kernel may round the other way, else 0; the scales' allowance [B, 4]:
    a bf16 unit of the block's largest value where it lies at a bf16 rounding tie, else two float32 units) of the
    float64 c_kv [B, 512]."""
    shape = c_kv.shape
    exact = c_kv.to(F64).reshape(*shape[:-1], -1, BLOCK)
    rounded = exact.to(torch.bfloat16).to(F64)
    scales = _scales(rounded)
    codes = _codes(rounded, scales)
    ratio = _ratios(rounded, scales)
    ulp = e4m3_ulp(ratio)
    near_e4m3 = _tie_distance(ratio, ulp) <= E4M3_TIE
    near_bf16 = _tie_distance(exact, _ulp(rounded, BF16_MANTISSA_BITS)) <= BF16_TIE
    # The other bf16 neighbour a kernel may round to, and the code it gives.
    other = (2 * exact - rounded).to(torch.bfloat16).to(F64)
    flips = near_bf16 & (_codes(other, scales) != codes)
    # A block whose largest magnitude (or one a bf16 unit below it) may round the other way may get another scale.
    top = rounded.abs() >= rounded.abs().amax(dim=-1, keepdim=True) * (1 - SCALE_SHIFT)
    scale_may_shift = (near_bf16 & top).any(dim=-1, keepdim=True)
    shifted = scale_may_shift & (_tie_distance(ratio, ulp) <= SCALE_SHIFT)
    allowance = torch.where(near_e4m3 | flips | shifted, ulp, torch.zeros_like(ulp))
    scale_allowance = scales * torch.where(scale_may_shift.squeeze(-1), SCALE_SHIFT, SCALE_DIVISION)
    return codes.reshape(shape), scales, allowance.reshape(shape), scale_allowance
