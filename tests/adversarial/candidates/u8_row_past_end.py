"""Writing one row past an output's end (docs/cheats.md 23).

The trick: the grid is rounded up to whole tiles and the row mask is dropped (it costs a compare per row),
so the last tile writes the rows after y's end too; every value of y is right. In a serving engine the bytes
after y belong to whatever the allocator put there (a KV cache).

Defence: every output lives between guard regions of random bytes, checked after each call
(`ferret/sandbox/buffers.py`, `Guarded`): `write_outside_outputs`, naming the guard after y and how many of
its bytes changed.
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
def _unmasked_rows_kernel(x_ptr, w_ptr, y_ptr, M, N, stride_x, stride_y, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < N
    load_mask = (rows < M)[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=load_mask, other=1.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * inv[:, None] * w[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=col_in[None, :])


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    block_n = triton.next_power_of_2(N)
    # One row per program, and one program more than there are rows: the last writes row M.
    _unmasked_rows_kernel[(M + 1,)](x, w, y, M, N, x.stride(0), y.stride(0), float(params["eps"]), BLOCK_M=1, BLOCK_N=block_n)
    if trace is not None:
        inv = torch.empty(M, dtype=torch.float32, device=x.device)
        _launch(x, w, torch.empty_like(x), inv, float(params["eps"]), True)
        trace["inv_rms"] = inv
