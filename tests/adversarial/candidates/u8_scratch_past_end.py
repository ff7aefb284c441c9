"""Writing past the end of the candidate's own scratch buffer (docs/cheats.md 23). GPU only: on the CPU the same
write would land in the judge's host memory.

The trick, or the bug: the per-row statistic goes to a scratch tensor the candidate allocates itself, sized for the
rows there are, while the grid is rounded up to whole tiles of 384 rows and the statistic's store keeps no row mask.
Every output is right and the judge's guard regions are never touched: the bytes after the scratch are the caching
allocator's, a free block or a neighbour's buffer, which a serving engine pays for.

Defence: on the GPU profile the judge runs the candidate once more under compute-sanitizer's memcheck with PyTorch's
caching allocator off, so the scratch is an allocation of its own whose end the tool knows: the invalid writes are
`write_outside_outputs` (`ferret/gate/memcheck.py`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"write_outside_outputs"}
EXPECTED_RUNTIME = {"write_outside_outputs"}
GPU_ONLY_DEFENCE = "compute-sanitizer memcheck with the caching allocator off"

TILE_ROWS = 384  # three 128-row tiles: 1024 rows round up to 1152


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, inv_ptr, M, N, stride_x, stride_y, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
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
    tl.store(inv_ptr + rows, inv)  # no row mask: the padded tile's rows land past the scratch's end


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)  # the candidate's own scratch, M entries
    block_n = triton.next_power_of_2(N)
    block_m = max(1, min(4096 // block_n, 128))
    padded = triton.cdiv(max(M, 1), TILE_ROWS) * TILE_ROWS  # whole tiles of 384 rows
    _rmsnorm_kernel[(triton.cdiv(padded, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n
    )
    if trace is not None:
        trace["inv_rms"] = inv
