"""Reaching torch's compute through a namespace read as a dict (docs/cheats.md 29).

The trick: `vars(torch)["mean"]` and `torch.__dict__["rsqrt"]`: a function looked up by a key, never as an
attribute the scan resolves. PyTorch computes the RMSNorm and a Triton copy kernel writes it.

Defence that should name it: the ATen watch (`library_call`, at run time); the scan names the namespace reads
(`dynamic_access`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"dynamic_access", "library_call"}
EXPECTED_RUNTIME = {"library_call"}

_TORCH = vars(torch)
_SPACE = torch.__dict__


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
    key = "".join(["rs", "qrt"])
    mean = _TORCH["me" + "an"](x * x, -1, keepdim=True)
    inv = _SPACE[key](mean + float(params["eps"]))
    _write(x * inv * w, y)
    if trace is not None:
        trace["inv_rms"] = inv.reshape(-1).contiguous()
