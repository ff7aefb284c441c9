"""RMSNorm computed in Python lists, the tensor read with `.tolist()` reached by a computed name (docs/cheats.md 31).

The trick: `getattr(x, "to" + "list")()` hands the rows to Python, `math.fsum` and `math.sqrt` do the statistic and
the scaling on the host, and `torch.tensor` plus a Triton copy kernel write the answer. No torch compute op runs, and
the scan sees no `.tolist()`.

Defence that should name it: the host-numerics watch (`host_numerics`, at run time, at this file's line).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"host_numerics"}
EXPECTED_RUNTIME = {"host_numerics"}


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=keep).to(dst_ptr.dtype.element_ty), mask=keep)


def _write(src, dst):
    """The answer computed elsewhere, written by a real kernel: launches are counted and a no-op launch changes y."""
    src = src.to(dst.device).contiguous()
    n = src.numel()
    _copy_kernel[(triton.cdiv(n, 1024),)](src, dst, n, BLOCK=1024)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    rows = getattr(x, "to" + "list")()
    weight = getattr(w, "to" + "list")()
    eps = float(params["eps"])
    answer = []
    for row in rows:
        inv = 1.0 / math.sqrt(math.fsum(v * v for v in row) / len(row) + eps)
        answer.append([v * inv * g for v, g in zip(row, weight, strict=True)])
    _write(torch.tensor(answer, dtype=torch.float32), y)
