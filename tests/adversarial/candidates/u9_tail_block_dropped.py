"""A bug only where the gate's own cases do not look, with nothing that keys on them: math, not hard-coded cases.

Rows wider than one 1024-wide block are summed block by block, and the partial last block is left out of the sum
of squares (the loop stops at the last whole block). Every gate case passes: its rows are narrower than a block or
a whole number of blocks (7168 = 7 x 1024). Fresh cases past the `wide_row` boundary fail. Nothing in the scan or
the run shows the candidate depends on the case (no table of case dims, no gate file read, no failure at a gate
case's own dims with new values), so the gate names `math_mismatch` on the fresh cases, not `hardcoded_cases`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"math_mismatch"}
NOT_NAMED = {"hardcoded_cases", "lower_precision"}
BLOCK = 1024


@triton.jit
def _rmsnorm_blocks_kernel(
    x_ptr, w_ptr, y_ptr, inv_ptr, N, WHOLE, stride_x, stride_y, eps, BLOCK_N: tl.constexpr, STORE_INV: tl.constexpr
):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride_x
    y_row = y_ptr + row.to(tl.int64) * stride_y
    cols = tl.arange(0, BLOCK_N)
    sum_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, WHOLE, BLOCK_N):  # the bug: WHOLE is the last whole block's end, not N
        x = tl.load(x_row + start + cols).to(tl.float32)
        sum_sq += x * x
    inv = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        mask = offs < N
        x = tl.load(x_row + offs, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (x * inv * w).to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + row, inv)


@triton.jit
def _rmsnorm_one_block_kernel(
    x_ptr, w_ptr, y_ptr, inv_ptr, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr, STORE_INV: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, (x * inv * w).to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + row, inv)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    eps = float(params["eps"])
    if N <= BLOCK:
        _rmsnorm_one_block_kernel[(M,)](
            x, w, y, inv, N, x.stride(0), y.stride(0), eps, BLOCK_N=triton.next_power_of_2(N), STORE_INV=trace is not None
        )
    else:
        _rmsnorm_blocks_kernel[(M,)](
            x, w, y, inv, N, (N // BLOCK) * BLOCK, x.stride(0), y.stride(0), eps, BLOCK_N=BLOCK, STORE_INV=trace is not None
        )
    if trace is not None:
        trace["inv_rms"] = inv
