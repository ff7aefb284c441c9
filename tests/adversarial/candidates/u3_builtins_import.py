"""Importing `torch.nn.functional` through `__builtins__["__import__"]` (docs/cheats.md 29).

The trick: the module's `__builtins__` is a dict in an imported module; its `__import__` imports a module named by a
string built at run time, so no import statement names it. PyTorch computes the answer and a Triton copy kernel
writes it.

Defence that should name it: the ATen watch (`library_call`, at run time); the scan names the namespace read
(`dynamic_access`).
"""

from __future__ import annotations

import triton
import triton.language as tl

EXPECTED_CHEATS = {"dynamic_access", "library_call"}
EXPECTED_RUNTIME = {"library_call"}


def _module(*parts):
    namespace = __builtins__ if isinstance(__builtins__, dict) else vars(__builtins__)
    return namespace["__imp" + "ort__"](".".join(parts), fromlist=["_"])


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
    functional = _module("torch", "nn", "functional")
    _write(functional.rms_norm(x, (x.shape[-1],), w, float(params["eps"])), y)
