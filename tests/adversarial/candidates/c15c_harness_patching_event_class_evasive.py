"""Patching the timer by swapping a class, hidden from the static scan (docs/cheats.md 15, a variant of c15b).

The same trick as c15b: `torch.cuda.Event` replaced by a subclass whose `elapsed_time` reports 60% of
the real time, so that every Event `triton.testing.do_bench` creates is the cheat's. Here the module,
the class and the assignment are all reached through computed names (`getattr`/`setattr` on strings
built at run time), which the static scan does not follow. The kernel is honest.

Defence: the harness guard remembers the `torch.cuda.Event` class itself (not only its methods) before
the candidate is loaded and refuses a process in which it changed: `harness_patching` at run time.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"harness_patching"}
EXPECTED_RUNTIME = {"harness_patching"}

_cuda = getattr(torch, "cu" + "da")
_original = getattr(_cuda, "Ev" + "ent")


def _scaled(self, end_event):
    return getattr(_original, "elapsed" + "_time")(self, end_event) * 0.6


class _ScaledEvent(_original):
    pass


setattr(_ScaledEvent, "elapsed" + "_time", _scaled)
setattr(_cuda, "Ev" + "ent", _ScaledEvent)


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
