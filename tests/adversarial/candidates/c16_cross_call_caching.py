"""Caching results across calls (docs/cheats.md 16).

The trick: a benchmark calls the kernel many times on the same buffers, so the candidate keeps each
result keyed on the input's address (and, for buffers that moved, on a cheap fingerprint of a few
sampled values) and replays it without launching anything when it sees the same input again.

Defence: fresh inputs at fresh addresses for every timed call (GPU), outputs checked after every call,
the launch check (a call whose launches are all no-ops must not produce the same output) and the static
rule on `data_ptr` / state kept across calls. The gate reports `cross_call_caching` (static) and
`decoy_kernel` (runtime: with every launch a no-op the replayed output is unchanged).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"cross_call_caching", "decoy_kernel"}
EXPECTED_RUNTIME = {"decoy_kernel"}

_RESULTS = {}


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, y_ptr, inv_ptr, M, N, stride_x, stride_y, eps, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
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
    tl.store(inv_ptr + rows, inv, mask=row_in)


def _fingerprint(x: torch.Tensor) -> tuple:
    flat = x.reshape(-1)
    picks = sorted({0, flat.numel() // 3, flat.numel() // 2, flat.numel() - 1})
    return (tuple(x.shape), str(x.dtype)) + tuple(float(flat[i].item()) for i in picks)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    by_address = ("ptr", x.data_ptr(), w.data_ptr(), tuple(x.shape), str(x.dtype))
    by_values = ("fp", _fingerprint(x), _fingerprint(w))
    hit = _RESULTS.get(by_address) or _RESULTS.get(by_values)
    if hit is None:
        M, N = x.shape
        out = torch.empty_like(y)
        inv = torch.empty(M, dtype=torch.float32, device=x.device)
        block_n = triton.next_power_of_2(N)
        block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
        _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
            x,
            w,
            out,
            inv,
            M,
            N,
            x.stride(0),
            out.stride(0),
            float(params["eps"]),
            BLOCK_M=block_m,
            BLOCK_N=block_n,
        )
        hit = (out, inv)
        _RESULTS[by_address] = hit
        _RESULTS[by_values] = hit
    y.copy_(hit[0])
    if trace is not None:
        trace["inv_rms"] = hit[1]
