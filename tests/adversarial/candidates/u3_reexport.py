"""Reaching torch through a module that re-exports it (docs/cheats.md 29).

The trick: `torch.backends.cuda` imports `torch`, so `torch.backends.cuda.torch` is torch under another path; the
launcher calls `rsqrt` and `mean` through it. A Triton copy kernel writes the answer.

Defence that should name it: the ATen watch (`library_call`, at run time); the scan names the module reached as an
attribute of another (`dynamic_access`).
"""

from __future__ import annotations

import torch.backends.cuda as _backend
import triton
import triton.language as tl

EXPECTED_CHEATS = {"dynamic_access", "library_call"}
EXPECTED_RUNTIME = {"library_call"}

_lib = _backend.torch  # pyright: ignore[reportPrivateImportUsage]  (the re-export is the cheat)


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
    inv = _lib.rsqrt(_lib.mean(x * x, -1, keepdim=True) + float(params["eps"]))
    _write(x * inv * w, y)
