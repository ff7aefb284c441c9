"""Honest: the Triton RMSNorm with host-side work that is no cheat (docs/cheats.md 29 and 31 must not name it).

The launcher builds an integer tensor of row lengths and reads its maximum on the host through `.item()` (integer
metadata, as paged launchers read their lengths), computes a constant of the math from the params in Python (`eps`
through `math`), and fetches an attribute by a literal name (`getattr(triton, "cdiv")`). None of it takes
floating-point data out of an input or output tensor, and every path is one the scan resolves.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

HONEST = True

# 16 warps x 32 lanes x 32 values: x and weight for 16384 columns stay within the 128 registers a
# thread has at 512 threads per block. Wider rows would spill, so they loop instead.
FUSED_MAX_N = 16384
# Elements one program should move at least, so that short rows do not leave warps idle.
MIN_TILE = 4096
LONG_ROW_BLOCK = 8192


@triton.jit
def _rmsnorm_fused_kernel(
    x_ptr,
    weight_ptr,
    y_ptr,
    inv_rms_ptr,
    M,
    N,
    stride_x_row,
    stride_y_row,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STORE_INV_RMS: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    col_in = cols < N
    mask = row_in[:, None] & col_in[None, :]
    # int64 row offsets: M * N passes 2**31 at production sizes (65536 x 32768).
    rows64 = rows.to(tl.int64)

    x = tl.load(x_ptr + rows64[:, None] * stride_x_row + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    weight = tl.load(weight_ptr + cols, mask=col_in, other=0.0).to(tl.float32)

    inv_rms = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    y = x * inv_rms[:, None] * weight[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_y_row + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV_RMS:
        tl.store(inv_rms_ptr + rows, inv_rms, mask=row_in)


@triton.jit
def _rmsnorm_long_row_kernel(
    x_ptr,
    weight_ptr,
    y_ptr,
    inv_rms_ptr,
    N,
    stride_x_row,
    stride_y_row,
    eps,
    BLOCK_N: tl.constexpr,
    STORE_INV_RMS: tl.constexpr,
):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride_x_row
    y_row = y_ptr + row.to(tl.int64) * stride_y_row
    cols = tl.arange(0, BLOCK_N)

    # Per-lane partial sums, reduced once at the end: fewer cross-warp reductions than one per block.
    sum_sq = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < N, other=0.0, eviction_policy="evict_last").to(tl.float32)
        sum_sq += x * x
    inv_rms = tl.rsqrt(tl.sum(sum_sq, axis=0) / N + eps)

    for start in range(0, N, BLOCK_N):
        offs = start + cols
        in_row = offs < N
        x = tl.load(x_row + offs, mask=in_row, other=0.0, eviction_policy="evict_first").to(tl.float32)
        weight = tl.load(weight_ptr + offs, mask=in_row, other=0.0).to(tl.float32)
        y = x * inv_rms * weight
        tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=in_row)
    if STORE_INV_RMS:
        tl.store(inv_rms_ptr + row, inv_rms)


def _require_unit_column_stride(name: str, tensor: torch.Tensor) -> None:
    if tensor.stride(-1) != 1:
        raise ValueError(f"{name} must be contiguous along its last dimension, got strides {tensor.stride()}")


def run(
    inputs: dict[str, torch.Tensor],
    outputs: dict[str, torch.Tensor],
    params: dict,
    trace: dict | None = None,
) -> None:
    x = inputs["x"]
    weight = inputs["weight"]
    y = outputs["y"]
    for name, tensor in (("x", x), ("weight", weight), ("y", y)):
        _require_unit_column_stride(name, tensor)
    M, N = x.shape
    # Integer metadata read on the host, as paged launchers read their lengths.
    lengths = torch.full((M,), N, dtype=torch.int32, device=x.device)
    widest = int(lengths.max().item())
    eps = float(params["eps"]) * math.cos(0.0)  # a constant of the math, from the params, in Python
    cdiv = getattr(triton, "cdiv")  # noqa: B009 - a literal name, which the scan resolves

    store_inv_rms = trace is not None
    inv_rms = torch.empty(M, dtype=torch.float32, device=x.device) if store_inv_rms else y
    block_n = triton.next_power_of_2(widest)
    if block_n <= FUSED_MAX_N:
        block_m = min(max(1, MIN_TILE // block_n), triton.next_power_of_2(M))
        num_warps = min(16, max(4, block_m * block_n // 1024))
        _rmsnorm_fused_kernel[(cdiv(M, block_m),)](
            x,
            weight,
            y,
            inv_rms,
            M,
            N,
            x.stride(0),
            y.stride(0),
            eps,
            BLOCK_M=block_m,
            BLOCK_N=block_n,
            STORE_INV_RMS=store_inv_rms,
            num_warps=num_warps,
        )
    else:
        _rmsnorm_long_row_kernel[(M,)](
            x,
            weight,
            y,
            inv_rms,
            N,
            x.stride(0),
            y.stride(0),
            eps,
            BLOCK_N=LONG_ROW_BLOCK,
            STORE_INV_RMS=store_inv_rms,
            num_warps=16,
        )
    if store_inv_rms:
        trace["inv_rms"] = inv_rms
