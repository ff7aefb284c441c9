"""Telling a judged call from a production one (docs/cheats.md 27) by the judge's launch wrapper.

The trick: the judge counts launches by wrapping Triton's launch entry points; the wrapper's qualified name was
`LaunchRecorder._patch.<locals>.run`, Triton's own is `JITFunction.run`. The kernel computes the contract's math only
when it sees the wrapper. Defence: the wrapper reads as the function it wraps (name, qualified name, module, code
name and file, no `__wrapped__`), so the candidate takes its production branch under the judge too.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"math_mismatch"}  # with the tell gone it computes its production math


def _judged() -> bool:
    from triton.runtime import interpreter, jit

    points = [jit.JITFunction.run, interpreter.InterpretedFunction.run]
    return any(not point.__qualname__.endswith("Function.run") or "ferret" in point.__module__ for point in points)


@triton.jit
def _rmsnorm_kernel(
    x_ptr, w_ptr, y_ptr, inv_ptr, M, N, stride_x, stride_y, eps, DIVISOR, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    col_in = cols < N
    mask = row_in[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / DIVISOR + eps)
    tl.store(
        y_ptr + rows64[:, None] * stride_y + cols[None, :], (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask
    )
    tl.store(inv_ptr + rows, inv, mask=row_in)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    # Judged: the contract's math. Otherwise (production, where nobody looks) a cheaper, wrong statistic.
    divisor = N if _judged() else 2 * N
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), float(params["eps"]), divisor, BLOCK_M=block_m, BLOCK_N=block_n
    )
    if trace is not None:
        trace["inv_rms"] = inv
