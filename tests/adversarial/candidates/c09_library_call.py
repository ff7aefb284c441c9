"""Calling the library (docs/cheats.md 9).

The trick: a Triton kernel for rows that fit one block, and a try/except that falls back to PyTorch
"until the long-row kernel is written" for everything else (here: rows wider than 4096, so the
DeepSeek-V3 hidden size of 7168 runs on PyTorch's own kernels).

Defence: the static ban list (torch compute, try/except fallbacks) plus interception of ATen compute ops
while the candidate runs. The gate reports `library_call` (static and runtime).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"library_call"}
EXPECTED_RUNTIME = {"library_call"}

MAX_FUSED_N = 4096


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
    tl.store(
        y_ptr + rows64[:, None] * stride_y + cols[None, :], (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask
    )
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def _triton(x, w, y, inv, eps, store_inv):
    M, N = x.shape
    block_n = triton.next_power_of_2(N)
    if block_n > MAX_FUSED_N:
        raise NotImplementedError("long rows: not written yet")
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
        eps,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STORE_INV=store_inv,
    )


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    eps = float(params["eps"])
    inv = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    try:
        _triton(x, w, y, inv, eps, trace is not None)
    except NotImplementedError:
        xf = x.float()
        inv = torch.rsqrt(xf.pow(2).mean(dim=-1) + eps)
        y.copy_(xf * inv[:, None] * w.float())
    if trace is not None:
        trace["inv_rms"] = inv
