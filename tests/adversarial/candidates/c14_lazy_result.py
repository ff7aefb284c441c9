"""Lazy result (docs/cheats.md 14).

The trick: the call only computes the cheap per-row statistic and hands back, in place of the judge's
output tensor, a tensor subclass that computes y when something reads it, outside the timed region.
Reading it (printing, comparing, copying to the host) launches the real kernel, so a checker that reads
the values sees the right answer.

Defence: outputs must be exactly `torch.Tensor` with real storage, written in place; the static scan bans
tensor subclasses and `__torch_function__` hooks. The gate reports `lazy_result` (static); replacing the
judge's output tensor is also named (`unwritten_output`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"lazy_result"}
EXPECTED_RUNTIME = {"lazy_result"}


@triton.jit
def _inv_rms_kernel(x_ptr, inv_ptr, M, N, stride_x, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    mask = row_in[:, None] & (cols < N)[None, :]
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(inv_ptr + rows, tl.rsqrt(tl.sum(x * x, axis=1) / N + eps), mask=row_in)


@triton.jit
def _scale_kernel(x_ptr, w_ptr, inv_ptr, y_ptr, M, N, stride_x, stride_y, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    col_in = cols < N
    mask = row_in[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.load(inv_ptr + rows, mask=row_in, other=0.0)
    tl.store(
        y_ptr + rows64[:, None] * stride_y + cols[None, :], (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask
    )


def _blocks(M, N):
    block_n = triton.next_power_of_2(N)
    return min(max(1, 4096 // block_n), triton.next_power_of_2(M)), block_n


class LazyNormed(torch.Tensor):
    """Shares the judge's output storage; fills it the first time anything touches it."""

    @staticmethod
    def __new__(cls, out, x, w, inv):
        self = torch.Tensor._make_subclass(cls, out)
        self._pending = (out, x, w, inv)
        return self

    def _materialize(self):
        pending = self.__dict__.pop("_pending", None)
        if pending is not None:
            out, x, w, inv = pending
            M, N = x.shape
            block_m, block_n = _blocks(M, N)
            _scale_kernel[(triton.cdiv(M, block_m),)](
                x, w, inv, out, M, N, x.stride(0), out.stride(0), BLOCK_M=block_m, BLOCK_N=block_n
            )

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        for arg in args:
            if isinstance(arg, LazyNormed):
                arg._materialize()
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **(kwargs or {}))


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_m, block_n = _blocks(M, N)
    _inv_rms_kernel[(triton.cdiv(M, block_m),)](x, inv, M, N, x.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n)
    outputs["y"] = LazyNormed(y, x, w, inv)
    if trace is not None:
        trace["inv_rms"] = inv
