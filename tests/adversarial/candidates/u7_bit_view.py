"""Floating-point data smuggled out as integers: the bits viewed as int32, read, and decoded on the host
(docs/cheats.md 31).

The trick: a watch that lets integer tensors through (launchers read lengths on the host) would pass
`x.view(torch.int32).tolist()`; `struct` turns the bits back into floats and the RMSNorm is done in Python. A Triton
copy kernel writes the answer.

Defence that should name it: the host-numerics watch remembers every tensor made from floating-point data (the
int32 view included) as float data (`host_numerics`, at run time).
"""

from __future__ import annotations

import math
import struct

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


def _floats(bits):
    return list(struct.unpack(f"{len(bits)}f", struct.pack(f"{len(bits)}i", *bits)))


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"].float(), inputs["weight"].float(), outputs["y"]
    reader = getattr(x.view(torch.int32), "to" + "list")
    rows = [_floats(r) for r in reader()]
    weight = _floats(getattr(w.view(torch.int32), "to" + "list")())
    eps = float(params["eps"])
    answer = []
    for row in rows:
        inv = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
        answer.append([v * inv * g for v, g in zip(row, weight, strict=True)])
    _write(torch.tensor(answer, dtype=torch.float32), y)
