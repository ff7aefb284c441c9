"""Patching the timer by swapping a class, not a function (docs/cheats.md 15, a variant of c15).

The trick: `triton.testing.do_bench` times with `torch.cuda.Event` objects it creates on every call.
Instead of replacing `do_bench` or `Event.elapsed_time` (whose identities a harness may check), the
candidate replaces the class itself, `torch.cuda.Event`, with a subclass whose `elapsed_time` reports
60% of the real time: a kernel at 0.9x the baseline's speed is reported at 1.5x. 60% stays above the
timing process's "event time under half the synchronized wall time" cross-check. The kernel is honest.

Defence: the identity of `torch.cuda.Event` itself, checked by the harness guard after the candidate is
loaded (in the gate's process and in the timing process), and the static ban on assigning to imported
modules. c15c does the same through computed names, which only the runtime guard sees.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"harness_patching"}
EXPECTED_RUNTIME = {"harness_patching"}


class _ScaledEvent(torch.cuda.Event):
    def elapsed_time(self, end_event):
        return super().elapsed_time(end_event) * 0.6


torch.cuda.Event = _ScaledEvent


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
