"""Calling the library, hidden from both layers (docs/cheats.md 9, a harder variant of c09).

The trick: PyTorch computes the answer (`rms_norm` and an `rsqrt` for the statistic) and a Triton copy
kernel writes it into the output, so launches are recorded and a no-op launch changes the output.
Against the runtime interception of ATen ops (a TorchDispatchMode) the library calls run inside
`torch.utils._python_dispatch._disable_current_modes()`, which pops every active dispatch mode for the
duration; against the static scan every name is reached with `getattr` and strings built at run time.

Defence that should name it: interception the candidate cannot switch off (checking the dispatch-mode
stack is intact after the call, or counting ATen compute below the Python dispatcher), with the static
scan as a second layer. Expected: `library_call`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"library_call"}
EXPECTED_RUNTIME = {"library_call"}
# Closed: the runner wraps the functions that take a dispatch mode off the stack and records any call of
# them while the candidate is watched (ferret/sandbox/watch.py, WatchEvasion): the evasion is the evidence.


def _get(obj, *parts):
    return getattr(obj, "".join(parts))


_modes = _get(_get(torch, "ut", "ils"), "_python", "_dispatch")
_functional = _get(_get(torch, "n", "n"), "func", "tional")


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    keep = offs < n
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=keep).to(dst_ptr.dtype.element_ty), mask=keep)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    eps = float(params["eps"])
    xf, wf = x.float(), w.float()
    with _get(_modes, "_disable", "_current", "_modes")():
        y32 = _get(_functional, "rms", "_norm")(xf, (x.shape[-1],), wf, eps).contiguous()
        mean_square = _get(_get(xf, "squ", "are")(), "me", "an")(-1)
        inv = _get(torch, "rsq", "rt")(_get(mean_square, "ad", "d")(eps)).contiguous()
    n = y32.numel()
    _copy_kernel[(triton.cdiv(n, 1024),)](y32, y, n, BLOCK=1024)
    if trace is not None:
        trace["inv_rms"] = inv
