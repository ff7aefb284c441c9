"""Canonical float64 reference of one DeepSeek-V3 MLA decode step (absorbed form).

Every stage is a small named function so that the whole-layer reference (used against the
transformers oracle) and the decode-step reference (used by the judge) share the same math.
Weights follow nn.Linear's layout, [out, in], applied as x @ W^T.
"""
from __future__ import annotations

import math

import torch

DEEPSEEK_V3_PARAMS: dict = {
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "rope_scaling": {
        "type": "yarn",
        "factor": 40.0,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
    },
}

# Stage names in the order the computation produces them; the judge reports the first that diverges.
STAGES: tuple[str, ...] = (
    "c_kv",
    "q_pe_roped",
    "k_pe_roped",
    "kv_cache",
    "q_absorbed",
    "scores",
    "probs",
    "o_latent",
    "o_heads",
)
FINAL_OUTPUTS: tuple[str, ...] = ("o_heads",)
INOUT_INPUTS: tuple[str, ...] = ("kv_cache",)

F64 = torch.float64


# ---------------------------------------------------------------------------------------------
# YaRN: frequencies, softmax scale, cos/sin magnitude
# ---------------------------------------------------------------------------------------------
def _yarn_settings(params: dict) -> dict | None:
    scaling = params.get("rope_scaling")
    if not scaling:
        return None
    kind = scaling.get("type", scaling.get("rope_type"))
    if kind != "yarn":
        raise ValueError(f"only YaRN rope scaling is modelled, got {kind!r}")
    return scaling


def yarn_mscale(factor: float, mscale: float) -> float:
    """YaRN's magnitude correction 0.1 * mscale * ln(factor) + 1 (1 when not extending)."""
    if factor <= 1.0:
        return 1.0
    return 0.1 * mscale * math.log(factor) + 1.0


def softmax_scale(params: dict) -> float:
    """1/sqrt(qk_head_dim), times mscale(factor, mscale_all_dim)^2 under YaRN: 0.1352338 for DeepSeek-V3.

    The head dim is the 192 of the un-absorbed q.k product, not the 576 of the latent dot product:
    absorption reorders the same sum, it does not change what is being scaled.
    """
    qk_head_dim = params["qk_nope_head_dim"] + params["qk_rope_head_dim"]
    scale = qk_head_dim ** -0.5
    yarn = _yarn_settings(params)
    if yarn is not None and yarn.get("mscale_all_dim"):
        m = yarn_mscale(yarn["factor"], yarn["mscale_all_dim"])
        scale *= m * m
    return scale


def rope_magnitude(params: dict) -> float:
    """Factor on cos/sin: mscale(factor, mscale) / mscale(factor, mscale_all_dim); 1.0 for DeepSeek-V3."""
    yarn = _yarn_settings(params)
    if yarn is None:
        return 1.0
    mscale, mscale_all_dim = yarn.get("mscale"), yarn.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return yarn_mscale(yarn["factor"], mscale) / yarn_mscale(yarn["factor"], mscale_all_dim)
    return yarn_mscale(yarn["factor"], 1.0)


def plain_inv_freq(params: dict) -> torch.Tensor:
    """theta^(-2i/d), i = 0..d/2-1, in float64."""
    dim = params["qk_rope_head_dim"]
    exponents = torch.arange(0, dim, 2, dtype=F64) / dim
    return float(params["rope_theta"]) ** (-exponents)


def _correction_dim(num_rotations: float, dim: int, base: float, original_max_pos: int) -> float:
    # The dimension index whose wavelength fits num_rotations times in the original context.
    return dim * math.log(original_max_pos / (num_rotations * 2 * math.pi)) / (2 * math.log(base))


def yarn_correction_range(params: dict) -> tuple[int, int]:
    """(low, high) pair indices of YaRN's ramp: (10, 23) for DeepSeek-V3."""
    yarn = _yarn_settings(params)
    if yarn is None:
        raise ValueError("YaRN's correction range needs params with rope_scaling")
    dim, base = params["qk_rope_head_dim"], float(params["rope_theta"])
    original = yarn["original_max_position_embeddings"]
    low = math.floor(_correction_dim(yarn["beta_fast"], dim, base, original))
    high = math.ceil(_correction_dim(yarn["beta_slow"], dim, base, original))
    return max(low, 0), min(high, dim - 1)


def yarn_inv_freq(params: dict) -> torch.Tensor:
    """YaRN inverse frequencies in float64: pairs below `low` keep theta's, above `high` are divided by
    `factor`, a linear ramp blends in between. Plain frequencies when no rope scaling is configured."""
    base_freq = plain_inv_freq(params)
    yarn = _yarn_settings(params)
    if yarn is None:
        return base_freq
    low, high = yarn_correction_range(params)
    if high == low:
        high += 0.001  # same guard as the published implementations against a zero-width ramp
    ramp = ((torch.arange(base_freq.numel(), dtype=F64) - low) / (high - low)).clamp(0.0, 1.0)
    return base_freq * (1.0 - ramp) + (base_freq / yarn["factor"]) * ramp


def rope_angles(positions: torch.Tensor, inv_freq: torch.Tensor) -> torch.Tensor:
    """[..., d/2] angles position * inv_freq, in float64."""
    return positions.to(F64).unsqueeze(-1) * inv_freq.to(positions.device, F64)


def rotate_interleaved(x: torch.Tensor, angles: torch.Tensor, magnitude: float = 1.0) -> torch.Tensor:
    """Rotate the interleaved pairs (x[2i], x[2i+1]) by angles[i] (DeepSeek's layout, not rotate-half)."""
    cos = torch.cos(angles) * magnitude
    sin = torch.sin(angles) * magnitude
    even, odd = x[..., 0::2], x[..., 1::2]
    rotated = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1)
    return rotated.flatten(-2)


# ---------------------------------------------------------------------------------------------
# Stages
# ---------------------------------------------------------------------------------------------
def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    x = x.to(F64)
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight.to(F64)


def split_kv_b(w_kv_b: torch.Tensor, params: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """kv_b_proj [H*(nope+v), rank] -> (W_UK [H, nope, rank], W_UV [H, v, rank])."""
    nope, v_dim, rank = params["qk_nope_head_dim"], params["v_head_dim"], params["kv_lora_rank"]
    per_head = w_kv_b.to(F64).view(-1, nope + v_dim, rank)
    return per_head[:, :nope], per_head[:, nope:]


def append_to_cache(kv_cache: torch.Tensor, c_kv: torch.Tensor, k_pe_roped: torch.Tensor,
                    cache_lens: torch.Tensor) -> torch.Tensor:
    """A float64 copy of the cache with row cache_lens[b] of request b replaced by c_kv | k_pe_roped."""
    updated = kv_cache.to(F64, copy=True)  # one float64 copy (4.8 GB at 16 heads, B=64, L=16384), not a second
    rows = torch.arange(updated.shape[0], device=updated.device)
    updated[rows, cache_lens.long()] = torch.cat((c_kv, k_pe_roped), dim=-1)
    return updated


def absorb_query(q_nope: torch.Tensor, w_uk: torch.Tensor) -> torch.Tensor:
    """q_abs[b,h] = q_nope[b,h] @ W_UK_h: [B,H,nope] x [H,nope,rank] -> [B,H,rank]."""
    return torch.einsum("bhn,hnr->bhr", q_nope.to(F64), w_uk)


def visible_rows(cache_lens: torch.Tensor, capacity: int) -> torch.Tensor:
    """[B, L] True for cache rows 0..len inclusive (t == len is the appended token)."""
    return torch.arange(capacity, device=cache_lens.device)[None, :] <= cache_lens.long()[:, None]


def attention_scores(q_absorbed: torch.Tensor, q_pe_roped: torch.Tensor, kv_cache: torch.Tensor,
                     cache_lens: torch.Tensor, scale: float, kv_lora_rank: int) -> torch.Tensor:
    """[B,H,L] scaled 576-wide logits over cache rows 0..len inclusive; -inf beyond."""
    latent, k_pe = kv_cache[..., :kv_lora_rank], kv_cache[..., kv_lora_rank:]
    logits = torch.einsum("bhr,btr->bht", q_absorbed, latent) + torch.einsum("bhp,btp->bht", q_pe_roped, k_pe)
    logits = logits * scale
    visible = visible_rows(cache_lens, kv_cache.shape[1])
    return logits.masked_fill(~visible[:, None, :], float("-inf"))


def score_error_scale(q_absorbed: torch.Tensor, q_pe_roped: torch.Tensor, kv_cache: torch.Tensor,
                      cache_lens: torch.Tensor, scale: float, kv_lora_rank: int) -> torch.Tensor:
    """[B,H,L] the scores' error scale (the contract's `error_scale`): each score's 576 terms q_i * k_i, times the
    softmax scale, in L2 norm; 0 beyond the length. A faithful kernel rounds the dot product's operands (bf16 q_absorbed
    and q_pe_roped, the bf16 cache row), so each term is off by a relative rounding of its own and the score by a sum
    of them: about that norm times the rounding unit, however much the terms cancel in the score itself. For random
    signs the score's own size is that norm too on average (its square's expectation is the norm's square), so on
    ordinary cases the scale changes nothing; where the terms cancel (a score near zero) it is the scale left."""
    latent, k_pe = kv_cache[..., :kv_lora_rank], kv_cache[..., kv_lora_rank:]
    squares = (torch.einsum("bhr,btr->bht", q_absorbed.square(), latent.square())
               + torch.einsum("bhp,btp->bht", q_pe_roped.square(), k_pe.square()))
    visible = visible_rows(cache_lens, kv_cache.shape[1])
    return (squares.sqrt() * abs(scale)).masked_fill(~visible[:, None, :], 0.0)


def attention_probs(scores: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores, dim=-1)


def latent_output(probs: torch.Tensor, kv_cache: torch.Tensor, cache_lens: torch.Tensor,
                  kv_lora_rank: int) -> torch.Tensor:
    """o_lat[b,h] = sum_{t <= len} p[b,h,t] c_kv[b,t]: [B,H,rank]. Rows past len are not part of the
    sequence and may hold anything (NaN included), so they are dropped rather than weighted by zero."""
    visible = visible_rows(cache_lens, kv_cache.shape[1])
    latent = torch.where(visible[..., None], kv_cache[..., :kv_lora_rank], 0.0)
    return torch.einsum("bht,btr->bhr", probs, latent)


def unabsorb(o_latent: torch.Tensor, w_uv: torch.Tensor) -> torch.Tensor:
    """o_heads[b,h] = o_lat[b,h] @ W_UV_h^T: [B,H,rank] x [H,v,rank] -> [B,H,v]."""
    return torch.einsum("bhr,hvr->bhv", o_latent, w_uv)


def decode_step(q_nope: torch.Tensor, q_pe: torch.Tensor, kv_a: torch.Tensor, kv_a_norm_weight: torch.Tensor,
                w_kv_b: torch.Tensor, positions: torch.Tensor, cache_lens: torch.Tensor, kv_cache: torch.Tensor,
                params: dict, angles: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """All stages of one decode step in float64, in STAGES order.

    `angles` ([B, d/2]) overrides position * yarn_inv_freq; only the oracle comparison uses it, to feed the
    oracle's own float32 angles so that its rounding does not mask everything else.
    """
    rank = params["kv_lora_rank"]
    if angles is None:
        angles = rope_angles(positions, yarn_inv_freq(params))
    magnitude = rope_magnitude(params)
    c_kv = rms_norm(kv_a[..., :rank], kv_a_norm_weight, params["rms_norm_eps"])
    q_pe_roped = rotate_interleaved(q_pe.to(F64), angles[:, None, :], magnitude)
    k_pe_roped = rotate_interleaved(kv_a[..., rank:].to(F64), angles, magnitude)
    cache = append_to_cache(kv_cache, c_kv, k_pe_roped, cache_lens)
    w_uk, w_uv = split_kv_b(w_kv_b, params)
    q_absorbed = absorb_query(q_nope, w_uk)
    scores = attention_scores(q_absorbed, q_pe_roped, cache, cache_lens, softmax_scale(params), rank)
    error_scale = score_error_scale(q_absorbed, q_pe_roped, cache, cache_lens, softmax_scale(params), rank)
    probs = attention_probs(scores)
    o_latent = latent_output(probs, cache, cache_lens, rank)
    o_heads = unabsorb(o_latent, w_uv)
    return {
        "c_kv": c_kv,
        "q_pe_roped": q_pe_roped,
        "k_pe_roped": k_pe_roped,
        "kv_cache": cache,
        "q_absorbed": q_absorbed,
        "scores": scores,
        "probs": probs,
        "o_latent": o_latent,
        "o_heads": o_heads,
        "scores_error_scale": error_scale,  # not a stage: what the scores are judged against at least
    }


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """Every stage, in float64 from the upcast inputs; new tensors, inputs untouched."""
    return decode_step(
        inputs["q_nope"], inputs["q_pe"], inputs["kv_a"], inputs["kv_a_norm_weight"], inputs["w_kv_b"],
        inputs["positions"], inputs["cache_lens"], inputs["kv_cache"], params,
    )


# ---------------------------------------------------------------------------------------------
# The whole attention layer, for comparison with transformers' DeepseekV3Attention
# ---------------------------------------------------------------------------------------------
LAYER_WEIGHT_NAMES: tuple[str, ...] = (
    "q_a_proj",            # [q_lora_rank, hidden]
    "q_a_layernorm",       # [q_lora_rank]
    "q_b_proj",            # [H*(nope+rope), q_lora_rank]
    "kv_a_proj_with_mqa",  # [rank+rope, hidden]
    "kv_a_layernorm",      # [rank]
    "kv_b_proj",           # [H*(nope+v), rank]
    "o_proj",              # [hidden, H*v]
)


def full_layer_reference(hidden: torch.Tensor, weights: dict[str, torch.Tensor], positions: torch.Tensor,
                         kv_cache: torch.Tensor, cache_lens: torch.Tensor, params: dict,
                         angles: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
    """One decode token per request through the whole MLA layer: hidden [B, hidden] -> output [B, hidden].

    Returns the projections (q_a, c_q, q_nope, q_pe, kv_a), every decode stage, and "output" (after o_proj).
    """
    w = {name: weights[name].to(F64) for name in LAYER_WEIGHT_NAMES}
    nope, rope_dim = params["qk_nope_head_dim"], params["qk_rope_head_dim"]
    batch = hidden.shape[0]
    hidden = hidden.to(F64)
    q_a = hidden @ w["q_a_proj"].T
    c_q = rms_norm(q_a, w["q_a_layernorm"], params["rms_norm_eps"])
    q = (c_q @ w["q_b_proj"].T).view(batch, -1, nope + rope_dim)
    q_nope, q_pe = q[..., :nope], q[..., nope:]
    kv_a = hidden @ w["kv_a_proj_with_mqa"].T
    stages = decode_step(q_nope, q_pe, kv_a, w["kv_a_layernorm"], w["kv_b_proj"], positions, cache_lens,
                         kv_cache, params, angles=angles)
    output = stages["o_heads"].reshape(batch, -1) @ w["o_proj"].T
    return {"q_a": q_a, "c_q": c_q, "q_nope": q_nope, "q_pe": q_pe, "kv_a": kv_a, **stages, "output": output}
