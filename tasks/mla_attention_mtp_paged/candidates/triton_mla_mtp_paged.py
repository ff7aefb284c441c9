"""Triton candidate: one DeepSeek-V3 MLA step with s_q query tokens per request over a paged KV cache.

tasks/mla_attention_mtp/candidates/triton_mla_mtp.py with the cache addressed through the block table: logical row t
of request b lives at row t % 64 of page block_table[b, t // 64] of the pool (tasks/mla_attention_paged/layout.py).
The step as B * S virtual queries, virtual query v being token v % S of request v // S, at position positions[b] + i,
its row at logical row cache_lens[b] + i, attending the request's logical rows 0 .. cache_lens[b] + i (causal over
the new tokens). Kernels: _append_kernel (norm, rope, the S new rows into their pages), _query_kernel (absorption,
rope of q_pe), _attention_kernel (one program per virtual query and head block, online softmax in fp32 over its
tiles, each tile's rows looked up in the block table), _unabsorb_kernel; traced runs add _trace_scores_kernel.

Small and plain on purpose (one split per virtual query): it exists to show the contract is met, not to be fast.
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
_LOG2E = 1.4426950408889634
_TWO_PI_HI = tl.constexpr(6.28125)
_TWO_PI_LO = tl.constexpr(0.0019353071795864769)
_INV_TWO_PI = tl.constexpr(0.15915494309189535)
PAGE = tl.constexpr(64)  # rows of a page of the pool


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
def _cos_sin(angle):
    turns = tl.floor(angle * _INV_TWO_PI + 0.5)
    reduced = (angle - turns * _TWO_PI_HI) - turns * _TWO_PI_LO
    return tl.cos(reduced), tl.sin(reduced)


@triton.jit
def _slot(block_table_ptr, capacity, b, t, visible):
    """The pool row (page * PAGE + t % PAGE) of logical row t of request b; its page from the block table."""
    page = tl.load(block_table_ptr + b * (capacity // PAGE) + t // PAGE, mask=visible, other=0).to(tl.int64)
    return page * PAGE + t % PAGE


@triton.jit
def _append_kernel(
    kv_a_ptr,
    gamma_ptr,
    inv_freq_ptr,
    positions_ptr,
    cache_lens_ptr,
    cache_ptr,
    block_table_ptr,
    capacity,
    eps,
    rope_magnitude,
    S_Q: tl.constexpr,
    RANK: tl.constexpr,
    ROPE: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    v = tl.program_id(0).to(tl.int64)  # virtual query: token v % S_Q of request v // S_Q
    b = v // S_Q
    token = v % S_Q
    t = tl.load(cache_lens_ptr + b).to(tl.int64) + token  # the token's logical row
    page = tl.load(block_table_ptr + b * (capacity // PAGE) + t // PAGE).to(tl.int64)
    row = cache_ptr + (page * PAGE + t % PAGE) * (RANK + ROPE)
    offs = tl.arange(0, RANK)
    latent = tl.load(kv_a_ptr + v * (RANK + ROPE) + offs).to(tl.float32)
    mean_square = tl.sum(latent * latent, axis=0) / RANK
    latent = latent * tl.rsqrt(mean_square + eps) * tl.load(gamma_ptr + offs).to(tl.float32)
    out_dtype = cache_ptr.dtype.element_ty
    tl.store(row + offs, _round_to(latent, out_dtype, INTERPRETED))

    pair = tl.arange(0, ROPE // 2)
    even = tl.load(kv_a_ptr + v * (RANK + ROPE) + RANK + 2 * pair).to(tl.float32)
    odd = tl.load(kv_a_ptr + v * (RANK + ROPE) + RANK + 2 * pair + 1).to(tl.float32)
    position = (tl.load(positions_ptr + b) + token).to(tl.float32)
    cos, sin = _cos_sin(position * tl.load(inv_freq_ptr + pair))
    cos = cos * rope_magnitude
    sin = sin * rope_magnitude
    tl.store(row + RANK + 2 * pair, _round_to(even * cos - odd * sin, out_dtype, INTERPRETED))
    tl.store(row + RANK + 2 * pair + 1, _round_to(odd * cos + even * sin, out_dtype, INTERPRETED))


@triton.jit
def _query_kernel(
    q_nope_ptr,
    q_pe_ptr,
    w_kv_b_ptr,
    inv_freq_ptr,
    positions_ptr,
    q_ptr,
    queries,
    heads,
    rope_magnitude,
    S_Q: tl.constexpr,
    RANK: tl.constexpr,
    NOPE: tl.constexpr,
    ROPE: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_B: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    h = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)  # virtual queries
    row_mask = rows < queries
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
    pos = (tl.load(positions_ptr + rows // S_Q, mask=row_mask, other=0) + rows % S_Q).to(tl.float32)
    cos, sin = _cos_sin(pos[:, None] * tl.load(inv_freq_ptr + pair)[None, :])
    cos = cos * rope_magnitude
    sin = sin * rope_magnitude
    tl.store(q_rows + RANK + 2 * pair[None, :], _round_to(even * cos - odd * sin, out_dtype, INTERPRETED), mask=row_mask[:, None])
    tl.store(
        q_rows + RANK + 2 * pair[None, :] + 1, _round_to(odd * cos + even * sin, out_dtype, INTERPRETED), mask=row_mask[:, None]
    )


@triton.jit
def _attended(cache_lens_ptr, v, S_Q: tl.constexpr):
    """(request, rows attended) of virtual query v: token i of request b sees rows 0 .. cache_lens[b] + i."""
    b = v // S_Q
    return b, tl.load(cache_lens_ptr + b) + v % S_Q + 1


@triton.jit
def _tile(
    q_latent,
    q_rope,
    cache_ptr,
    block_table_ptr,
    b,
    t,
    tokens,
    capacity,
    RANK: tl.constexpr,
    ROPE: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """One tile of rows t of request b: (its latent, the raw logits [heads, tile] in fp32, which rows are attended)."""
    visible = t < tokens
    rows = cache_ptr + _slot(block_table_ptr, capacity, b.to(tl.int64), t.to(tl.int64), visible)[:, None] * (RANK + ROPE)
    latent = tl.load(rows + tl.arange(0, RANK)[None, :], mask=visible[:, None], other=0.0)
    rope = tl.load(rows + RANK + tl.arange(0, ROPE)[None, :], mask=visible[:, None], other=0.0)
    logits = tl.dot(_dot_operand(q_latent, INTERPRETED), tl.trans(_dot_operand(latent, INTERPRETED)))
    logits = tl.dot(_dot_operand(q_rope, INTERPRETED), tl.trans(_dot_operand(rope, INTERPRETED)), acc=logits)
    return latent, logits, visible


@triton.jit
def _queries(q_ptr, v, h, h_mask, heads, RANK: tl.constexpr, ROPE: tl.constexpr):
    q_rows = q_ptr + (v * heads + h[:, None]) * (RANK + ROPE)
    q_latent = tl.load(q_rows + tl.arange(0, RANK)[None, :], mask=h_mask[:, None], other=0.0)
    q_rope = tl.load(q_rows + RANK + tl.arange(0, ROPE)[None, :], mask=h_mask[:, None], other=0.0)
    return q_latent, q_rope


@triton.jit
def _attention_kernel(
    q_ptr,
    cache_ptr,
    block_table_ptr,
    cache_lens_ptr,
    o_latent_ptr,
    lse_ptr,
    heads,
    capacity,
    qk_scale_log2,
    S_Q: tl.constexpr,
    RANK: tl.constexpr,
    ROPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    v = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < heads
    b, tokens = _attended(cache_lens_ptr, v, S_Q)
    q_latent, q_rope = _queries(q_ptr, v, h, h_mask, heads, RANK, ROPE)
    row_max = tl.full([BLOCK_H], float("-inf"), tl.float32)
    total = tl.zeros([BLOCK_H], tl.float32)
    acc = tl.zeros([BLOCK_H, RANK], tl.float32)
    for start in range(0, tokens, BLOCK_N):
        t = start + tl.arange(0, BLOCK_N)
        latent, logits, visible = _tile(
            q_latent, q_rope, cache_ptr, block_table_ptr, b, t, tokens, capacity, RANK, ROPE, INTERPRETED
        )
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
    tl.store(
        o_latent_ptr + (v * heads + h[:, None]) * RANK + cols[None, :],
        _round_to(out, o_latent_ptr.dtype.element_ty, INTERPRETED),
        mask=h_mask[:, None],
    )
    tl.store(lse_ptr + v * heads + h, row_max + tl.log2(total), mask=h_mask)


@triton.jit
def _unabsorb_kernel(
    latent_ptr,
    w_kv_b_ptr,
    out_ptr,
    queries,
    heads,
    RANK: tl.constexpr,
    NOPE: tl.constexpr,
    V_DIM: tl.constexpr,
    BLOCK_B: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    h = tl.program_id(0)
    rows = tl.program_id(1) * BLOCK_B + tl.arange(0, BLOCK_B)
    row_mask = rows < queries
    r = tl.arange(0, RANK)
    v = tl.arange(0, V_DIM)
    latent = tl.load(latent_ptr + (rows[:, None] * heads + h) * RANK + r[None, :], mask=row_mask[:, None], other=0.0)
    w_uv = tl.load(w_kv_b_ptr + (h * (NOPE + V_DIM) + NOPE + v)[None, :] * RANK + r[:, None])  # W_UV_h^T [RANK, V]
    out = tl.dot(_dot_operand(latent, INTERPRETED), _dot_operand(w_uv, INTERPRETED))
    tl.store(
        out_ptr + (rows[:, None] * heads + h) * V_DIM + v[None, :],
        _round_to(out, out_ptr.dtype.element_ty, INTERPRETED),
        mask=row_mask[:, None],
    )


@triton.jit
def _trace_scores_kernel(
    q_ptr,
    cache_ptr,
    block_table_ptr,
    cache_lens_ptr,
    lse_ptr,
    scores_ptr,
    probs_ptr,
    heads,
    capacity,
    qk_scale,
    qk_scale_log2,
    S_Q: tl.constexpr,
    RANK: tl.constexpr,
    ROPE: tl.constexpr,
    BLOCK_H: tl.constexpr,
    BLOCK_N: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    v = tl.program_id(0)
    h = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    h_mask = h < heads
    t = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    b, tokens = _attended(cache_lens_ptr, v, S_Q)
    q_latent, q_rope = _queries(q_ptr, v, h, h_mask, heads, RANK, ROPE)
    _, logits, visible = _tile(q_latent, q_rope, cache_ptr, block_table_ptr, b, t, tokens, capacity, RANK, ROPE, INTERPRETED)
    lse = tl.load(lse_ptr + v * heads + h, mask=h_mask, other=0.0)
    out = (v * heads + h[:, None]) * capacity + t[None, :]
    mask = h_mask[:, None] & (t[None, :] < capacity)
    tl.store(scores_ptr + out, tl.where(visible[None, :], logits * qk_scale, float("-inf")), mask=mask)
    tl.store(probs_ptr + out, tl.where(visible[None, :], tl.exp2(logits * qk_scale_log2 - lse[:, None]), 0.0), mask=mask)


def _check_inputs(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> None:
    """The kernels index flat rows: every tensor they read or write must be contiguous."""
    for name, tensor in [*inputs.items(), *outputs.items()]:
        if not tensor.is_contiguous():
            raise ValueError(f"{name} must be contiguous")


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict, trace: dict | None = None) -> None:
    _check_inputs(inputs, outputs)
    kv_cache, cache_lens, w_kv_b, q_nope = inputs["kv_cache"], inputs["cache_lens"], inputs["w_kv_b"], inputs["q_nope"]
    o_heads = outputs["o_heads"]
    batch, s_q, heads, _ = q_nope.shape
    block_table = inputs["block_table"]
    queries, capacity, device = batch * s_q, block_table.shape[1] * 64, kv_cache.device  # logical rows a request may have
    rank, rope = KV_LORA_RANK, QK_ROPE_HEAD_DIM
    interpreted = device.type != "cuda"
    inv_freq, magnitude, scale = _inv_freq(params, device), _rope_magnitude(params), _softmax_scale(params)

    _append_kernel[(queries,)](
        inputs["kv_a"],
        inputs["kv_a_norm_weight"],
        inv_freq,
        inputs["positions"],
        cache_lens,
        kv_cache,
        block_table,
        capacity,
        params["rms_norm_eps"],
        magnitude,
        S_Q=s_q,
        RANK=rank,
        ROPE=rope,
        INTERPRETED=interpreted,
    )
    q = torch.empty((queries, heads, rank + rope), dtype=q_nope.dtype, device=device)
    block_b = 16
    _query_kernel[(heads, triton.cdiv(queries, block_b))](
        q_nope,
        inputs["q_pe"],
        w_kv_b,
        inv_freq,
        inputs["positions"],
        q,
        queries,
        heads,
        magnitude,
        S_Q=s_q,
        RANK=rank,
        NOPE=QK_NOPE_HEAD_DIM,
        ROPE=rope,
        V_DIM=V_HEAD_DIM,
        BLOCK_B=block_b,
        INTERPRETED=interpreted,
    )
    o_latent = torch.empty((queries, heads, rank), dtype=q_nope.dtype, device=device)
    lse = torch.empty((queries, heads), dtype=torch.float32, device=device)
    block_h, block_n = 16, 16 if interpreted else 32
    _attention_kernel[(queries, triton.cdiv(heads, block_h))](
        q,
        kv_cache,
        block_table,
        cache_lens,
        o_latent,
        lse,
        heads,
        capacity,
        scale * _LOG2E,
        S_Q=s_q,
        RANK=rank,
        ROPE=rope,
        BLOCK_H=block_h,
        BLOCK_N=block_n,
        INTERPRETED=interpreted,
    )
    _unabsorb_kernel[(heads, triton.cdiv(queries, block_b))](
        o_latent,
        w_kv_b,
        o_heads,
        queries,
        heads,
        RANK=rank,
        NOPE=QK_NOPE_HEAD_DIM,
        V_DIM=V_HEAD_DIM,
        BLOCK_B=block_b,
        INTERPRETED=interpreted,
    )
    if trace is not None:
        _record_trace(
            trace, q, kv_cache, block_table, cache_lens, o_latent, lse, o_heads, scale, s_q, block_h, block_n, interpreted
        )


def _record_trace(
    trace, q, kv_cache, block_table, cache_lens, o_latent, lse, o_heads, scale, s_q, block_h, block_n, interpreted
) -> None:
    """Trace-only kernel after the fast path's (it writes nothing the fast path reads); the appended rows read back."""
    queries, heads, _ = q.shape
    batch, capacity = queries // s_q, block_table.shape[1] * 64
    rank = KV_LORA_RANK
    scores = torch.empty((queries, heads, capacity), dtype=torch.float32, device=q.device)
    probs = torch.empty_like(scores)
    _trace_scores_kernel[(queries, triton.cdiv(heads, block_h), triton.cdiv(capacity, block_n))](
        q,
        kv_cache,
        block_table,
        cache_lens,
        lse,
        scores,
        probs,
        heads,
        capacity,
        scale,
        scale * _LOG2E,
        S_Q=s_q,
        RANK=rank,
        ROPE=QK_ROPE_HEAD_DIM,
        BLOCK_H=block_h,
        BLOCK_N=block_n,
        INTERPRETED=interpreted,
    )
    ends = cache_lens.long()[:, None] + torch.arange(s_q, device=q.device)[None, :]  # logical rows of the new tokens
    pages = block_table.long().gather(1, ends // 64)
    appended = kv_cache[pages, ends % 64]  # [B, S, 576]
    trace.update(
        {
            "c_kv": appended[..., :rank],
            "q_pe_roped": q[..., rank:].reshape(batch, s_q, heads, -1),
            "k_pe_roped": appended[..., rank:],
            "kv_cache": kv_cache.clone(),
            "q_absorbed": q[..., :rank].reshape(batch, s_q, heads, rank),
            "scores": scores.view(batch, s_q, heads, capacity),
            "probs": probs.view(batch, s_q, heads, capacity),
            "o_latent": o_latent.view(batch, s_q, heads, rank),
            "o_heads": o_heads.clone(),
        }
    )
