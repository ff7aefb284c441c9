"""`torch.Tensor.numpy` reached by `getattr` on the class, the math done on the NumPy array's buffer (docs/cheats.md 31).

The trick: `getattr(torch.Tensor, "num" + "py")(x)` is the unbound method, called with the tensor: no `.numpy()` for
the scan to see. The array's methods (`mean`, arithmetic) compute the RMSNorm on the host; `torch.tensor` and a
Triton copy kernel write it.

Defence that should name it: the host-numerics watch sees the method however it was fetched (`host_numerics`, at
run time); the scan names the computed attribute name (`dynamic_access`).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"host_numerics", "dynamic_access"}
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
    to_host = getattr(torch.Tensor, "num" + "py")
    xs = to_host(inputs["x"].float())
    ws = to_host(inputs["weight"].float())
    inv = ((xs * xs).mean(axis=-1, keepdims=True) + float(params["eps"])) ** -0.5
    _write(torch.tensor(xs * inv * ws), outputs["y"])
