"""Constant or zero output (docs/cheats.md 2).

The trick: where a benchmark's true output is tiny (or its checker uses an absolute tolerance), writing
zeros passes. This candidate's kernel is a real launch over every row, but it stores 0 for `y` and 1 for
the inverse RMS, "because the normalised output of a zero-initialised weight is zero".

Defence: tolerances scaled to the output's magnitude and inputs that vary. The gate reports
`constant_output` (every entry of y is the same while the reference varies).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"constant_output"}


@triton.jit
def _rmsnorm_zero_kernel(y_ptr, inv_ptr, M, N, stride_y, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STORE_INV: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    mask = row_in[:, None] & (cols < N)[None, :]
    zero = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    tl.store(y_ptr + rows.to(tl.int64)[:, None] * stride_y + cols[None, :], zero.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + rows, tl.full([BLOCK_M], 1.0, tl.float32), mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, y = inputs["x"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_zero_kernel[(triton.cdiv(M, block_m),)](
        y,
        inv,
        M,
        N,
        y.stride(0),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
