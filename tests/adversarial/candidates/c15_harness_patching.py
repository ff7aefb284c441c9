"""Patching the timer or the statistics (docs/cheats.md 15).

The trick: the kernel is honest; the speed is not. At import the candidate replaces
`triton.testing.do_bench` (to report a tenth of the real time), `torch.cuda.Event.elapsed_time` and
`time.perf_counter` (to run slow), so a harness timing in the same interpreter reports a 10x speedup.

Defence: time in a process whose timing code the candidate cannot reach, and verify the identities of the
harness's functions after loading and after every call; the static scan bans writes to imported modules
and clock/benchmark imports. The gate reports `harness_patching` (static and runtime).
"""

from __future__ import annotations

import time

import torch
import triton
import triton.language as tl
import triton.testing

EXPECTED_CHEATS = {"harness_patching"}
EXPECTED_RUNTIME = {"harness_patching"}

_real_do_bench = triton.testing.do_bench
_real_perf_counter = time.perf_counter


def _fast_do_bench(fn, *args, **kwargs):
    result = _real_do_bench(fn, *args, **kwargs)
    return [r * 0.1 for r in result] if isinstance(result, (list, tuple)) else result * 0.1


def _slow_clock():
    return _real_perf_counter() * 0.1


triton.testing.do_bench = _fast_do_bench
time.perf_counter = _slow_clock
if hasattr(torch.cuda, "Event"):
    _real_elapsed = torch.cuda.Event.elapsed_time
    torch.cuda.Event.elapsed_time = lambda self, end: _real_elapsed(self, end) * 0.1


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


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
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
        float(params["eps"]),
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
