"""Host numerics with the host-numerics watch taken off its stack first (docs/cheats.md 31).

The trick: the watch is a torch-function mode; `torch.overrides._pop_mode_temporarily()` (reached by computed names)
takes the innermost mode off the stack for the duration, so `.tolist()` inside it is seen by nobody. The RMSNorm is
done in Python lists and a Triton copy kernel writes it.

Defence that should name it: the functions that pop a torch-function mode are wrapped, and a call of them from
outside torch's own code while the candidate is watched is recorded (`host_numerics`, at run time); the scan names
the computed names (`dynamic_access`).
"""

from __future__ import annotations

import contextlib
import math

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"host_numerics", "dynamic_access"}
EXPECTED_RUNTIME = {"host_numerics"}

_modes = getattr(torch, "over" + "rides")


def _unwatched():
    """The innermost torch-function mode taken off the stack while the block runs, where there is one."""
    if getattr(_modes, "_get_current_function_" + "mode")() is None:
        return contextlib.nullcontext()
    return getattr(_modes, "_pop_mode_" + "temporarily")()


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
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    with _unwatched():
        rows, weight = x.float().tolist(), w.float().tolist()
    eps = float(params["eps"])
    answer = []
    for row in rows:
        inv = 1.0 / math.sqrt(math.fsum(v * v for v in row) / len(row) + eps)
        answer.append([v * inv * g for v, g in zip(row, weight, strict=True)])
    _write(torch.tensor(answer, dtype=torch.float32), y)
