"""Re-pointing an output with `set_` reached by a computed name (docs/cheats.md 28).

The trick: as `u2_set_to_library_answer.py`, but the answer comes from a real kernel into the candidate's own
buffer and `set_` is reached as `getattr(y, "se" + "t_")`, which no static pattern resolves.

Defence: a run-time property, not a pattern: after the call the output's storage and data_ptr are not the
ones the judge handed out (`ferret/sandbox/buffers.py`): `output_relabelled`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"output_relabelled"}
EXPECTED_RUNTIME = {"output_relabelled"}


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
    y = x * inv[:, None] * w[None, :]
    tl.store(y_ptr + rows64[:, None] * stride_y + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=mask)
    if STORE_INV:
        tl.store(inv_ptr + rows, inv, mask=row_in)


def _blocks(M, N):
    block_n = triton.next_power_of_2(N)
    return min(max(1, 4096 // block_n), triton.next_power_of_2(M)), block_n


def _launch(x, w, y, inv, eps, store_inv):
    M, N = x.shape
    block_m, block_n = _blocks(M, N)
    _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
        x, w, y, inv, M, N, x.stride(0), y.stride(0), eps, BLOCK_M=block_m, BLOCK_N=block_n, STORE_INV=store_inv
    )


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    inv = torch.empty(x.shape[0], dtype=torch.float32, device=x.device)
    mine = torch.empty_like(x)
    _launch(x, w, mine, inv, float(params["eps"]), True)
    getattr(y, "se" + "t_")(mine)
    if trace is not None:
        trace["inv_rms"] = inv
