"""Decoy kernel (docs/cheats.md 8).

The trick: a real-looking Triton RMSNorm kernel is launched on every call (so a launch counter sees
it), but it writes into a scratch buffer that is thrown away; the output is computed on the host with
NumPy, which an ATen-level interception never sees.

Defence: record which kernels launched, and re-run the call with every Triton launch turned into a
no-op: if the outputs come out the same, the kernels did not produce them. The gate reports
`decoy_kernel` (runtime no-op check); the static scan also names the NumPy compute (`library_call`).
"""

from __future__ import annotations

import numpy as np
import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"decoy_kernel"}
EXPECTED_RUNTIME = {"decoy_kernel"}


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, M, N, stride_x, stride_y, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    col_in = cols < N
    mask = (rows < M)[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    tl.store(
        y_ptr + rows64[:, None] * stride_y + cols[None, :], (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask
    )


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    eps = float(params["eps"])
    scratch = torch.empty_like(y)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x,
        w,
        scratch,
        M,
        N,
        x.stride(0),
        scratch.stride(0),
        eps,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
    )
    # The answer actually comes from here.
    xs = x.to(torch.float32).cpu().numpy()
    ws = w.to(torch.float32).cpu().numpy()
    inv = 1.0 / np.sqrt((xs * xs).mean(axis=1) + np.float32(eps))
    y.copy_(torch.from_numpy((xs * inv[:, None] * ws[None, :]).astype(np.float32)))
    if trace is not None:
        trace["inv_rms"] = torch.from_numpy(inv.astype(np.float32)).to(x.device)
