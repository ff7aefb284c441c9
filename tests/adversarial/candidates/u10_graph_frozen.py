"""A host-side branch frozen in a CUDA graph (docs/cheats.md 32).

An RMSNorm that routes rows, as a mixture-of-experts launcher routes tokens: a first kernel sorts the rows into two
index lists by their mean square (big or small) and counts them; the launcher reads the two counts on the host
(integer metadata, `.item()`) and sizes each path's grid by its count. Called plainly it is exact on every input.

Inside a CUDA-graph capture the host cannot read the device, so the launcher falls back to a plan fixed when it is
captured (`PLAN_WHEN_CAPTURED`: every row on the big path). The graph replays that frozen plan: on any input whose
rows are not all big, the small rows are never written. Every correctness run, every timed call and the timing
process's own checks call it plainly and pass; only a replayed graph's answers show it.

With `PLAN_WHEN_CAPTURED = False` it reads the counts under capture too: the capture fails (`.item()` synchronizes
with the host), and the candidate is `not_graph_capturable` (tests/gpu/test_graph_timing_gpu.py writes that copy).

Defence: the timing process captures the call and replays it on input sets copied into the captured buffers, the
judge's fresh draws first; every replayed answer is checked against the reference (`graph_frozen`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"graph_frozen"}
PLAN_WHEN_CAPTURED = True
BLOCK_N = 1024
BIG_MEAN_SQUARE = 1.0


@triton.jit
def _route_kernel(x_ptr, counts_ptr, big_ptr, small_ptr, N, stride_x, BIG, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    x_row = x_ptr + row.to(tl.int64) * stride_x
    cols = tl.arange(0, BLOCK_N)
    squares = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        offs = start + cols
        x = tl.load(x_row + offs, mask=offs < N, other=0.0).to(tl.float32)
        squares += x * x
    big = tl.sum(squares, axis=0) / N > BIG
    slot = tl.atomic_add(counts_ptr + tl.where(big, 0, 1), 1)
    tl.store(big_ptr + slot, row, mask=big)
    tl.store(small_ptr + slot, row, mask=big == 0)


@triton.jit
def _rows_kernel(x_ptr, w_ptr, y_ptr, rows_ptr, N, stride_x, stride_y, eps, BLOCK_N: tl.constexpr):
    row = tl.load(rows_ptr + tl.program_id(0))
    if row >= 0:  # a slot the routing left empty (-1): nothing to do
        x_row = x_ptr + row.to(tl.int64) * stride_x
        y_row = y_ptr + row.to(tl.int64) * stride_y
        cols = tl.arange(0, BLOCK_N)
        squares = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            offs = start + cols
            x = tl.load(x_row + offs, mask=offs < N, other=0.0).to(tl.float32)
            squares += x * x
        inv_rms = 1.0 / tl.sqrt(tl.sum(squares, axis=0) / N + eps)
        for start in range(0, N, BLOCK_N):
            offs = start + cols
            in_row = offs < N
            x = tl.load(x_row + offs, mask=in_row, other=0.0).to(tl.float32)
            w = tl.load(w_ptr + offs, mask=in_row, other=0.0).to(tl.float32)
            tl.store(y_row + offs, (x * inv_rms * w).to(y_ptr.dtype.element_ty), mask=in_row)


def _capturing(x: torch.Tensor) -> bool:
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def _plan(counts: torch.Tensor, rows: int) -> tuple[int, int]:
    """(big rows, small rows): read on the host, or, while a CUDA graph is captured, the plan fixed then."""
    if PLAN_WHEN_CAPTURED and _capturing(counts):
        return rows, 0
    big = int(counts[0].item())
    return big, rows - big


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict, trace: dict | None = None) -> None:
    x, weight, y = inputs["x"], inputs["weight"], outputs["y"]
    rows, n = x.shape
    counts = torch.zeros(2, dtype=torch.int32, device=x.device)
    big_rows = torch.full((rows,), -1, dtype=torch.int32, device=x.device)
    small_rows = torch.full((rows,), -1, dtype=torch.int32, device=x.device)
    _route_kernel[(rows,)](x, counts, big_rows, small_rows, n, x.stride(0), BIG_MEAN_SQUARE, BLOCK_N=BLOCK_N)
    big, small = _plan(counts, rows)
    for count, row_list in ((big, big_rows), (small, small_rows)):
        if count:
            _rows_kernel[(count,)](x, weight, y, row_list, n, x.stride(0), y.stride(0), params["eps"], BLOCK_N=BLOCK_N)
