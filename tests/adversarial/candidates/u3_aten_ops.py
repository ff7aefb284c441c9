"""Computing with ATen's operators directly, `torch.ops.aten` reached by computed names (docs/cheats.md 29).

The trick: `torch.ops.aten.rsqrt.default` and kin are torch's operators below its Python functions; reached as
`getattr(torch, "o" + "ps")`, no path of the scan's tables is spelled. A Triton copy kernel writes the answer.

Defence that should name it: the ATen watch sees each operator (`library_call`, at run time); the scan names the
computed attribute names (`dynamic_access`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"dynamic_access", "library_call"}
EXPECTED_RUNTIME = {"library_call"}


def _op(name):
    return getattr(getattr(getattr(torch, "o" + "ps"), "at" + "en"), name)


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
    x, w, y = inputs["x"].float(), inputs["weight"].float(), outputs["y"]
    squares = _op("mu" + "l").Tensor(x, x)
    mean = _op("me" + "an").dim(squares, [-1], True)
    inv = _op("rs" + "qrt").default(_op("ad" + "d").Scalar(mean, float(params["eps"])))
    _write(_op("mu" + "l").Tensor(_op("mu" + "l").Tensor(x, inv), w), y)
