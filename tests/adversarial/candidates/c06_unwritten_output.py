"""Not writing outputs / a failed launch that still "matched" (docs/cheats.md 6).

The trick: the launch specialises BLOCK_N to the exact row width, which only compiles for power-of-two
widths; the launch is wrapped in a try/except that swallows the error ("the fallback is the output as
it stands"). On a harness whose output buffer already holds a previous answer, the failed launch goes
unnoticed.

Defence: outputs poisoned with NaN, launch errors checked, bitwise determinism over repeats; and the
static rule on try/except fallbacks. The gate reports `unwritten_output` (y still NaN where the
reference is finite); the static scan names the try/except as a fallback path (`library_call`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"unwritten_output"}


@triton.jit
def _rmsnorm_exact_kernel(x_ptr, w_ptr, y_ptr, inv_ptr, M, stride_x, stride_y, eps, N: tl.constexpr, STORE_INV: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, N)  # exact width: no mask needed... for power-of-two widths
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols).to(tl.float32)
    w = tl.load(w_ptr + cols).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, (x * inv * w).to(y_ptr.dtype.element_ty))
    if STORE_INV:
        tl.store(inv_ptr + row, inv)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    try:
        _rmsnorm_exact_kernel[(M,)](
            x,
            w,
            y,
            inv,
            M,
            x.stride(0),
            y.stride(0),
            float(params["eps"]),
            N=N,
            STORE_INV=trace is not None,
        )
    except Exception:
        pass  # keep whatever the output buffer holds
    if trace is not None:
        trace["inv_rms"] = inv
