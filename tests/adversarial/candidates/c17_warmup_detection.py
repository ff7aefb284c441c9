"""Detecting the warm-up (docs/cheats.md 17).

The trick: a harness calls the kernel once or a few times to warm up and checks that output, then
times many more calls. The candidate counts calls per shape: the first call of a shape runs the careful
float32 kernel, every later call a cheaper one that keeps the row statistic in bfloat16.

Defence: fixed counts, phases that look alike, every call's output kept and compared bitwise
(determinism over repeats, traced run equal to the fast path). The gate reports `warmup_detection`
(repeated calls on identical inputs gave different bytes; static: a module-level call counter).
"""

from __future__ import annotations

from collections import Counter

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"warmup_detection"}

_CALLS = Counter()


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
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    CHEAP_STATS: tl.constexpr,
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
    if CHEAP_STATS:
        inv = inv.to(tl.bfloat16).to(tl.float32)
    tl.store(
        y_ptr + rows64[:, None] * stride_y + cols[None, :], (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask
    )
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    key = (M, N, str(x.dtype))
    _CALLS[key] += 1
    warming_up = _CALLS[key] == 1
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
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
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        CHEAP_STATS=not warming_up,
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
