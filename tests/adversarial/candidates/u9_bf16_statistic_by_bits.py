"""Lower precision hidden from the static scan: the statistic rounded to bf16 by integer bit operations.

No cast to a narrower dtype appears anywhere: the float32 statistic's bits are rounded to the nearest bf16 value
(add half of the dropped 16 bits, ties to even, clear them) through an int32 bitcast. The gate reads the pattern in
the tensors instead: the traced statistic's values are all bf16 values where the reference's are not, as close
to the reference rounded to bf16 as that rounding is. It names `lower_precision` (outputs) at bfloat16.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"lower_precision"}
EXPECTED_OUTPUTS = {"lower_precision"}


@triton.jit
def _rmsnorm_bits_kernel(
    x_ptr, w_ptr, y_ptr, inv_ptr, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr, STORE_INV: tl.constexpr
):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row.to(tl.int64) * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=0) / N + eps)
    bits = inv.to(tl.int32, bitcast=True)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & -65536
    inv = bits.to(tl.float32, bitcast=True)
    tl.store(y_ptr + row.to(tl.int64) * stride_y + cols, (x * inv * w).to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + row, inv)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    _rmsnorm_bits_kernel[(M,)](
        x,
        w,
        y,
        inv,
        N,
        x.stride(0),
        y.stride(0),
        float(params["eps"]),
        BLOCK_N=triton.next_power_of_2(N),
        STORE_INV=trace is not None,
    )
    if trace is not None:
        trace["inv_rms"] = inv
