"""NaN as a wildcard (docs/cheats.md 7).

The trick: many checkers compare with `allclose(equal_nan=True)` or skip NaN positions. This candidate
computes the easy rows and stores NaN for every row whose magnitude is large ("overflow guard, as the
reference does for inf"), so the hard rows are never checked.

Defence: the gate owns the NaN/Inf policy: NaN in an output fails unless the reference has NaN at the
same place. The gate reports `unwritten_output` (catalogue 1, 6, 7: NaN where the reference is finite).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"unwritten_output", "nan_wildcard"}


@triton.jit
def _rmsnorm_guarded_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    inv_ptr,
    M,
    N,
    stride_x,
    stride_y,
    eps,
    LIMIT,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STORE_INV: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    col_in = cols < N
    mask = row_in[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * inv[:, None] * w[None, :]
    # "Overflow guard": rows with large entries are marked NaN instead of computed carefully.
    big = tl.max(tl.abs(x), axis=1) > LIMIT
    y = tl.where(big[:, None], float("nan"), y)
    tl.store(y_ptr + rows64[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + rows, tl.where(big, float("nan"), inv), mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_guarded_kernel[(triton.cdiv(M, block_m),)](
        x,
        w,
        y,
        inv,
        M,
        N,
        x.stride(0),
        y.stride(0),
        float(params["eps"]),
        8.0,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
