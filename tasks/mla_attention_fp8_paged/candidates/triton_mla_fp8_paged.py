"""Triton candidate: one DeepSeek-V3 MLA decode step in the absorbed form over a paged FP8 cache.

The FP8 candidate's first, one-split design (tasks/mla_attention_fp8/candidates/triton_mla_fp8.py has since split its
attention) with its rows addressed through the block table: logical row t of request b is row t % 64 of page
block_table[b, t // 64] in each of the three pools.

Four kernels, in stream order:
  1. _append_kernel     kv_a_layernorm of the new latent (fp32, rounded to bf16 as the contract's c_kv), its
                        quantization (scale = amax / 448 per 128 values, codes rounded to e4m3 to nearest even,
                        written as bits through a uint8 view), the YaRN rope of k_pe into the bf16 rope cache
  2. _query_kernel      q_abs = q_nope @ W_UK_h per head and the YaRN rope of q_pe, packed as q [B, H, 576] bf16
  3. _attention_kernel  one program per (request, head block) walks the request's tiles: codes times their
                        scale, rounded to bf16 for the products; online softmax in fp32, fp32 accumulator
  4. _unabsorb_kernel   o_heads = o_latent @ W_UV_h^T per head
Traced runs launch the same kernels, then one trace-only kernel recomputing the scores (the same tile helper)
and turning them into probabilities with kernel 3's own log-sum-exp.

Small and plain on purpose (one split per request): it exists to show the contract is met, not to be fast.
"""
from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

KV_LORA_RANK = 512
QK_NOPE_HEAD_DIM = 128
QK_ROPE_HEAD_DIM = 64
V_HEAD_DIM = 128
SCALE_BLOCK = 128
PAGE = 64
E4M3_MAX = tl.constexpr(448.0)
_LOG2E = 1.4426950408889634
_TWO_PI_HI = tl.constexpr(6.28125)
_TWO_PI_LO = tl.constexpr(0.0019353071795864769)
_INV_TWO_PI = tl.constexpr(0.15915494309189535)


def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


def _rope_inv_freq_values(params: dict) -> list[float]:
    dim, base = params["qk_rope_head_dim"], float(params["rope_theta"])
    plain = [base ** (-2.0 * i / dim) for i in range(dim // 2)]
    yarn = params.get("rope_scaling")
    if not yarn:
        return plain
    original = yarn["original_max_position_embeddings"]

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(yarn["beta_fast"])), 0)
    high = min(math.ceil(correction_dim(yarn["beta_slow"])), dim - 1)
    width = (high - low) if high != low else 0.001
    ramp = [min(max((i - low) / width, 0.0), 1.0) for i in range(dim // 2)]
    return [f * (1.0 - r) + f / yarn["factor"] * r for f, r in zip(plain, ramp, strict=True)]


_inv_freq_by_device: dict[tuple, torch.Tensor] = {}


def _inv_freq(params: dict, device: torch.device) -> torch.Tensor:
    """The fp32 frequencies on the device, made once (a copy from the host cannot run inside a CUDA graph)."""
    key = (str(device), params["rope_theta"], params["qk_rope_head_dim"], repr(params.get("rope_scaling")))
    if key not in _inv_freq_by_device:
        _inv_freq_by_device[key] = torch.tensor(_rope_inv_freq_values(params), dtype=torch.float32, device=device)
    return _inv_freq_by_device[key]


def _rope_magnitude(params: dict) -> float:
    yarn = params.get("rope_scaling")
    if not yarn:
        return 1.0
    if yarn.get("mscale") and yarn.get("mscale_all_dim"):
        return _yarn_mscale(yarn["factor"], yarn["mscale"]) / _yarn_mscale(yarn["factor"], yarn["mscale_all_dim"])
    return _yarn_mscale(yarn["factor"], 1.0)


def _softmax_scale(params: dict) -> float:
    scale = 1.0 / math.sqrt(params["qk_nope_head_dim"] + params["qk_rope_head_dim"])
    yarn = params.get("rope_scaling")
    if yarn and yarn.get("mscale_all_dim"):
        m = _yarn_mscale(yarn["factor"], yarn["mscale_all_dim"])
        scale *= m * m
    return scale


# Triton 3.9's CPU interpreter multiplies bf16 bit patterns in tl.dot and truncates fp32 -> bf16 casts; these
# helpers make it compute what the GPU computes, and compile to the plain operation there.
@triton.jit
def _dot_operand(x, INTERPRETED: tl.constexpr):
    if INTERPRETED:
        return x.to(tl.float32)
    return x


@triton.jit
def _round_to(x, dtype: tl.constexpr, INTERPRETED: tl.constexpr):
    if INTERPRETED:
        if dtype == tl.bfloat16:
            bits = x.to(tl.uint32, bitcast=True)
            # the low half cleared too: the value is then a bf16 value, which any cast keeps (a zero stays zero)
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
            x = bits.to(tl.float32, bitcast=True)
    return x.to(dtype)


@triton.jit
def _power_of_two(exponent):
    """2^exponent (int32, a normal float32's range) as float32, built from its bits: exact everywhere."""
    return ((exponent + 127) << 23).to(tl.float32, bitcast=True)


@triton.jit
def _e4m3_bits(x):
    """The e4m3fn code of fp32 x rounded to nearest, ties to even, saturating at 448, as its 8 bits (int32):
    computed exactly in integers and powers of two (the interpreter's fp8 cast neither rounds ties to even nor
    keeps subnormals)."""
    magnitude = tl.minimum(tl.abs(x), E4M3_MAX)
    exponent = tl.maximum(((magnitude.to(tl.int32, bitcast=True) >> 23) & 0xFF) - 127, -6)
    steps = magnitude * _power_of_two(3 - exponent)  # magnitude / ulp, exact: [0, 16)
    whole = tl.floor(steps)
    frac = steps - whole
    odd = (whole.to(tl.int32) & 1) == 1
    whole = tl.where((frac > 0.5) | ((frac == 0.5) & odd), whole + 1.0, whole)
    rounded = tl.minimum(whole * _power_of_two(exponent - 3), E4M3_MAX)
    bits = rounded.to(tl.int32, bitcast=True)
    normal = (((bits >> 23) & 0xFF) - 120) * 8 + ((bits >> 20) & 7)
    code = tl.where(rounded >= 0.015625, normal, whole.to(tl.int32))  # below 2^-6: subnormal, whole = code
    return tl.where(x < 0, code | 0x80, code)


@triton.jit
def _cos_sin(angle):
    turns = tl.floor(angle * _INV_TWO_PI + 0.5)
    reduced = (angle - turns * _TWO_PI_HI) - turns * _TWO_PI_LO
    return tl.cos(reduced), tl.sin(reduced)


@triton.jit
def _append_kernel(
    kv_a_ptr, gamma_ptr, inv_freq_ptr, positions_ptr, cache_lens_ptr, codes_ptr, scale_ptr, rope_ptr, c_kv_ptr,
    block_table_ptr, max_blocks, eps, rope_magnitude,
    RANK: tl.constexpr, ROPE: tl.constexpr, BLOCK: tl.constexpr, PAGE_ROWS: tl.constexpr, INTERPRETED: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    length = tl.load(cache_lens_ptr + b).to(tl.int64)
    page = tl.load(block_table_ptr + b * max_blocks + length // PAGE_ROWS).to(tl.int64)
    row = page * PAGE_ROWS + length % PAGE_ROWS  # the new token's row of the pools
    blocks = tl.arange(0, RANK // BLOCK)
    offs = blocks[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]  # [4, 128]: one scale block a row
    latent = tl.load(kv_a_ptr + b * (RANK + ROPE) + offs).to(tl.float32)
    mean_square = tl.sum(tl.sum(latent * latent, axis=1), axis=0) / RANK
    latent = latent * tl.rsqrt(mean_square + eps) * tl.load(gamma_ptr + offs).to(tl.float32)
    c_kv = _round_to(latent, c_kv_ptr.dtype.element_ty, INTERPRETED)
    tl.store(c_kv_ptr + b * RANK + offs, c_kv)
    value = c_kv.to(tl.float32)
    # Correctly rounded divisions (a GPU's `/` is approximate): the contract's value / scale is float32's.
    scale = tl.math.div_rn(tl.max(tl.abs(value), axis=1), tl.full([RANK // BLOCK], 448.0, tl.float32))
    ratio = tl.math.div_rn(value, tl.broadcast_to(tl.where(scale > 0, scale, 1.0)[:, None], (RANK // BLOCK, BLOCK)))
    tl.store(codes_ptr + row * RANK + offs, _e4m3_bits(ratio).to(tl.uint8))
    tl.store(scale_ptr + row * (RANK // BLOCK) + blocks, scale)

    pair = tl.arange(0, ROPE // 2)
    even = tl.load(kv_a_ptr + b * (RANK + ROPE) + RANK + 2 * pair).to(tl.float32)
    odd = tl.load(kv_a_ptr + b * (RANK + ROPE) + RANK + 2 * pair + 1).to(tl.float32)
    cos, sin = _cos_sin(tl.load(positions_ptr + b).to(tl.float32) * tl.load(inv_freq_ptr + pair))
    cos = cos * rope_magnitude
    sin = sin * rope_magnitude
    out_dtype = rope_ptr.dtype.element_ty
    tl.store(rope_ptr + row * ROPE + 2 * pair, _round_to(even * cos - odd * sin, out_dtype, INTERPRETED))
    tl.store(rope_ptr + row * ROPE + 2 * pair + 1, _round_to(odd * cos + even * sin, out_dtype, INTERPRETED))


@triton.jit
def _query_kernel(
    q_nope_ptr, q_pe_ptr, w_kv_b_ptr, inv_freq_ptr, positions_ptr, q_ptr, batch, heads, rope_magnitude,
    RANK: tl.constexpr, NOPE: tl.constexpr, ROPE: tl.constexpr, V_DIM: tl.constexpr, BLOCK_B: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    h = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < batch
    out_dtype = q_ptr.dtype.element_ty
    q_rows = q_ptr + (rows[:, None] * heads + h) * (RANK + ROPE)
    nope = tl.arange(0, NOPE)
    q_nope = tl.load(q_nope_ptr + (rows[:, None] * heads + h) * NOPE + nope[None, :], mask=row_mask[:, None], other=0.0)
    cols = tl.arange(0, RANK)
    w_uk = tl.load(w_kv_b_ptr + (h * (NOPE + V_DIM) + nope)[:, None] * RANK + cols[None, :])
    q_abs = tl.dot(_dot_operand(q_nope, INTERPRETED), _dot_operand(w_uk, INTERPRETED))
    tl.store(q_rows + cols[None, :], _round_to(q_abs, out_dtype, INTERPRETED), mask=row_mask[:, None])

    pair = tl.arange(0, ROPE // 2)
    pe_rows = q_pe_ptr + (rows[:, None] * heads + h) * ROPE
    even = tl.load(pe_rows + 2 * pair[None, :], mask=row_mask[:, None], other=0.0).to(tl.float32)
    odd = tl.load(pe_rows + 2 * pair[None, :] + 1, mask=row_mask[:, None], other=0.0).to(tl.float32)
    pos = tl.load(positions_ptr + rows, mask=row_mask, other=0).to(tl.float32)
    cos, sin = _cos_sin(pos[:, None] * tl.load(inv_freq_ptr + pair)[None, :])
    cos = cos * rope_magnitude
    sin = sin * rope_magnitude
    tl.store(q_rows + RANK + 2 * pair[None, :], _round_to(even * cos - odd * sin, out_dtype, INTERPRETED),
             mask=row_mask[:, None])
    tl.store(q_rows + RANK + 2 * pair[None, :] + 1, _round_to(odd * cos + even * sin, out_dtype, INTERPRETED),
             mask=row_mask[:, None])


@triton.jit
def _tile(q_latent, q_rope, codes_ptr, scale_ptr, rope_ptr, block_table_ptr, b, t, tokens, max_blocks,
          RANK: tl.constexpr, ROPE: tl.constexpr, BLOCK: tl.constexpr, PAGE_ROWS: tl.constexpr,
          INTERPRETED: tl.constexpr):
    """One tile of logical rows t of request b: (its latent dequantized and rounded to q's bf16 for the products,
    the raw logits [heads, tile] in fp32, which rows are attended). Rows are found through the block table."""
    visible = t < tokens
    pages = tl.load(block_table_ptr + b.to(tl.int64) * max_blocks + t // PAGE_ROWS, mask=visible, other=0)
    rows = pages.to(tl.int64) * PAGE_ROWS + (t % PAGE_ROWS).to(tl.int64)
    cols = tl.arange(0, RANK)
    codes = tl.load(codes_ptr + rows[:, None] * RANK + cols[None, :], mask=visible[:, None], other=0.0)
    scales = tl.load(scale_ptr + rows[:, None] * (RANK // BLOCK) + cols[None, :] // BLOCK, mask=visible[:, None],
                     other=0.0)
    latent = _round_to(codes.to(tl.float32) * scales, q_latent.dtype, INTERPRETED)
    rope = tl.load(rope_ptr + rows[:, None] * ROPE + tl.arange(0, ROPE)[None, :], mask=visible[:, None], other=0.0)
    logits = tl.dot(_dot_operand(q_latent, INTERPRETED), tl.trans(_dot_operand(latent, INTERPRETED)))
    logits = tl.dot(_dot_operand(q_rope, INTERPRETED), tl.trans(_dot_operand(rope, INTERPRETED)), acc=logits)
    return latent, logits, visible


@triton.jit
def _queries(q_ptr, b, h, h_mask, heads, RANK: tl.constexpr, ROPE: tl.constexpr):
    q_rows = q_ptr + (b * heads + h[:, None]) * (RANK + ROPE)
    q_latent = tl.load(q_rows + tl.arange(0, RANK)[None, :], mask=h_mask[:, None], other=0.0)
    q_rope = tl.load(q_rows + RANK + tl.arange(0, ROPE)[None, :], mask=h_mask[:, None], other=0.0)
    return q_latent, q_rope


@triton.jit
def _attention_kernel(
    q_ptr, codes_ptr, scale_ptr, rope_ptr, block_table_ptr, cache_lens_ptr, o_latent_ptr, lse_ptr, heads, max_blocks,
    qk_scale_log2,
    RANK: tl.constexpr, ROPE: tl.constexpr, BLOCK: tl.constexpr, PAGE_ROWS: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, INTERPRETED: tl.constexpr,
):
    b = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < heads
    tokens = tl.load(cache_lens_ptr + b) + 1
    q_latent, q_rope = _queries(q_ptr, b, h, h_mask, heads, RANK, ROPE)
    row_max = tl.full([BLOCK_H], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, RANK], tl.float32)
    for start in range(0, tokens, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        latent, logits, visible = _tile(q_latent, q_rope, codes_ptr, scale_ptr, rope_ptr, block_table_ptr, b, t, tokens,
                                        max_blocks, RANK, ROPE, BLOCK, PAGE_ROWS, INTERPRETED)
        logits = tl.where(visible[None, :], logits * qk_scale_log2, float("-inf"))
        new_max = tl.maximum(row_max, tl.max(logits, axis=1))
        correction = tl.exp2(row_max - new_max)
        p = tl.exp2(logits - new_max[:, None])
        total = total * correction + tl.sum(p, axis=1)
        p_operand = _round_to(p, latent.dtype, INTERPRETED)
        acc = tl.dot(_dot_operand(p_operand, INTERPRETED), _dot_operand(latent, INTERPRETED), acc=acc * correction[:, None])
        row_max = new_max
    out = acc / total[:, None]
    cols = tl.arange(0, RANK)
    tl.store(o_latent_ptr + (b * heads + h[:, None]) * RANK + cols[None, :],
             _round_to(out, o_latent_ptr.dtype.element_ty, INTERPRETED), mask=h_mask[:, None])
    tl.store(lse_ptr + b * heads + h, row_max + tl.log2(total), mask=h_mask)


@triton.jit
def _unabsorb_kernel(
    latent_ptr, w_kv_b_ptr, out_ptr, batch, heads,
    RANK: tl.constexpr, NOPE: tl.constexpr, V_DIM: tl.constexpr, BLOCK_B: tl.constexpr, INTERPRETED: tl.constexpr,
):
    h = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < batch
    r = tl.arange(0, RANK)
    v = tl.arange(0, V_DIM)
    latent = tl.load(latent_ptr + (rows[:, None] * heads + h) * RANK + r[None, :], mask=row_mask[:, None], other=0.0)
    w_uv = tl.load(w_kv_b_ptr + (h * (NOPE + V_DIM) + NOPE + v)[None, :] * RANK + r[:, None])  # W_UV_h^T [RANK, V]
    out = tl.dot(_dot_operand(latent, INTERPRETED), _dot_operand(w_uv, INTERPRETED))
    tl.store(out_ptr + (rows[:, None] * heads + h) * V_DIM + v[None, :],
             _round_to(out, out_ptr.dtype.element_ty, INTERPRETED), mask=row_mask[:, None])


@triton.jit
def _trace_scores_kernel(
    q_ptr, codes_ptr, scale_ptr, rope_ptr, block_table_ptr, cache_lens_ptr, lse_ptr, scores_ptr, probs_ptr, heads,
    max_blocks, qk_scale, qk_scale_log2,
    RANK: tl.constexpr, ROPE: tl.constexpr, BLOCK: tl.constexpr, PAGE_ROWS: tl.constexpr, BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr, INTERPRETED: tl.constexpr,
):
    capacity = max_blocks * PAGE_ROWS
    b = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < heads
    t = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    tokens = tl.load(cache_lens_ptr + b) + 1
    q_latent, q_rope = _queries(q_ptr, b, h, h_mask, heads, RANK, ROPE)
    _, logits, visible = _tile(q_latent, q_rope, codes_ptr, scale_ptr, rope_ptr, block_table_ptr, b, t, tokens,
                               max_blocks, RANK, ROPE, BLOCK, PAGE_ROWS, INTERPRETED)
    lse = tl.load(lse_ptr + b * heads + h, mask=h_mask, other=0.0)
    out = (b * heads + h[:, None]) * capacity + t[None, :]
    mask = h_mask[:, None] & (t[None, :] < capacity)
    tl.store(scores_ptr + out, tl.where(visible[None, :], logits * qk_scale, float("-inf")), mask=mask)
    tl.store(probs_ptr + out, tl.where(visible[None, :], tl.exp2(logits * qk_scale_log2 - lse[:, None]), 0.0), mask=mask)


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    kv_latent, kv_scale, kv_rope = inputs["kv_latent"], inputs["kv_scale"], inputs["kv_rope"]
    q_nope, cache_lens, w_kv_b = inputs["q_nope"], inputs["cache_lens"], inputs["w_kv_b"]
    block_table = inputs["block_table"]
    o_heads = outputs["o_heads"]
    batch, heads, _ = q_nope.shape
    max_blocks = block_table.shape[1]
    capacity = max_blocks * PAGE
    device = kv_latent.device
    rank, rope = KV_LORA_RANK, QK_ROPE_HEAD_DIM
    interpreted = device.type != "cuda"
    inv_freq = _inv_freq(params, device)
    magnitude = _rope_magnitude(params)
    scale = _softmax_scale(params)

    c_kv = torch.empty((batch, rank), dtype=kv_rope.dtype, device=device)
    _append_kernel[(batch,)](
        inputs["kv_a"], inputs["kv_a_norm_weight"], inv_freq, inputs["positions"], cache_lens,
        kv_latent.view(torch.uint8), kv_scale, kv_rope, c_kv, block_table, max_blocks, params["rms_norm_eps"], magnitude,
        RANK=rank, ROPE=rope, BLOCK=SCALE_BLOCK, PAGE_ROWS=PAGE, INTERPRETED=interpreted,
    )
    q = torch.empty((batch, heads, rank + rope), dtype=q_nope.dtype, device=device)
    block_b = 16
    _query_kernel[(heads, triton.cdiv(batch, block_b))](
        q_nope, inputs["q_pe"], w_kv_b, inv_freq, inputs["positions"], q, batch, heads, magnitude,
        RANK=rank, NOPE=QK_NOPE_HEAD_DIM, ROPE=rope, V_DIM=V_HEAD_DIM, BLOCK_B=block_b, INTERPRETED=interpreted,
    )
    o_latent = torch.empty((batch, heads, rank), dtype=q_nope.dtype, device=device)
    lse = torch.empty((batch, heads), dtype=torch.float32, device=device)
    block_h, block_n = 16, 16 if interpreted else 32
    _attention_kernel[(batch, triton.cdiv(heads, block_h))](
        q, kv_latent, kv_scale, kv_rope, block_table, cache_lens, o_latent, lse, heads, max_blocks, scale * _LOG2E,
        RANK=rank, ROPE=rope, BLOCK=SCALE_BLOCK, PAGE_ROWS=PAGE, BLOCK_H=block_h, BLOCK_N=block_n,
        INTERPRETED=interpreted,
    )
    _unabsorb_kernel[(heads, triton.cdiv(batch, block_b))](
        o_latent, w_kv_b, o_heads, batch, heads,
        RANK=rank, NOPE=QK_NOPE_HEAD_DIM, V_DIM=V_HEAD_DIM, BLOCK_B=block_b, INTERPRETED=interpreted,
    )
    if trace is None:
        return
    scores = torch.empty((batch, heads, capacity), dtype=torch.float32, device=device)
    probs = torch.empty_like(scores)
    _trace_scores_kernel[(batch, triton.cdiv(heads, block_h), triton.cdiv(capacity, block_n))](
        q, kv_latent, kv_scale, kv_rope, block_table, cache_lens, lse, scores, probs, heads, max_blocks, scale,
        scale * _LOG2E,
        RANK=rank, ROPE=rope, BLOCK=SCALE_BLOCK, PAGE_ROWS=PAGE, BLOCK_H=block_h, BLOCK_N=block_n,
        INTERPRETED=interpreted,
    )
    trace.update({
        "c_kv": c_kv,
        "q_pe_roped": q[..., rank:],
        "k_pe_roped": kv_rope[block_table[torch.arange(batch, device=device), cache_lens.long() // PAGE].long(),
                              cache_lens.long() % PAGE],
        "kv_latent": kv_latent.clone(),
        "kv_scale": kv_scale.clone(),
        "kv_rope": kv_rope.clone(),
        "q_absorbed": q[..., :rank],
        "scores": scores,
        "probs": probs,
        "o_latent": o_latent,
        "o_heads": o_heads.clone(),
    })
