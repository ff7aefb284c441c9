"""Reading the expected answer by a computed path (docs/cheats.md 11).

The trick: golden answers are files somewhere above the candidate's working folder (a gates folder, a
neighbouring check, another checkout). The candidate builds its paths from pieces the static scan does
not recognise (`getattr(__builtins__...)` for `open`, `os` by a computed import), walks up from its
working folder listing what it finds, and reads a file it knows exists outside its folder. Whatever it
cannot read it skips, and it computes an honest answer, so only the run-time defence stands against it.

Defence: the candidate's process runs under a Python audit hook (`ferret/sandbox/audit.py`) that refuses
reads and listings outside its own folder, the Python runtime and installed packages, /proc, /sys, /dev,
its Triton cache and CUDA folders, and records them; the runner fails the variant as `file_read_refused`,
named `reading_expected` (runtime).
"""

from __future__ import annotations

import builtins

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"reading_expected"}
EXPECTED_RUNTIME = {"reading_expected"}


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


def _peek() -> int:
    system = __import__("o" + "s")
    reader = getattr(builtins, "op" + "en")
    found = 0
    here = getattr(system, "get" + "cwd")()
    for _ in range(3):
        here = getattr(system.path, "dir" + "name")(here)
        try:
            found += len(getattr(system, "list" + "dir")(here))
        except Exception:  # noqa: BLE001
            pass
    for name in ("/".join(["", "etc", "pass" + "wd"]), "/".join(["", "etc", "host" + "name"])):
        try:
            with reader(name, "rb") as handle:
                found += len(handle.read(64))
        except Exception:  # noqa: BLE001
            pass
    return found


def run(inputs, outputs, params, trace=None):
    _peek()
    _rmsnorm(inputs, outputs, params, trace)
