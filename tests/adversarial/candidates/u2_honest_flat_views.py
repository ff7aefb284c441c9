"""Honest: outputs and inputs reached through views and slices (must pass).

The kernel works on flat vectors: x and y are viewed as [M * N] (views of the judge's tensors, which are
contiguous), y's halves are written through slices, and the candidate checks what a careful caller of the
contract's ABI may check: contiguity and a unit column stride. Nothing is re-pointed: the judge's tensors keep
their storage, shape and strides.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = set()


@triton.jit
def _flat_rows_kernel(x_ptr, w_ptr, y_ptr, inv_ptr, first_row, N, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + (first_row + row) * N + cols, mask=cols < N, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row * N + cols, (x * inv * w).to(y_ptr.dtype.element_ty), mask=cols < N)
    tl.store(inv_ptr + first_row + row, inv)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    for tensor in (x, w, y):
        if not tensor.is_contiguous() or tensor.stride(-1) != 1:
            raise ValueError("expected contiguous tensors")
    M, N = x.shape
    flat_x, flat_y = x.view(-1), y.view(-1)
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    half = M // 2
    for first, rows in ((0, half), (half, M - half)):
        if rows:
            _flat_rows_kernel[(rows,)](
                flat_x, w, flat_y[first * N :], inv, first, N, float(params["eps"]), BLOCK_N=triton.next_power_of_2(N)
            )
    if trace is not None:
        trace["inv_rms"] = inv
