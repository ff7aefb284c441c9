"""Floating-point data laundered through a kernel: a Triton kernel stores x's bits in an int32 buffer, and the
launcher reads that buffer as "integer metadata" (docs/cheats.md 31).

The trick: a watch that follows float data only through torch's operations sees an integer buffer allocated by
`torch.empty` and read with `.tolist()`, which launchers do with lengths. `struct` turns the bits back into floats,
the RMSNorm is done in Python and a Triton copy kernel writes it.

Defence that should name it: every integer tensor a launch reaches (but the call's own inputs) is remembered as
float-derived, so reading it on the host is `host_numerics` (at run time).
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
def _bits_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=keep).to(tl.float32).to(tl.int32, bitcast=True), mask=keep)


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


def _floats_of(t):
    bits = torch.empty(t.numel(), dtype=torch.int32, device=t.device)
    _bits_kernel[(triton.cdiv(t.numel(), 1024),)](t.contiguous(), bits, t.numel(), BLOCK=1024)
    values = bits.tolist()
    return list(struct.unpack(f"{len(values)}f", struct.pack(f"{len(values)}i", *values)))


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    flat, weight = _floats_of(x), _floats_of(w)
    eps = float(params["eps"])
    answer = []
    for i in range(M):
        row = flat[i * N : (i + 1) * N]
        inv = 1.0 / math.sqrt(math.fsum(v * v for v in row) / N + eps)
        answer.append([v * inv * g for v, g in zip(row, weight, strict=True)])
    _write(torch.tensor(answer, dtype=torch.float32), y)
