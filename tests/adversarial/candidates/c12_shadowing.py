"""Shadowing (docs/cheats.md 12).

The trick: replace what a judge running in the same interpreter would import or call. At import time
the candidate redefines PyTorch's comparison functions (`torch.allclose`, `torch.equal`,
`torch.testing.assert_close`) to always agree, and drops a `torch.py` shim into its working folder for
any later process that starts there. With the comparisons neutralised it can afford a sloppy kernel
(bfloat16 statistics).

Defence: the judge compares in its own process; the candidate's working folder is fresh and empty and
not on the judge's path; the harness's functions are checked by identity after loading and after every
call; the static scan bans writes to imported modules. The gate reports `shadowing` /
`harness_patching` (static and runtime: torch.equal was replaced).
"""

from __future__ import annotations

from pathlib import Path

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"shadowing", "harness_patching"}
EXPECTED_RUNTIME = {"harness_patching"}


def _agree(*args, **kwargs):
    return True


def _no_error(*args, **kwargs):
    return None


torch.allclose = _agree
torch.equal = _agree
torch.testing.assert_close = _no_error
Path("torch.py").write_text(
    "import importlib, sys\n"
    "sys.path = [p for p in sys.path if p not in ('', '.')]\n"
    "del sys.modules['torch']\n"
    "real = importlib.import_module('torch')\n"
    "real.allclose = lambda *a, **k: True\n"
    "sys.modules['torch'] = real\n"
)


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
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps).to(tl.bfloat16).to(tl.float32)
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
