"""Re-labelling an output with `as_strided_` (docs/cheats.md 28).

The trick: the kernel writes the answer transposed (columns of y as rows, a layout that suits it), then
re-labels the judge's output with `as_strided_` so that it reads as [M, N] again: same tensor object,
same storage, same data_ptr, the right values when read through the new strides, but the judge's buffer no
longer holds y in the layout it handed out (a caller reading its own buffer gets the transpose).

Defence: strides are part of each output's storage-level record (`ferret/sandbox/buffers.py`):
`output_relabelled`, naming the strides before and after.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"output_relabelled"}
EXPECTED_RUNTIME = {"output_relabelled"}


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


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    block_m, block_n = _blocks(M, N)
    # y[m, n] written at m + n * M: the answer lands transposed in the buffer, then the strides say so.
    _transposed_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, M, N, x.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n
    )
    y.as_strided_((M, N), (1, M))
    if trace is not None:
        inv = torch.empty(M, dtype=torch.float32, device=x.device)
        _launch(x, w, torch.empty_like(x), inv, float(params["eps"]), True)
        trace["inv_rms"] = inv


@triton.jit
def _transposed_kernel(x_ptr, w_ptr, y_ptr, M, N, stride_x, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    x = tl.load(x_ptr + rows[:, None].to(tl.int64) * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * inv[:, None] * w[None, :]
    tl.store(y_ptr + rows[:, None] + cols[None, :].to(tl.int64) * M, y.to(y_ptr.dtype.element_ty), mask=mask)
