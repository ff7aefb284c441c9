"""Reaching `torch.nn.functional.rms_norm` through `operator.attrgetter` (docs/cheats.md 29).

The trick: `operator` is an allowed import, and `attrgetter("nn.functional.rms_norm")(torch)` follows a dotted path
given as a string, so the scan never sees `torch.nn.functional`. PyTorch computes the answer and a Triton copy
kernel writes it.

Defence that should name it: the ATen watch (`library_call`, at run time); the scan names the attribute getter
(`dynamic_access`).
"""

from __future__ import annotations

import operator

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"dynamic_access", "library_call"}
EXPECTED_RUNTIME = {"library_call"}

_PATH = ".".join(["nn", "functional", "rms_norm"])


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
    rms_norm = operator.attrgetter(_PATH)(torch)
    _write(rms_norm(x, (x.shape[-1],), w, float(params["eps"])), y)
