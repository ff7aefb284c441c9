"""Persisting L2 (docs/cheats.md 18).

The trick: on the GPU, reserve a persisting-L2 carve-out and pin the weight (and the first rows of x)
in it with an access-policy window on the stream, so the benchmark's streaming L2 flush between timed
calls cannot evict them and every timed call reads them from L2 instead of HBM. The kernel itself is
honest. On the CPU the CUDA calls are skipped.

Defence: the timing process resets the persisting-L2 limit and flushes before each timed call (GPU); the
static scan names the persisting-L2 controls and the raw CUDA runtime bindings. On the CPU the gate
reports `persisting_l2` (static).
"""

from __future__ import annotations

import ctypes

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"persisting_l2"}

_CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE = 0x06
_CUDA_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW = 1
_CUDA_ACCESS_PROPERTY_STREAMING = 1
_CUDA_ACCESS_PROPERTY_PERSISTING = 2


class _AccessPolicyWindow(ctypes.Structure):
    _fields_ = [
        ("base_ptr", ctypes.c_void_p),
        ("num_bytes", ctypes.c_size_t),
        ("hitRatio", ctypes.c_float),
        ("hitProp", ctypes.c_int),
        ("missProp", ctypes.c_int),
    ]


_pinned = set()


def _pin_in_l2(tensor: torch.Tensor) -> None:
    if not tensor.is_cuda or tensor.data_ptr() in _pinned:
        return
    cudart = ctypes.CDLL("libcudart.so")
    nbytes = tensor.numel() * tensor.element_size()
    cudart.cudaDeviceSetLimit(_CUDA_LIMIT_PERSISTING_L2_CACHE_SIZE, ctypes.c_size_t(max(nbytes, 4 << 20)))
    window = _AccessPolicyWindow(
        tensor.data_ptr(), nbytes, 1.0, _CUDA_ACCESS_PROPERTY_PERSISTING, _CUDA_ACCESS_PROPERTY_STREAMING
    )
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
    cudart.cudaStreamSetAttribute(stream, _CUDA_STREAM_ATTRIBUTE_ACCESS_POLICY_WINDOW, ctypes.byref(window))
    _pinned.add(tensor.data_ptr())


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
    _pin_in_l2(w)
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
