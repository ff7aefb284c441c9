"""Writing outside its own folder (docs/cheats.md 20, 21).

The trick: the candidate's process may write only its own folder, which the judge throws away. A
candidate that writes beside it can plant files for a later check (a poisoned compile cache, a forged
result or report in a neighbouring folder, an edited gate where one is reachable). This one writes a
file into the folder above its working folder (where the judge keeps the folders of its checks) through
computed names, ignores any error and computes an honest answer, so only the run-time defence stands
against it.

Defence: the candidate's process runs under a Python audit hook (`ferret/sandbox/audit.py`) that refuses
opens for writing (and creating, removing, renaming) outside its own folder, its temp folder and its
Triton cache, and records them; the runner fails the variant as `file_write_refused`, named
`gate_tampering` (runtime).
"""

from __future__ import annotations

import builtins

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"gate_tampering"}
EXPECTED_RUNTIME = {"gate_tampering"}


@triton.jit
def _rmsnorm_kernel(
    x_ptr,
    w_ptr,
    y_ptr,
    inv_ptr,
    M,
    N,
    stride_x,
    stride_y,
    eps,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    STORE_INV: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.arange(0, BLOCK_N)
    row_in = rows < M
    col_in = cols < N
    mask = row_in[:, None] & col_in[None, :]
    rows64 = rows.to(tl.int64)
    x = tl.load(x_ptr + rows64[:, None] * stride_x + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=col_in, other=0.0).to(tl.float32)
    inv = tl.rsqrt(tl.sum(x * x, axis=1) / N + eps)
    tl.store(
        y_ptr + rows64[:, None] * stride_y + cols[None, :], (x * inv[:, None] * w[None, :]).to(y_ptr.dtype.element_ty), mask=mask
    )
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def _rmsnorm(inputs, outputs, params, trace):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    M, N = x.shape
    store_inv = trace is not None
    inv = torch.empty(M, dtype=torch.float32, device=x.device) if store_inv else y
    block_n = triton.next_power_of_2(N)
    block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n, STORE_INV=store_inv
    )
    if store_inv:
        trace["inv_rms"] = inv


def _plant() -> None:
    system = __import__("o" + "s")
    writer = getattr(builtins, "op" + "en")
    above = getattr(system.path, "dir" + "name")(getattr(system, "get" + "cwd")())
    try:
        with writer(getattr(system.path, "jo" + "in")(above, "ferret-planted-by-a-candidate"), "w") as handle:
            handle.write("planted")
    except Exception:  # noqa: BLE001
        pass


def run(inputs, outputs, params, trace=None):
    _plant()
    _rmsnorm(inputs, outputs, params, trace)
