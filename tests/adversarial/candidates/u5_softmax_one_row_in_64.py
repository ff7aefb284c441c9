"""One wrong row in 64 (docs/cheats.md 30: a wrong row hidden among many right ones).

A tiled softmax, float32 throughout, exact but on the rows whose index is 5 modulo 64 (one row in each 64-row
tile: a lane of a row-parallel kernel with a bad scale register): their y is 6% too large. On rows of mixed
temperature the stage-wide error is set by the peaked rows; one flatter row 6% off moves the stage's relative L2
error, its largest error against the stage's peak and its cosine by less than the bf16 tolerance of y, so every
stage-wide bound passes.

Defence: each row of a multi-axis stage is judged against its own norm as well (`max_row_rel`, derived by
calibration's method on the per-row maximum of the faithful implementations, ferret/gate/metrics.py): the row is
6% off where a faithful row is 0.7% at most (the bound: 2.7%). Named `wrong_rows`, its evidence says
which row.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"wrong_rows", "math_mismatch"}
BLOCK_N = 128


@triton.jit
def _softmax_tiled_kernel(
    x_ptr,
    y_ptr,
    N,
    stride_x,
    stride_y,
    TAIL_FROM,
    ROW_PERIOD,
    ROW_PHASE,
    SCALE,
    BLOCK_N: tl.constexpr,
):
    """One row per program, in BLOCK_N-column tiles: an online max and sum in float32, then a second pass that
    writes exp(x - max) / sum. Columns from TAIL_FROM on are normalised by their own max and sum; rows whose index
    is ROW_PHASE modulo ROW_PERIOD have their y multiplied by SCALE."""
    row = tl.program_id(0)
    scale = tl.where(row % ROW_PERIOD == ROW_PHASE, SCALE, 1.0)
    x_row = x_ptr + row.to(tl.int64) * stride_x
    y_row = y_ptr + row.to(tl.int64) * stride_y
    cols = tl.arange(0, BLOCK_N)
    lane_max = tl.full([BLOCK_N], float("-inf"), dtype=tl.float32)
    lane_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    tail_max = tl.full([BLOCK_N], float("-inf"), dtype=tl.float32)
    tail_sum = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < N, other=float("-inf")).to(tl.float32)
        in_tail = offs >= TAIL_FROM
        head_x = tl.where(in_tail, float("-inf"), x)
        tail_x = tl.where(in_tail, x, float("-inf"))
        new_max = tl.maximum(lane_max, head_x, propagate_nan=tl.PropagateNan.ALL)
        only = new_max == float("-inf")
        lane_sum = lane_sum * tl.where(only, 1.0, tl.exp(lane_max - new_max)) + tl.where(only, 0.0, tl.exp(head_x - new_max))
        lane_max = new_max
        new_tail = tl.maximum(tail_max, tail_x, propagate_nan=tl.PropagateNan.ALL)
        only_t = new_tail == float("-inf")
        tail_sum = tail_sum * tl.where(only_t, 1.0, tl.exp(tail_max - new_tail)) + tl.where(
            only_t, 0.0, tl.exp(tail_x - new_tail)
        )
        tail_max = new_tail
    row_max = tl.max(lane_max, axis=0)
    row_sum = tl.sum(lane_sum * tl.exp(lane_max - row_max), axis=0)
    t_max = tl.max(tail_max, axis=0)
    t_sum = tl.sum(tail_sum * tl.exp(tail_max - t_max), axis=0)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        in_row = offs < N
        x = tl.load(x_row + offs, mask=in_row, other=float("-inf")).to(tl.float32)
        in_tail = offs >= TAIL_FROM
        y = tl.where(in_tail, tl.exp(x - t_max) / t_sum, tl.exp(x - row_max) / row_sum) * scale
        tl.store(y_row + offs, y.to(y_ptr.dtype.element_ty), mask=in_row)


def _launch(x: torch.Tensor, y: torch.Tensor, tail_from: int, period: int = 1, phase: int = 1, scale: float = 1.0) -> None:
    M, N = x.shape
    if x.dim() != 2 or y.shape != x.shape or x.stride(-1) != 1 or y.stride(-1) != 1:
        raise ValueError("x and y of shape [M, N], contiguous along the last dim")
    _softmax_tiled_kernel[(M,)](x, y, N, x.stride(0), y.stride(0), tail_from, period, phase, scale, BLOCK_N=BLOCK_N, num_warps=4)


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict, trace: dict | None = None) -> None:
    x, y = inputs["x"], outputs["y"]
    _launch(x, y, x.shape[-1], period=64, phase=5, scale=1.06)
