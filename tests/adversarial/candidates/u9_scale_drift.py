"""Wrong math the size of rounding: a scale error, not a precision cut.

The trick: every output is scaled by (1 + 2^-8), "to compensate the bias of the bf16 store". The error is a
bf16 roundoff in size and keeps the direction (cosine 1), which a label reading only size and direction called
`lower_precision`; but it leans wholly along the reference (every entry moved the same way), which rounding never
does. The gate names it `math_mismatch` and says why it is not a precision cut.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"math_mismatch"}
NOT_NAMED = {"lower_precision"}
SCALE = 1.0 + 2.0**-8


@triton.jit
def _rmsnorm_scaled_kernel(
    x_ptr, w_ptr, y_ptr, inv_ptr, M, N, stride_x, stride_y, eps, scale, BLOCK_N: tl.constexpr, STORE_INV: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    y = x * inv * w * scale
    tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + row, inv)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    _rmsnorm_scaled_kernel[(M,)](
        x,
        w,
        y,
        inv,
        M,
        N,
        x.stride(0),
        y.stride(0),
        float(params["eps"]),
        SCALE,
        BLOCK_N=triton.next_power_of_2(N),
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
