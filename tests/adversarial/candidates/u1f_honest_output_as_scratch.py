"""Honest: the output used as scratch before its final value is written (must pass).

A first kernel writes x * weight into y, a second reads y back and scales it by inv_rms: the output is read,
but only after this call wrote it, so whatever it held before the call does not matter. A kernel like this
must pass whatever the judge pre-fills.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = set()


@triton.jit
def _weighted_kernel(x_ptr, w_ptr, y_ptr, M, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (x * w).to(y_ptr.dtype.element_ty), mask=cols < N)


@triton.jit
def _scale_kernel(x_ptr, w_ptr, y_ptr, inv_ptr, M, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    # Written by _weighted_kernel in this call: where it is x * w (NaN where x is), the result is x * inv * w.
    seen = tl.load(y_ptr + row * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    exact = tl.where(seen == seen, x * inv * w, seen)
    tl.store(y_ptr + row * N + cols, exact.to(y_ptr.dtype.element_ty), mask=cols < N)
    tl.store(inv_ptr + row, inv)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    assert x.is_contiguous() and y.is_contiguous()
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    _weighted_kernel[(M,)](x, w, y, M, N, BLOCK_N=block_n)
    _scale_kernel[(M,)](x, w, y, inv, M, N, float(params["eps"]), BLOCK_N=block_n)
    if trace is not None:
        trace["inv_rms"] = inv
