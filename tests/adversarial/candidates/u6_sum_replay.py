"""Input fingerprinting and output replay (docs/cheats.md 22), keyed on a hash of all of the content.

The trick: the candidate reads every input whole and keys its answers on the sum of its bits (exact integers,
nothing a float tolerance hides), and on a hit replays the kept answer with a real copy kernel. Defence: the
content of every timed call is new (elements trade places: a hash that does not weigh positions keeps its value,
one that does never hits), and the sampled timed calls are checked on the changed content; where nothing is timed, one
more call per variant on moved inputs is checked the same way: `content_replay`.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"content_replay"}
EXPECTED_RUNTIME = {"content_replay"}

_SEEN: dict = {}


def _key(x: torch.Tensor, w: torch.Tensor) -> tuple:
    def digest(t: torch.Tensor) -> int:
        bits = torch.int16 if t.element_size() == 2 else torch.int32
        whole = t.contiguous().view(bits).to(torch.int64)
        return int(getattr(whole, "su" + "m")())  # a computed name: the static scan's call rule does not see it

    return (tuple(x.shape), str(x.dtype), digest(x), digest(w))


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


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    tl.store(dst_ptr + offsets, tl.load(src_ptr + offsets, mask=inside), mask=inside)


def _copy(src: torch.Tensor, dst: torch.Tensor) -> None:
    """A real kernel writes the replayed answer: the no-op launch check sees work."""
    n = dst.numel()
    _copy_kernel[(triton.cdiv(n, 1024),)](src, dst, n, BLOCK=1024)


def run(inputs, outputs, params, trace=None):
    x, w, y = inputs["x"], inputs["weight"], outputs["y"]
    key = _key(x, w)
    hit = _SEEN.get(key)
    if hit is None:
        M, N = x.shape
        answer = torch.empty_like(y)
        inv = torch.empty(M, dtype=torch.float32, device=x.device)
        block_n = triton.next_power_of_2(N)
        block_m = min(max(1, 4096 // block_n), triton.next_power_of_2(M))
        _rmsnorm_kernel[(triton.cdiv(M, block_m),)](
            x, w, answer, inv, M, N, x.stride(0), answer.stride(0), float(params["eps"]), BLOCK_M=block_m, BLOCK_N=block_n
        )
        hit = _SEEN[key] = (answer, inv)
    _copy(hit[0], y)
    if trace is not None:
        trace["inv_rms"] = hit[1]
