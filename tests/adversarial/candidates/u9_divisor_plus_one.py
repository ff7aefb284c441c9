"""Wrong math the size of rounding: the mean of squares divided by N + 1.

The trick: an off-by-one in the divisor ("the padded lane counts too"). On rows of thousands the statistic is off
by 1/(2N), far below a bf16 roundoff, direction kept; a label reading only size and direction called it
`lower_precision`. Every row's statistic is too small the same way (the error leans along the reference), so the
gate names `math_mismatch`, and says why it is not a precision cut.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"math_mismatch"}
NOT_NAMED = {"lower_precision"}


@triton.jit
def _rmsnorm_off_by_one_kernel(
    x_ptr, w_ptr, y_ptr, inv_ptr, M, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr, STORE_INV: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / (N + 1) + eps)
    y = x * inv * w
    tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + row, inv)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    _rmsnorm_off_by_one_kernel[(M,)](
        x,
        w,
        y,
        inv,
        M,
        N,
        x.stride(0),
        y.stride(0),
        float(params["eps"]),
        BLOCK_N=triton.next_power_of_2(N),
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
