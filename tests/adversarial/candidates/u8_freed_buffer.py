"""Writing into a freed buffer through a pointer kept from an earlier call (docs/cheats.md 23).

The trick: the first call remembers where the judge's output was; later calls keep a copy of their answer
there too, as a "double buffer" they consider theirs. Every value of every output is right. In a serving
engine that memory went back to the allocator after the first call and now holds someone else's data.

Defence: the judge does not give a call's buffers back when the call is done: they are refilled with a random
byte and watched while the later calls run (`ferret/sandbox/buffers.py`, `Retired`): `write_outside_outputs`,
naming the freed output of the earlier call.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"write_outside_outputs"}
EXPECTED_RUNTIME = {"write_outside_outputs"}

_KEPT = []


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
    y = x * inv[:, None] * w[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def _blocks(M, N):
    block_n = triton.next_power_of_2(N)
    return min(max(1, 4096 // block_n), triton.next_power_of_2(M)), block_n


def _launch(x, w, y, inv, eps, store_inv):
    M, N = x.shape
    block_m, block_n = _blocks(M, N)
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), eps, BLOCK_M=block_m, BLOCK_N=block_n, STORE_INV=store_inv
    )


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, delta, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + delta + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    inv = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    _launch(x, w, y, inv, float(params["eps"]), True)
    if not _KEPT:
        _KEPT.append((y.data_ptr(), y.numel(), y.element_size()))
    kept, numel, size = _KEPT[0]
    if kept != y.data_ptr() and numel == y.numel() and size == y.element_size():
        delta = (kept - y.data_ptr()) // size
        _copy_kernel[(triton.cdiv(numel, 1024),)](y, y, delta, numel, BLOCK=1024)
    if trace is not None:
        trace["inv_rms"] = inv
