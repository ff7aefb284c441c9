"""Writing into the memory before an input (docs/cheats.md 23).

The trick: the per-row statistic is kept for a later pass in the M elements just before x (where, in the
engine it was written against, the previous layer's activations lie and are dead by now), addressed through
x's own pointer rather than allocated. The values of y and of x are right: a hash of x does not change.

Defence: every input lives between guard regions of random bytes too, checked after each call
(`ferret/sandbox/buffers.py`): `write_outside_outputs`, naming the guard before x.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"write_outside_outputs"}
EXPECTED_RUNTIME = {"write_outside_outputs"}


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


def _blocks(M, N):
    block_n = triton.next_power_of_2(N)
    return min(max(1, 4096 // block_n), triton.next_power_of_2(M)), block_n


def _launch(x, w, y, inv, eps, store_inv):
    M, N = x.shape
    block_m, block_n = _blocks(M, N)
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), eps, BLOCK_M=block_m, BLOCK_N=block_n, STORE_INV=store_inv
    )


@triton.jit
def _stash_kernel(inv_ptr, x_ptr, M, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inv = tl.load(inv_ptr + rows, mask=rows < M)
    tl.store(x_ptr - M + rows, inv.to(x_ptr.dtype.element_ty), mask=rows < M)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M = x.shape[0]
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    _launch(x, w, y, inv, float(params["eps"]), True)
    _stash_kernel[(triton.cdiv(M, 256),)](inv, x, M, BLOCK=256)
    if trace is not None:
        trace["inv_rms"] = inv
