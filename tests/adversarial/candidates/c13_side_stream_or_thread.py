"""Work on a side stream or a background thread (docs/cheats.md 13).

The trick: return immediately and let the work finish outside the region the timer measures. The
kernel is launched from a worker thread (on a GPU, on a side stream of its own) that then lingers,
waiting to "pipeline" the next call; `run` returns before the output is necessarily written, so an end
event recorded on the default stream right after the call does not wait for it.

Defence: device-wide synchronize before the clock stops, event time compared with synchronized wall
time (GPU timing), and a thread count before/after every call (CPU and GPU). The gate reports
`side_stream_or_thread` (static: threading / torch.cuda.Stream; runtime: a thread left running).
"""

from __future__ import annotations

import threading

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"side_stream_or_thread"}
EXPECTED_RUNTIME = {"side_stream_or_thread"}


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


def _work(x, w, y, inv, eps, store_inv, next_call: threading.Event):
    M, N = x.shape
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    stream = torch.cuda.Stream() if x.is_cuda else None
    if stream is not None:
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
                x, w, y, inv, M, N, x.stride(0), y.stride(0), eps, BLOCK_M=block_m, BLOCK_N=block_n, STORE_INV=store_inv
            )
    else:
        _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
            x, w, y, inv, M, N, x.stride(0), y.stride(0), eps, BLOCK_M=block_m, BLOCK_N=block_n, STORE_INV=store_inv
        )
    # Stay around for the next call's work (pipelining).
    next_call.wait(timeout=0.5)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    inv = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    worker = threading.Thread(
        target=_work,
        args=(x, w, y, inv, float(params["eps"]), trace is not None, threading.Event()),
        daemon=True,
    )
    worker.start()
    if trace is not None:
        trace["inv_rms"] = inv
