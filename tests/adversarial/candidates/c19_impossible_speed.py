"""Impossible speed (docs/cheats.md 19).

The trick: do no work when being timed. The candidate decides it is inside a timing loop when a
benchmarking function (`do_bench`, `bench`, `timeit`, ...) is on the call stack, or when it has seen the
very same input three times (a benchmark repeats its call on one input set); then it returns at once,
leaving whatever the output buffer holds (in a benchmark loop, the previous call's answer). The reported
time is far below what moving the bytes takes.

Defence: on the GPU, reject times under the roofline floor (bytes / datasheet bandwidth) and flag
speedups over 10x for review; fresh inputs for every timed call. On the CPU nothing is timed: the gate
sees the behaviour change after the first calls (`warmup_detection`: repeated calls on identical inputs
gave different bytes) and the static scan names the stack inspection (`reading_expected`).
"""

from __future__ import annotations

import sys
from collections import Counter

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"impossible_speed", "warmup_detection"}
GPU_ONLY_DEFENCE = "timing floor"

_SEEN = Counter()
_TIMERS = ("do_bench", "bench", "timeit", "time_candidate", "benchmark", "elapsed")


def _being_timed(x: torch.Tensor) -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if any(t in frame.f_code.co_name for t in _TIMERS):
            return True
        frame = frame.f_back
    flat = x.reshape(-1)
    key = (tuple(x.shape), str(x.dtype), float(flat[0].item()), float(flat[-1].item()))
    _SEEN[key] += 1
    return _SEEN[key] > 2


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
    if _being_timed(x):
        return
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
