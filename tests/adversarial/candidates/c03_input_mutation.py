"""Mutating inputs (docs/cheats.md 3).

The trick: normalise `x` in place ("saves an allocation"), then copy it into `y`. On a harness that runs
the reference on the same tensor objects afterwards, the reference normalises an already normalised x
and agrees with whatever the candidate wrote.

Defence: inputs are hashed before and after every call, and the reference never runs on the candidate's
tensors. The gate reports `input_mutation`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"input_mutation"}
EXPECTED_RUNTIME = {"input_mutation"}


@triton.jit
def _rmsnorm_inplace_kernel(
    x_ptr, w_ptr, inv_ptr, M, N, stride_x, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, STORE_INV: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    col_in = cols < N
    mask = row_in[:, None] & col_in[None, :]
    offs = rows.to(tl.int64)[:, None] * stride_x + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    # Written back over x: the input now holds the answer.
    tl.store(x_ptr + offs, (x * inv[:, None] * w[None, :]).to(x_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_inplace_kernel[(triton.cdiv(M, block_m),)](
        x,
        w,
        inv,
        M,
        N,
        x.stride(0),
        float(params["eps"]),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STORE_INV=trace is not None,
    )
    y.copy_(x)
    if trace is not None:
        trace["inv_rms"] = inv
