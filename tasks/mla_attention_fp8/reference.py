"""Canonical float64 reference of one DeepSeek-V3 MLA decode step over an FP8 KV cache (FlashMLA's layout).

The cache is three tensors: `kv_latent` [B, L, 512] e4m3 codes, `kv_scale` [B, L, 4] float32 (one per 128 codes)
and `kv_rope` [B, L, 64] bf16. The step quantizes the new token's c_kv into its row (tasks/mla_attention_fp8/quant.py:
the codes the contract defines, and where a faithful kernel may round the other way), then attends over the
DEQUANTIZED cache (every row's codes times their scales, the new row's too) with the bf16 contract's math
(tasks/mla_attention/reference.py: the same functions, not a copy). `o_heads_unquantized` is the same step with the
new row's latent kept unquantized: the distance of a kernel's output to it is what quantizing the step's own token
costs (the past rows exist only quantized), reported and never judged.
"""
from __future__ import annotations

import torch

from tasks.mla_attention import reference as bf16
from tasks.mla_attention_fp8.quant import BLOCK, dequantize, quantize_row

F64 = torch.float64
DEEPSEEK_V3_PARAMS = bf16.DEEPSEEK_V3_PARAMS


def _appended(cache: torch.Tensor, row: torch.Tensor, cache_lens: torch.Tensor) -> torch.Tensor:
    """A float64 copy of `cache` with row cache_lens[b] of request b replaced by `row[b]`."""
    updated = cache.to(F64, copy=True)
    updated[torch.arange(updated.shape[0], device=updated.device), cache_lens.long()] = row.to(F64)
    return updated


def _attention(q_absorbed, q_pe_roped, cache, cache_lens, w_uv, params) -> dict[str, torch.Tensor]:
    """The stages from the scores on, over a float64 [B, L, 576] cache (bf16's functions)."""
    rank, scale = params["kv_lora_rank"], bf16.softmax_scale(params)
    scores = bf16.attention_scores(q_absorbed, q_pe_roped, cache, cache_lens, scale, rank)
    probs = bf16.attention_probs(scores)
    o_latent = bf16.latent_output(probs, cache, cache_lens, rank)
    return {
        "scores": scores,
        "probs": probs,
        "o_latent": o_latent,
        "o_heads": bf16.unabsorb(o_latent, w_uv),
        "scores_error_scale": bf16.score_error_scale(q_absorbed, q_pe_roped, cache, cache_lens, scale, rank),
    }


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """Every stage in float64 (and the appended row's allowances, the scores' error scale); inputs untouched."""
    rank, lens = params["kv_lora_rank"], inputs["cache_lens"]
    angles = bf16.rope_angles(inputs["positions"], bf16.yarn_inv_freq(params))
    magnitude = bf16.rope_magnitude(params)
    kv_a = inputs["kv_a"]
    c_kv = bf16.rms_norm(kv_a[..., :rank], inputs["kv_a_norm_weight"], params["rms_norm_eps"])
    q_pe_roped = bf16.rotate_interleaved(inputs["q_pe"].to(F64), angles[:, None, :], magnitude)
    k_pe_roped = bf16.rotate_interleaved(kv_a[..., rank:].to(F64), angles, magnitude)
    codes, scales, allowance, scale_allowance = quantize_row(c_kv)
    kv_latent = _appended(inputs["kv_latent"], codes, lens)
    kv_scale = _appended(inputs["kv_scale"], scales, lens)
    kv_rope = _appended(inputs["kv_rope"], k_pe_roped, lens)
    latent_allowance = _appended(torch.zeros_like(kv_latent), allowance, lens)
    scales_allowance = _appended(torch.zeros_like(kv_scale), scale_allowance, lens)
    w_uk, w_uv = bf16.split_kv_b(inputs["w_kv_b"], params)
    q_absorbed = bf16.absorb_query(inputs["q_nope"], w_uk)
    cache = torch.cat((dequantize(kv_latent, kv_scale, BLOCK), kv_rope), dim=-1)
    stages = _attention(q_absorbed, q_pe_roped, cache, lens, w_uv, params)
    cache[torch.arange(cache.shape[0], device=cache.device), lens.long(), :rank] = c_kv
    unquantized = _attention(q_absorbed, q_pe_roped, cache, lens, w_uv, params)["o_heads"]
    return {
        "c_kv": c_kv,
        "q_pe_roped": q_pe_roped,
        "k_pe_roped": k_pe_roped,
        "kv_latent": kv_latent,
        "kv_scale": kv_scale,
        "kv_rope": kv_rope,
        "q_absorbed": q_absorbed,
        **stages,
        "o_heads_unquantized": unquantized,
        "kv_latent_allowance": latent_allowance,  # not a stage: one e4m3 unit at rounding ties, else 0
        "kv_scale_allowance": scales_allowance,  # not a stage: a bf16 unit of the scale at a tie, else two float32 units
    }
