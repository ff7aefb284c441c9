"""A child process (docs/cheats.md 13, 21): work outside the process the harness watches.

The trick: start a helper process (a Python interpreter, reached through computed names so the static
scan sees no `subprocess`) that would outlive the call: a daemon that could keep working after the
timer stops, rewrite result files after the harness wrote them, or compute with a library the
harness's watches never see. The candidate swallows any error and computes an honest answer, so only
the run-time defence stands against it.

Defence: the candidate's process runs under a Python audit hook (`ferret/sandbox/audit.py`) that refuses
to start any process but the backend's own tools and records the attempt; the runner fails the variant
as `process_spawned`, named `side_stream_or_thread` (runtime) even though the candidate caught the error.
"""

from __future__ import annotations

import sys

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


def _rmsnorm(inputs, outputs, params, trace):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    store_inv = trace is not None
    inv = torch.empty(M, dtype=torch.float32, device=x.device) if store_inv else y
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n, STORE_INV=store_inv
    )
    if store_inv:
        trace["inv_rms"] = inv


def _helper() -> None:
    spawn = getattr(__import__("sub" + "process"), "Po" + "pen")
    try:
        spawn([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    except Exception:  # noqa: BLE001 - refused: carry on as if nothing happened
        pass


def run(inputs, outputs, params, trace=None):
    _helper()
    _rmsnorm(inputs, outputs, params, trace)
