"""The row statistic finished on the host, one `.item()` per row (docs/cheats.md 31).

The trick: a real Triton kernel sums each row's squares into a float32 buffer; the launcher reads every sum with
`.item()`, finishes the statistic with `math.sqrt` on the host (where it could cut any corner unseen) and hands the
inverse RMS to a second Triton kernel that scales the row. Both kernels launch, no torch compute op runs, and the
scan allows `.item()` (launchers read integer lengths with it).

Defence that should name it: the host-numerics watch, which tells floating-point data from integer metadata
(`host_numerics`, at run time).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"host_numerics"}
EXPECTED_RUNTIME = {"host_numerics"}


@triton.jit
def _sum_squares(x_ptr, out_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < N, other=0.0).to(tl.float32)
    tl.store(out_ptr + row, tl.sum(x * x, axis=0))


@triton.jit
def _scale(x_ptr, w_ptr, inv_ptr, y_ptr, N, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < N
    x = tl.load(x_ptr + row * stride + cols, mask=keep, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=keep, other=0.0).to(tl.float32)
    inv = tl.load(inv_ptr + row)
    tl.store(y_ptr + row * stride + cols, (x * inv * w).to(y_ptr.dtype.element_ty), mask=keep)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    block = triton.next_power_of_2(N)
    sums = torch.empty(M, dtype=torch.float32, device=x.device)
    _sum_squares[(M,)](x, sums, N, x.stride(0), BLOCK=block)
    eps = float(params["eps"])
    inv = torch.tensor([1.0 / math.sqrt(sums[i].item() / N + eps) for i in range(M)], dtype=torch.float32, device=x.device)
    _scale[(M,)](x, w, inv, y, N, x.stride(0), BLOCK=block)
    if trace is not None:
        trace["inv_rms"] = inv
