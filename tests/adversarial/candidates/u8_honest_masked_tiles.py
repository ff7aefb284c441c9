"""Honest: tiles far larger than the tensor, every access masked (must pass).

One program covers all rows with a power-of-two tile twice their count, where Triton's largest tile (2^20
elements) allows, else programs of as many rows as it does (a long row at 17 rows); the loads past the end of x
are masked (`other=0`) and so are the stores past the end of y. Guard regions around the judge's buffers see no
write.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = set()
MAX_TILE = 1 << 20  # Triton's largest tensor


@triton.jit
def _whole_kernel(x_ptr, w_ptr, y_ptr, inv_ptr, M, N, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    offs = rows.to(tl.int64)[:, None] * N + cols[None, :]
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=cols < N, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    tl.store(y_ptr + offs, (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(inv_ptr + rows, inv, mask=rows < M)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(triton.next_power_of_2(M) * 2, max(1, MAX_TILE // block_n))
    grid = (triton.cdiv(M, block_m),)
    _whole_kernel[grid](x, w, y, inv, M, N, float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n)
    if trace is not None:
        trace["inv_rms"] = inv
