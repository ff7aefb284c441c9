"""Eager absorbed-MLA decode step in PyTorch: the kernel sequence being replaced.

Works in the inputs' dtypes as a serving stack's eager path does: bf16 matmuls with fp32 accumulation,
RMSNorm and rope in fp32, softmax in fp32. The logits matmul returns fp32 (cuBLAS bf16-in/fp32-out):
rounding logits of magnitude ~100 to bf16 first, as DeepSeek's own eager code does, would alone cost
~1.3e-2 relative error on probs and o_heads, more than every other rounding together.
Batched over requests: ragged cache lengths are handled by attending over the cache's length and masking
each request past its own, with no loop over requests and no host synchronization (CUDA-graph capturable).
"""
from __future__ import annotations

import math

import torch

KV_LORA_RANK = 512
QK_NOPE_HEAD_DIM = 128
QK_ROPE_HEAD_DIM = 64
V_HEAD_DIM = 128

_inv_freq_cache: dict[tuple, torch.Tensor] = {}


def _yarn_mscale(factor: float, mscale: float) -> float:
    return 1.0 if factor <= 1.0 else 0.1 * mscale * math.log(factor) + 1.0


def _softmax_scale(params: dict) -> float:
    scale = (params["qk_nope_head_dim"] + params["qk_rope_head_dim"]) ** -0.5
    yarn = params.get("rope_scaling")
    if yarn and yarn.get("mscale_all_dim"):
        m = _yarn_mscale(yarn["factor"], yarn["mscale_all_dim"])
        scale *= m * m
    return scale


def _rope_inv_freq(params: dict, device: torch.device) -> torch.Tensor:
    """YaRN inverse frequencies in fp32 (computed once per device), as serving stacks precompute them."""
    key = (str(device), params["rope_theta"], params["qk_rope_head_dim"], repr(params.get("rope_scaling")))
    if key not in _inv_freq_cache:
        dim, base = params["qk_rope_head_dim"], float(params["rope_theta"])
        freq = 1.0 / base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
        yarn = params.get("rope_scaling")
        if yarn:
            original = yarn["original_max_position_embeddings"]

            def correction_dim(rotations):
                return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

            low = max(math.floor(correction_dim(yarn["beta_fast"])), 0)
            high = min(math.ceil(correction_dim(yarn["beta_slow"])), dim - 1)
            ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / max(high - low, 1e-3)).clamp(0, 1)
            freq = freq * (1 - ramp) + freq / yarn["factor"] * ramp
        _inv_freq_cache[key] = freq.to(device)
    return _inv_freq_cache[key]


def _rope_magnitude(params: dict) -> float:
    yarn = params.get("rope_scaling")
    if not yarn:
        return 1.0
    if yarn.get("mscale") and yarn.get("mscale_all_dim"):
        return _yarn_mscale(yarn["factor"], yarn["mscale"]) / _yarn_mscale(yarn["factor"], yarn["mscale_all_dim"])
    return _yarn_mscale(yarn["factor"], 1.0)


def _bmm_fp32_out(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """bf16 x bf16 -> fp32 batched matmul. CUDA has the kernel; CPU (tests) has none, and widening is
    the same math there since bf16 products are exact in fp32."""
    if a.is_cuda:
        return torch.bmm(a, b, out_dtype=torch.float32)
    return torch.bmm(a.float(), b.float())


def _rope_interleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) in fp32; cos/sin broadcast over x's leading dims."""
    x = x.float()
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    q_nope, q_pe, kv_a = inputs["q_nope"], inputs["q_pe"], inputs["kv_a"]
    w_kv_b, kv_cache = inputs["w_kv_b"], inputs["kv_cache"]
    positions, cache_lens = inputs["positions"], inputs["cache_lens"]
    rank, nope, v_dim = params["kv_lora_rank"], params["qk_nope_head_dim"], params["v_head_dim"]
    batch, heads, _ = q_nope.shape
    dtype = kv_cache.dtype

    # kv_a_layernorm (fp32 statistics) on the latent; k_pe is not normalized.
    c_kv_raw = kv_a[:, :rank].float()
    c_kv = (c_kv_raw * torch.rsqrt(c_kv_raw.pow(2).mean(-1, keepdim=True) + params["rms_norm_eps"])
            * inputs["kv_a_norm_weight"].float()).to(dtype)

    angles = positions.float()[:, None] * _rope_inv_freq(params, q_nope.device)  # [B, rope/2], fp32
    magnitude = _rope_magnitude(params)
    cos, sin = torch.cos(angles) * magnitude, torch.sin(angles) * magnitude
    k_pe_roped = _rope_interleaved(kv_a[:, rank:], cos, sin).to(dtype)
    q_pe_roped = _rope_interleaved(q_pe, cos[:, None], sin[:, None]).to(dtype)

    # Cache append at row cache_lens[b] of each request.
    rows = torch.arange(batch, device=kv_cache.device)
    kv_cache[rows, cache_lens.long()] = torch.cat((c_kv, k_pe_roped), dim=-1)

    # Absorption, one bmm over heads: [H, B, nope] x [H, nope, rank].
    w_per_head = w_kv_b.view(heads, nope + v_dim, rank)
    w_uk, w_uv = w_per_head[:, :nope], w_per_head[:, nope:]
    q_absorbed = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [B, H, rank]

    # Attention over the case's length, every request masked to its own: bounded by the cache's shape, not by
    # cache_lens.max() read on the host, so the step has no host synchronization and runs inside a CUDA graph, as
    # serving engines run decode (masked rows weigh exactly 0: the math is the same).
    visible_len = kv_cache.shape[1]
    cache_view = kv_cache[:, :visible_len]  # [B, T, rank + rope]
    q_full = torch.cat((q_absorbed, q_pe_roped), dim=-1)  # [B, H, rank + rope]
    logits = _bmm_fp32_out(q_full, cache_view.transpose(1, 2))  # [B, H, T] fp32
    token = torch.arange(visible_len, device=kv_cache.device)
    hidden = token[None, :] > cache_lens.long()[:, None]  # [B, T]
    scores = (logits * _softmax_scale(params)).masked_fill(hidden[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    o_latent = torch.bmm(probs.to(dtype), cache_view[..., :rank])  # [B, H, rank]

    # Un-absorption per head: [H, B, rank] x [H, rank, v].
    o_heads = torch.bmm(o_latent.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1)
    outputs["o_heads"].copy_(o_heads)

    if trace is not None:
        capacity = kv_cache.shape[1]
        padded_scores = scores.new_full((batch, heads, capacity), float("-inf"))
        padded_scores[..., :visible_len] = scores
        padded_probs = probs.new_zeros((batch, heads, capacity))
        padded_probs[..., :visible_len] = probs
        trace.update({
            "c_kv": c_kv,
            "q_pe_roped": q_pe_roped,
            "k_pe_roped": k_pe_roped,
            "kv_cache": kv_cache.clone(),
            "q_absorbed": q_absorbed,
            "scores": padded_scores,
            "probs": padded_probs,
            "o_latent": o_latent,
            "o_heads": o_heads,
        })
