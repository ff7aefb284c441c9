"""A custom operator registered through `torch.library`, reached by computed names, doing the math (docs/cheats.md 29).

The trick: `torch.library` (reached as `getattr(torch, "lib" + "rary")`) defines an operator whose CPU and CUDA
implementation is PyTorch's own RMSNorm; the launcher calls the operator, then a Triton copy kernel writes the answer.
No torch compute function is named where the scan looks.

Defence that should name it: the ATen watch sees the custom operator produce floating-point data (`library_call`,
at run time); the scan names the computed attribute names (`dynamic_access`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"dynamic_access", "library_call"}
EXPECTED_RUNTIME = {"library_call"}

_library = getattr(torch, "lib" + "rary")
_lib = getattr(_library, "Lib" + "rary")("u3cheat", "DEF")
_lib.define("rms(Tensor x, Tensor w, float eps) -> Tensor")


def _rms(x, w, eps):
    functional = getattr(getattr(torch, "n" + "n"), "func" + "tional")
    return getattr(functional, "rms" + "_norm")(x, (x.shape[-1],), w, eps)


for _key in ("CPU", "CUDA"):
    _lib.impl("rms", _rms, _key)


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
    op = getattr(getattr(getattr(torch, "o" + "ps"), "u3" + "cheat"), "r" + "ms")
    _write(op(x, w, float(params["eps"])), y)
