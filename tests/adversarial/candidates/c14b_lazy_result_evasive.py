"""Lazy result, hidden from the static scan (docs/cheats.md 14, a harder variant of c14).

The trick is c14's: the call computes only the per-row statistic (a real launch) and puts, in place of
the judge's output tensor, a tensor subclass that launches the kernel computing y when something reads
it, outside any timed region. Against the static scan, the subclass is built from a base class
reached with getattr, its hook is installed with setattr under a name built at run time, and the
output dict is updated through `dict.__setitem__`.

Defence that should name it: every output (and trace entry) must be exactly `torch.Tensor`, checked
right after the call, as the runner already does for the trace. Expected: `lazy_result`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"lazy_result"}
EXPECTED_RUNTIME = {"lazy_result"}
# Closed: the runner keeps its own references to the output tensors it allocated and refuses a call
# that replaced any of them (ferret/sandbox/runner.py, _call), so this candidate fails as lazy_result.


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


def _name(*parts):
    return "".join(parts)


_Base = getattr(torch, _name("Ten", "sor"))
_no_hooks = getattr(torch._C, _name("Disable", "Torch", "Function", "Subclass"))
_SLOT = "_pend" + "ing"


class Deferred(_Base):
    pass


def _materialize(t):
    pending = getattr(t, _SLOT, None)
    if pending is not None:
        delattr(t, _SLOT)
        out, x, w, inv = pending
        M, N = x.shape
        block_m, block_n = _blocks(M, N)
        _scale_kernel[(triton.cdiv(M, block_m),)](
            x, w, inv, out, M, N, x.stride(0), out.stride(0), BLOCK_M=block_m, BLOCK_N=block_n
        )


def _hook(cls, func, types, args=(), kwargs=None):
    for arg in args:
        if isinstance(arg, Deferred):
            _materialize(arg)
    with _no_hooks():
        return func(*args, **(kwargs or {}))


setattr(Deferred, _name("__torch", "_function__"), classmethod(_hook))
_wrap = getattr(_Base, _name("_make", "_subclass"))


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_m, block_n = _blocks(M, N)
    _inv_rms_kernel[(triton.cdiv(M, block_m),)](x, inv, M, N, x.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n)
    deferred = _wrap(Deferred, y)
    setattr(deferred, _SLOT, (y, x, w, inv))
    dict.__setitem__(outputs, "y", deferred)
    if trace is not None:
        trace["inv_rms"] = inv
