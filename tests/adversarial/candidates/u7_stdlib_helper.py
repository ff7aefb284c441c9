"""The statistic computed by a helper of the standard library that iterates the tensor (docs/cheats.md 31).

The trick: `statistics.fmean` (an allowed import) is handed each row of squares as a tensor and iterates it inside
the standard library, so no line of this file reads a value; the launcher finishes the RMSNorm on the host and a
Triton copy kernel writes it. The squares come from a Triton kernel, so no torch compute op runs.

Defence that should name it: the host-numerics watch counts data taken out of a tensor wherever the code that takes
it lives, at the candidate's line that handed the tensor on (`host_numerics`, at run time).
"""

from __future__ import annotations

import math
import statistics

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"host_numerics"}
EXPECTED_RUNTIME = {"host_numerics"}


@triton.jit
def _squares(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    x = tl.load(x_ptr + offs, mask=keep).to(tl.float32)
    tl.store(out_ptr + offs, x * x, mask=keep)


@triton.jit
def _scale(x_ptr, w_ptr, inv_ptr, y_ptr, N, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    keep = cols < N
    x = tl.load(x_ptr + row * N + cols, mask=keep, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=keep, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * N + cols, (x * tl.load(inv_ptr + row) * w).to(y_ptr.dtype.element_ty), mask=keep)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"].contiguous(), inputs["weight"], outputs["y"]
    M, N = x.shape
    squares = torch.empty(M, N, dtype=torch.float32, device=x.device)
    _squares[(triton.cdiv(M * N, 1024),)](x, squares, M * N, BLOCK=1024)
    eps = float(params["eps"])
    inv = [1.0 / math.sqrt(statistics.fmean(squares[i]) + eps) for i in range(M)]
    inv_t = torch.tensor(inv, dtype=torch.float32, device=x.device)
    _scale[(M,)](x, w, inv_t, y, N, BLOCK=triton.next_power_of_2(N))
