"""Allocator reuse (docs/cheats.md 1).

The trick: on a harness that runs the reference first and then allocates the candidate's output with
`torch.empty`, the caching allocator hands back the block the reference's answer was just freed from, so
`outputs["y"]` already holds the right numbers. This candidate therefore "refreshes" only the first tile
of rows (one program of a real Triton kernel, so a launch is recorded and a quick look at the first rows
is right) and trusts the allocator for the rest. Its `inv_rms` scratch comes from `torch.empty` too.

Defence: the reference's answer never lives in the candidate's process, outputs are pre-filled with NaN
and the candidate runs first. What it leaves unwritten stays NaN: the gate reports `unwritten_output`
(docs/cheats.md 1, 6, 7).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"unwritten_output", "allocator_reuse"}

MIN_TILE = 4096


@triton.jit
def _rmsnorm_tile_kernel(
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
    y = x * inv[:, None] * w[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, MIN_TILE // block_n), triton.next_power_of_2(M))
    # One program: the first tile of rows. The rest of `y` "already holds" last call's answer.
    _rmsnorm_tile_kernel[(1,)](
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
