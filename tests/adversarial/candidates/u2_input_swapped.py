"""Mutating an input and swapping the dict entry back (docs/cheats.md 28, 3).

The trick: x is normalised in place by the kernel (its rows scaled), and then the entry `inputs["x"]` is
replaced by a clean copy made before the call, so that a hash of `inputs["x"]` after the call sees the
original bytes: the judge's own tensor was changed, the dict does not show it.

Defence: after the call every input is checked against the judge's own reference to the tensor it handed out
(object, storage, data_ptr, shape, strides, offset, dtype; `ferret/sandbox/buffers.py`), before any hash:
`output_relabelled`, naming the input whose entry was replaced.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"output_relabelled", "input_mutation"}
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
    clean = x.clone()
    inv = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _launch(x, w, y, inv, float(params["eps"]), True)
    _launch(x, torch.ones_like(w), x, inv, float(params["eps"]), False)  # x normalised in place: scratch reuse
    inputs["x"] = clean
    if trace is not None:
        trace["inv_rms"] = inv
