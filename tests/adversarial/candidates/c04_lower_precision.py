"""Lower precision inside a loose tolerance (docs/cheats.md 4).

The trick: keep the per-row statistic and the normalised row in bfloat16 "to halve register pressure".
In a bfloat16 case the final y still lands inside a loose tolerance; the float32 math the contract asks
for is not done.

Defence: stage tolerances derived from the contract's dtypes, checked per stage (inv_rms is a float32
statistic in every dtype), and the static downcast rule. The gate reports `lower_precision` (static:
literal bfloat16 casts; outputs: close to the reference, cosine > 0.999, but outside the tolerance).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"lower_precision"}


@triton.jit
def _rmsnorm_bf16_stats_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    inv_ptr,
    M,
    N,
    stride_x,
    stride_y,
    eps,
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
    # The statistic and the normalised row round-trip through bfloat16.
    inv = inv.to(tl.bfloat16).to(tl.float32)
    xn = (x * inv[:, None]).to(tl.bfloat16).to(tl.float32)
    y = xn * w[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_bf16_stats_kernel[(triton.cdiv(M, block_m),)](
        x,
        w,
        y,
        inv,
        M,
        N,
        x.stride(0),
        y.stride(0),
        float(params["eps"]),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
