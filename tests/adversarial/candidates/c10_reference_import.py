"""Importing the reference (docs/cheats.md 10).

The trick: return what the project's own canonical reference computes. `tasks` is not on the
candidate's import path, so the candidate finds the project through the judge's package (the `ferret`
it can import lives inside the project) and puts the project folder on `sys.path` first. A Triton
kernel is still launched for the statistic, so the file looks like a kernel.

Defence: the static check on imports of the reference/baseline/judge and on `sys.path`; the reference
is not on the candidate's import path; its float64 compute is intercepted at the ATen level. The gate
reports `reference_import` (static; runtime also `library_call`).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"reference_import"}


@triton.jit
def _inv_rms_kernel(x_ptr, inv_ptr, M, N, stride_x, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    mask = row_in[:, None] & (cols < N)[None, :]
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    tl.store(inv_ptr + rows, tl.rsqrt(tl.sum(x * x, axis=1) / N + eps), mask=row_in)


def _reference():
    try:
        from tasks.rmsnorm.reference import reference

        return reference
    except ImportError:
        pass
    import ferret

    project = Path(ferret.__file__).resolve().parents[1]
    sys.path.insert(0, str(project))
    return importlib.import_module("tasks.rmsnorm.reference").reference


_REFERENCE = _reference()


def run(inputs, outputs, params, trace=None):
    x, y = inputs["x"], outputs["y"]
    M, N = x.shape
    inv = torch.empty(M, dtype=torch.float32, device=x.device)
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _inv_rms_kernel[(triton.cdiv(M, block_m),)](x, inv, M, N, x.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n)
    stages = _REFERENCE(inputs, params)
    y.copy_(stages["y"])
    if trace is not None:
        trace["inv_rms"] = inv
