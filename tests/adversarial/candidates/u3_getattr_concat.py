"""Reaching torch's compute through attribute names built at run time (docs/cheats.md 29).

The trick: `getattr(torch, "rs" + "qrt")`, `getattr(x, "p" + "ow")`: the scan's tables name `torch.rsqrt` and
`.pow`, but these paths are spelled only when the code runs. PyTorch computes the RMSNorm and a Triton copy kernel
writes it into y, so launches are counted and a no-op launch changes the output.

Defence that should name it: the ATen watch sees torch's compute however it was reached (`library_call`, at run
time); the scan names the computed attribute name (`dynamic_access`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"dynamic_access", "library_call"}
EXPECTED_RUNTIME = {"library_call"}


def _name(*parts):
    return "".join(parts)


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
    eps = float(params["eps"])
    squares = getattr(x, _name("p", "ow"))(2)
    mean = getattr(squares, _name("me", "an"))(-1, keepdim=True)
    inv = getattr(torch, _name("rs", "qrt"))(getattr(mean, _name("ad", "d"))(eps))
    _write(getattr(getattr(x, _name("m", "ul"))(inv), _name("m", "ul"))(w), y)
    if trace is not None:
        trace["inv_rms"] = inv.reshape(-1).contiguous()
