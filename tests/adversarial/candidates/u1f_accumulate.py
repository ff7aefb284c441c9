"""Accumulating into the output (docs/cheats.md 1, 6).

The trick: y += x * inv_rms * weight, as if the output arrived zeroed (a caller that zeroes its buffers, a
harness that pre-fills with zeros): right on such a buffer, wrong on any other.

Defence: the first call of every variant is pre-filled with NaN, so the sum is NaN where the reference is
finite: `unwritten_output`; the later calls' other pre-fills (random values, a stale answer) give other bytes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"unwritten_output"}


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
def _reading_kernel(
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
    MODE: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    mask = row_in[:, None] & (cols < N)[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * inv[:, None] * w[None, :]
    out = y_ptr + rows64[:, None] * stride_y + cols[None, :]
    old = tl.load(out, mask=mask, other=0.0).to(tl.float32)
    if MODE == 0:  # write only where the output is still NaN
        tl.store(out, y.to(y_ptr.dtype.element_ty), mask=mask & (old != old))
    elif MODE == 1:  # leave a tile alone when the output already holds a number there
        first = tl.load(y_ptr + rows64 * stride_y, mask=row_in, other=float("nan")).to(tl.float32)
        tl.store(out, y.to(y_ptr.dtype.element_ty), mask=mask & (first != first)[:, None])
    else:  # accumulate into the output
        tl.store(out, (old + y).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(inv_ptr + rows, inv, mask=row_in)


def _run(inputs, outputs, params, trace, mode):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_m, block_n = _blocks(M, N)
    _reading_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n, MODE=mode
    )
    if trace is not None:
        trace["inv_rms"] = inv


def run(inputs, outputs, params, trace=None):
    _run(inputs, outputs, params, trace, 2)
