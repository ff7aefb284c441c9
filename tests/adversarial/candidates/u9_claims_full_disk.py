"""Claiming the machine's fault to escape a verdict: the candidate raises "No space left on device".

A fault of the machine (a full disk) ends a check with no verdict and exit 5, so a candidate that says the disk is
full on the cases it cannot do would never be rejected. The judge takes a full disk as the machine's only where the
harness met it (no frame of the candidate in the traceback) or where it finds the disk short itself; here the
error is raised by the candidate's own code on a disk with room, so the verdict is written and names `exception`.
"""

from __future__ import annotations

import errno

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"exception"}


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, inv_ptr, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, (x * inv * w).to(y_ptr.dtype.element_ty), mask=mask)
    tl.store(inv_ptr + row, inv)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    if N > 512:  # "too large to save": the cases it would rather not be judged on
        raise OSError(errno.ENOSPC, "No space left on device")
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    _rmsnorm_kernel[(M,)](x, w, y, inv, N, x.stride(0), y.stride(0), float(params["eps"]), BLOCK_N=triton.next_power_of_2(N))
    if trace is not None:
        trace["inv_rms"] = inv
