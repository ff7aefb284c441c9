"""Hard-coded shapes of the test cases (docs/cheats.md 5).

The trick: the benchmark's shapes are known, so each (M, N) it uses gets a hand-tuned launch with the
exact row width; anything else goes to a "generic" path that divides the sum of squares by the padded
(power-of-two) block width instead of N. Every published case passes; any other width is wrong.

Defence: fresh shapes and seeds drawn privately at check time, plus the static rule on comparisons and
tables keyed by the contract's case dimensions. The gate reports `hardcoded_cases` (static: the table;
outputs: every frozen case passes while a fresh private case fails).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"hardcoded_cases"}

# (M, N) of the benchmark's cases -> (BLOCK_M, num_warps), tuned per case.
_TUNED = {
    (16, 512): (8, 4),
    (3, 1000): (4, 4),
    (2, 7168): (1, 8),
    (1, 1): (1, 1),
    (4, 300): (4, 4),
    (4, 257): (4, 4),
    (130, 17): (128, 4),
}


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    inv_ptr,
    M,
    N,
    stride_x,
    stride_y,
    eps,
    DIVISOR,
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
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / DIVISOR + eps)
    y = x * inv[:, None] * w[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    tuned = _TUNED.get((M, N))
    if tuned is not None:
        block_m, warps = tuned
        divisor = N
    else:
        # Generic path: the padded width stands in for N.
        block_m, warps = min(max(1, 4096 // block_n), triton.next_power_of_2(M)), 4
        divisor = block_n
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x,
        w,
        y,
        inv,
        M,
        N,
        x.stride(0),
        y.stride(0),
        float(params["eps"]),
        float(divisor),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STORE_INV=trace is not None,
        num_warps=warps,
    )
    if trace is not None:
        trace["inv_rms"] = inv
