"""Wrong rows among many right ones (docs/cheats.md 30: a wrong row hidden among many right ones).

A row-looped RMSNorm, float32 throughout, exact on every row but those of a second 16-row tile (row index 16 on)
when the rows are longer than 64 elements: there it divides the sum of squares by N + N/20 instead of N (a
mean over a padded width), so those rows' y are 2.4% small. The frozen cases never have both (their many-row
case is 17 wide, their wide cases at most 16 rows); a fresh case with more than 16 rows has a few wrong rows
among many right ones, and y's stage-wide relative L2 error, its largest error against the stage's peak and its
cosine all stay inside the bf16 tolerance (the issue's kernel divided by N + 1 on rows past 16384 elements: at
bf16 the same shape of error, rows wrong among exact ones, at a size scaled to the CPU profile's ranges).

Defence: each row of a multi-axis stage is judged against its own norm too (`max_row_rel`, ferret/gate/metrics.py,
derived by calibration's method on the faithful implementations' per-row maximum): a faithful bf16 row is off by
a few tenths of a percent at most. The verdict names the row (`wrong_rows`, or `math_mismatch` where a stage-wide
bound fails too).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"wrong_rows", "math_mismatch"}
BLOCK_N = 128
ROW_TILE = 16
SHORT_ROW = 64


@triton.jit
def _rmsnorm_rows_kernel(x_ptr, w_ptr, y_ptr, N, stride_x, stride_y, eps, FIRST_PADDED_ROW, PAD, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride_x
    y_row = y_ptr + row.to(tl.int64) * stride_y
    cols = tl.arange(0, BLOCK_N)
    squares = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < N, other=0.0).to(tl.float32)
        squares += x * x
    width = tl.where(row >= FIRST_PADDED_ROW, N + PAD, N).to(tl.float32)
    inv_rms = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / width + eps)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        in_row = offs < N
        x = tl.load(x_row + offs, mask=in_row, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + offs, mask=in_row, other=0.0).to(tl.float32)
        tl.store(y_row + offs, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=in_row)


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict, trace: dict | None = None) -> None:
    x, weight, y = inputs["x"], inputs["weight"], outputs["y"]
    if x.dim() != 2 or y.shape != x.shape or x.stride(-1) != 1 or y.stride(-1) != 1 or weight.stride(-1) != 1:
        raise ValueError("x and y of shape [M, N] and weight [N], contiguous along the last dim")
    M, N = x.shape
    pad = N // 20 if N > SHORT_ROW else 0
    _rmsnorm_rows_kernel[(M,)](
        x, weight, y, N, x.stride(0), y.stride(0), float(params["eps"]), ROW_TILE, pad, BLOCK_N=BLOCK_N, num_warps=4
    )
