"""Eager MLA decode step over an FP8 KV cache in PyTorch: the bf16 step's kernels, with the cache quantized.

The new token's bf16 c_kv is quantized as the contract says (scale = amax / 448 per 128 values, float32; codes
rounded to e4m3, torch's cast: to nearest even), written with its scales and bf16 rope key; the whole cache is
then dequantized to bf16 (code times scale) and the bf16 baseline's attention runs over it (float32 logits and
softmax, bf16 products). The helpers are tasks/mla_attention/baseline.py's.
"""
from __future__ import annotations

import torch

from tasks.mla_attention.baseline import _bmm_fp32_out, _rope_interleaved, _rope_inv_freq, _rope_magnitude, _softmax_scale

BLOCK = 128
E4M3_MAX = 448.0


def _quantized(c_kv: torch.Tensor, code_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes [B, 512], scales [B, 4]) of the bf16 c_kv."""
    blocks = c_kv.float().view(c_kv.shape[0], -1, BLOCK)
    scales = blocks.abs().amax(dim=-1) / E4M3_MAX
    divisor = torch.where(scales > 0, scales, torch.ones_like(scales))
    codes = (blocks / divisor[..., None]).to(code_dtype)
    return codes.view(c_kv.shape[0], -1), scales


def _prepare(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """c_kv, the roped keys and queries, in the cache's bf16 (as the bf16 baseline computes them)."""
    q_pe, kv_a, positions = inputs["q_pe"], inputs["kv_a"], inputs["positions"]
    rank, dtype = params["kv_lora_rank"], inputs["kv_rope"].dtype
    c_kv_raw = kv_a[:, :rank].float()
    c_kv = (c_kv_raw * torch.rsqrt(c_kv_raw.pow(2).mean(-1, keepdim=True) + params["rms_norm_eps"])
            * inputs["kv_a_norm_weight"].float()).to(dtype)
    angles = positions.float()[:, None] * _rope_inv_freq(params, q_pe.device)
    magnitude = _rope_magnitude(params)
    cos, sin = torch.cos(angles) * magnitude, torch.sin(angles) * magnitude
    return {
        "c_kv": c_kv,
        "k_pe_roped": _rope_interleaved(kv_a[:, rank:], cos, sin).to(dtype),
        "q_pe_roped": _rope_interleaved(q_pe, cos[:, None], sin[:, None]).to(dtype),
    }


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    kv_latent, kv_scale, kv_rope = inputs["kv_latent"], inputs["kv_scale"], inputs["kv_rope"]
    cache_lens, w_kv_b, q_nope = inputs["cache_lens"], inputs["w_kv_b"], inputs["q_nope"]
    rank, nope, v_dim = params["kv_lora_rank"], params["qk_nope_head_dim"], params["v_head_dim"]
    batch, heads, _ = q_nope.shape
    dtype = kv_rope.dtype
    prepared = _prepare(inputs, params)

    rows, lens = torch.arange(batch, device=kv_rope.device), cache_lens.long()
    codes, scales = _quantized(prepared["c_kv"], kv_latent.dtype)
    kv_latent[rows, lens] = codes
    kv_scale[rows, lens] = scales
    kv_rope[rows, lens] = prepared["k_pe_roped"]

    w_per_head = w_kv_b.view(heads, nope + v_dim, rank)
    w_uk, w_uv = w_per_head[:, :nope], w_per_head[:, nope:]
    q_absorbed = torch.bmm(q_nope.transpose(0, 1), w_uk).transpose(0, 1)  # [B, H, rank]

    # The cache dequantized to bf16 (masked rows weigh exactly 0, as in the bf16 baseline: no host synchronization).
    latent = (kv_latent.float() * kv_scale.repeat_interleave(BLOCK, dim=-1)).to(dtype)
    q_full = torch.cat((q_absorbed, prepared["q_pe_roped"]), dim=-1)
    logits = _bmm_fp32_out(q_full, torch.cat((latent, kv_rope), dim=-1).transpose(1, 2))  # [B, H, L] fp32
    hidden = torch.arange(kv_rope.shape[1], device=kv_rope.device)[None, :] > lens[:, None]
    scores = (logits * _softmax_scale(params)).masked_fill(hidden[:, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    o_latent = torch.bmm(probs.to(dtype), latent)
    o_heads = torch.bmm(o_latent.transpose(0, 1), w_uv.transpose(1, 2)).transpose(0, 1)
    outputs["o_heads"].copy_(o_heads)

    if trace is not None:
        trace.update(prepared)
        trace.update({
            "kv_latent": kv_latent.clone(),
            "kv_scale": kv_scale.clone(),
            "kv_rope": kv_rope.clone(),
            "q_absorbed": q_absorbed,
            "scores": scores,
            "probs": probs,
            "o_latent": o_latent,
            "o_heads": o_heads,
        })
