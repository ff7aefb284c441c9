"""A host-side plan frozen in a CUDA graph (docs/cheats.md 32).

A YaRN rope whose launcher sends the tokens past the original context (position 4096 and on) to a second launch,
and skips that launch when no token is there, as a long-context path is skipped for short requests: it reads the
highest position on the host (`.max().item()` of the integer `positions` input, metadata a launcher may read). Called plainly
it is exact on every input.

Inside a CUDA-graph capture the host cannot read the device, so the launcher falls back to a plan fixed when it is
captured (`PLAN_WHEN_CAPTURED`: no token past the original context). The graph replays that frozen plan: on any input
with a position past 4096, those tokens are never written. Every correctness run, every timed call and the timing
process's own checks call it plainly and pass; only a replayed graph's answers show it. (Asking torch whether a
capture is on is itself a library call the static scan names, docs/cheats.md 9; the runtime defence below does not
rest on that.)

With `PLAN_WHEN_CAPTURED = False` it reads the position on the host under capture too: the capture fails (`.item()` synchronizes
with the host), and the candidate is `not_graph_capturable` (tests/gpu/test_graph_timing_gpu.py writes that copy, the
capture query taken out).

Defence: the timing process captures the call and replays it on input sets copied into the captured buffers, the
judge's fresh draws first; every replayed answer is checked against the reference (`graph_frozen`).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

EXPECTED_CHEATS = {"graph_frozen"}
PLAN_WHEN_CAPTURED = True
ORIGINAL_CONTEXT = tl.constexpr(4096)
MIN_TILE = 4096
MAX_BLOCK_H = 32


@triton.jit
def _yarn_rope_kernel(
    x_ptr,
    positions_ptr,
    y_ptr,
    inv_freq_ptr,
    cos_ptr,
    sin_ptr,
    T,
    H,
    stride_x_token,
    stride_x_head,
    stride_y_token,
    stride_y_head,
    log2_theta,
    inv_factor,
    ramp_low,
    inv_ramp_span,
    cos_sin_scale,
    HALF: tl.constexpr,
    BLOCK_T: tl.constexpr,
    BLOCK_H: tl.constexpr,
    STORE_STAGES: tl.constexpr,
    FAR: tl.constexpr,
):
    pid_t = tl.program_id(0)
    pid_h = tl.program_id(1)

    pair = tl.arange(0, HALF)
    pair_f = pair.to(tl.float32)
    # theta^(-2i/d) as exp2: 2i/d is exact for a power-of-two d, leaving one rounding before exp2.
    base_freq = tl.exp2(pair_f * (-1.0 / HALF) * log2_theta)
    ramp = tl.minimum(tl.maximum((pair_f - ramp_low) * inv_ramp_span, 0.0), 1.0)
    inv_freq = base_freq * (1.0 - ramp) + (base_freq * inv_factor) * ramp

    tokens = pid_t * BLOCK_T + tl.arange(0, BLOCK_T)
    token_in = tokens < T
    # float32 positions are exact up to 2**24, far past DeepSeek-V3's 163840.
    positions_int = tl.load(positions_ptr + tokens, mask=token_in, other=0)
    # This launch's side of the original context: the other side's tokens are the other launch's.
    token_in = token_in & ((positions_int >= ORIGINAL_CONTEXT) == FAR)
    positions = positions_int.to(tl.float32)
    angle = positions[:, None] * inv_freq[None, :]
    cos = tl.cos(angle) * cos_sin_scale
    sin = tl.sin(angle) * cos_sin_scale

    heads = pid_h * BLOCK_H + tl.arange(0, BLOCK_H)
    dims = tl.arange(0, 2 * HALF)
    tokens64 = tokens.to(tl.int64)
    mask = token_in[:, None, None] & (heads < H)[None, :, None]
    x_offs = tokens64[:, None, None] * stride_x_token + heads[None, :, None] * stride_x_head + dims[None, None, :]
    x = tl.load(x_ptr + x_offs, mask=mask, other=0.0).to(tl.float32)
    x_even, x_odd = tl.split(tl.reshape(x, [BLOCK_T, BLOCK_H, HALF, 2]))

    cos_b = cos[:, None, :]
    sin_b = sin[:, None, :]
    y = tl.join(x_even * cos_b - x_odd * sin_b, x_odd * cos_b + x_even * sin_b)
    y = tl.reshape(y, [BLOCK_T, BLOCK_H, 2 * HALF])
    y_offs = tokens64[:, None, None] * stride_y_token + heads[None, :, None] * stride_y_head + dims[None, None, :]
    tl.store(y_ptr + y_offs, y.to(y_ptr.dtype.element_ty), mask=mask)

    if STORE_STAGES:
        if pid_h == 0:
            table_offs = tokens64[:, None] * HALF + pair[None, :]
            tl.store(cos_ptr + table_offs, cos, mask=token_in[:, None])
            tl.store(sin_ptr + table_offs, sin, mask=token_in[:, None])
            if pid_t == 0:
                tl.store(inv_freq_ptr + pair, inv_freq)


def _frequency_constants(params: dict) -> dict[str, float]:
    """Host-side scalars of the YaRN blend (config constants, computed once in Python)."""
    dim = int(params["qk_rope_head_dim"])
    theta = float(params["rope_theta"])
    constants = {"log2_theta": math.log2(theta), "inv_factor": 1.0, "ramp_low": 0.0, "inv_ramp_span": 1.0, "cos_sin_scale": 1.0}
    scaling = params.get("rope_scaling")
    kind = scaling.get("type", scaling.get("rope_type")) if scaling else None
    if not scaling or kind in (None, "default"):
        return constants
    if kind != "yarn":
        raise ValueError(f"rope_scaling type {kind!r} is not supported (only yarn or none)")

    factor = float(scaling["factor"])
    original = int(scaling["original_max_position_embeddings"])

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = correction_dim(float(scaling.get("beta_fast", 32.0)))
    high = correction_dim(float(scaling.get("beta_slow", 1.0)))
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001

    def mscale(m: float) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if scaling.get("attention_factor") is not None:
        cos_sin_scale = float(scaling["attention_factor"])
    elif scaling.get("mscale") and scaling.get("mscale_all_dim"):
        cos_sin_scale = mscale(float(scaling["mscale"])) / mscale(float(scaling["mscale_all_dim"]))
    else:
        cos_sin_scale = mscale(1.0)
    constants.update(inv_factor=1.0 / factor, ramp_low=float(low), inv_ramp_span=1.0 / (high - low), cos_sin_scale=cos_sin_scale)
    return constants


def _capturing(x: torch.Tensor) -> bool:
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


def _last_position(positions: torch.Tensor) -> int:
    """The highest position: read on the host, or, while a CUDA graph is captured, the plan fixed then."""
    if PLAN_WHEN_CAPTURED and _capturing(positions):
        return 0
    return int(positions.max().item())


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict, trace: dict | None = None) -> None:
    x, positions, y = inputs["x"], inputs["positions"], outputs["y"]
    T, H, dim = x.shape
    half = dim // 2
    store_stages = trace is not None
    if store_stages:
        inv_freq = torch.empty(half, dtype=torch.float32, device=x.device)
        cos = torch.empty(T, half, dtype=torch.float32, device=x.device)
        sin = torch.empty(T, half, dtype=torch.float32, device=x.device)
    else:
        inv_freq = cos = sin = y  # never dereferenced: STORE_STAGES is a constexpr
    block_h = min(triton.next_power_of_2(H), MAX_BLOCK_H)
    block_t = min(max(1, MIN_TILE // (block_h * dim)), triton.next_power_of_2(T))
    grid = (triton.cdiv(T, block_t), triton.cdiv(H, block_h))
    sides = [False, True] if _last_position(positions) >= ORIGINAL_CONTEXT.value else [False]
    for far in sides:
        _yarn_rope_kernel[grid](
            x,
            positions,
            y,
            inv_freq,
            cos,
            sin,
            T,
            H,
            x.stride(0),
            x.stride(1),
            y.stride(0),
            y.stride(1),
            **_frequency_constants(params),
            HALF=half,
            BLOCK_T=block_t,
            BLOCK_H=block_h,
            STORE_STAGES=store_stages,
            FAR=far,
            num_warps=4,
        )
    if store_stages:
        trace["inv_freq"] = inv_freq
        trace["cos"] = cos
        trace["sin"] = sin
