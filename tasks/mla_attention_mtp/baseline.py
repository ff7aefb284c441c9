"""Eager MLA step with s_q query tokens per request in PyTorch: the bf16 decode baseline's kernels, causal over the
new tokens.

The S new rows are appended at cache_lens[b] + i (kv_a_layernorm and rope in fp32, token i at position positions[b]
+ i), then the S x H queries of a request attend in one bmm (float32 logits), masked past cache_lens[b] + i for
token i, float32 softmax, bf16 products, as tasks/mla_attention/baseline.py (whose helpers these are). No host
synchronization: masked to the cache's shape, never to a length read on the host.
"""

from __future__ import annotations

import torch

from tasks.mla_attention.baseline import _bmm_fp32_out, _rope_interleaved, _rope_inv_freq, _rope_magnitude, _softmax_scale


def _prepare(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """c_kv [B, S, 512], k_pe_roped [B, S, 64] and q_pe_roped [B, S, H, 64] in the cache's bf16."""
    q_pe, kv_a, positions = inputs["q_pe"], inputs["kv_a"], inputs["positions"]
    rank, dtype = params["kv_lora_rank"], inputs["kv_cache"].dtype
    s_q = kv_a.shape[1]
    c_kv_raw = kv_a[..., :rank].float()
    c_kv = (
        c_kv_raw
        * torch.rsqrt(c_kv_raw.pow(2).mean(-1, keepdim=True) + params["rms_norm_eps"])
        * inputs["kv_a_norm_weight"].float()
    ).to(dtype)
    token_positions = positions[:, None] + torch.arange(s_q, device=positions.device)[None, :]
    angles = token_positions.float()[..., None] * _rope_inv_freq(params, q_pe.device)  # [B, S, rope/2]
    magnitude = _rope_magnitude(params)
    cos, sin = torch.cos(angles) * magnitude, torch.sin(angles) * magnitude
    return {
        "c_kv": c_kv,
        "k_pe_roped": _rope_interleaved(kv_a[..., rank:], cos, sin).to(dtype),
        "q_pe_roped": _rope_interleaved(q_pe, cos[:, :, None], sin[:, :, None]).to(dtype),
    }


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict, trace: dict | None = None) -> None:
    q_nope, w_kv_b, kv_cache, cache_lens = inputs["q_nope"], inputs["w_kv_b"], inputs["kv_cache"], inputs["cache_lens"]
    rank, nope, v_dim = params["kv_lora_rank"], params["qk_nope_head_dim"], params["v_head_dim"]
    batch, s_q, heads, _ = q_nope.shape
    capacity = kv_cache.shape[1]
    dtype = kv_cache.dtype
    prepared = _prepare(inputs, params)

    # Token i's row goes to cache_lens[b] + i.
    ends = cache_lens.long()[:, None] + torch.arange(s_q, device=kv_cache.device)[None, :]  # [B, S]
    requests = torch.arange(batch, device=kv_cache.device)[:, None].expand(batch, s_q)
    kv_cache[requests, ends] = torch.cat((prepared["c_kv"], prepared["k_pe_roped"]), dim=-1)

    w_per_head = w_kv_b.view(heads, nope + v_dim, rank)
    w_uk, w_uv = w_per_head[:, :nope], w_per_head[:, nope:]
    rows = q_nope.reshape(batch * s_q, heads, nope).transpose(0, 1)  # [H, B*S, nope]
    q_absorbed = torch.bmm(rows, w_uk).transpose(0, 1).reshape(batch, s_q, heads, rank)

    q_full = torch.cat((q_absorbed, prepared["q_pe_roped"]), dim=-1).reshape(batch, s_q * heads, -1)
    logits = _bmm_fp32_out(q_full, kv_cache.transpose(1, 2)).view(batch, s_q, heads, capacity)  # fp32
    token = torch.arange(capacity, device=kv_cache.device)
    hidden = token[None, None, :] > ends[:, :, None]  # [B, S, L]: token i sees rows 0..cache_lens + i
    scores = (logits * _softmax_scale(params)).masked_fill(hidden[:, :, None, :], float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    o_latent = torch.bmm(probs.to(dtype).view(batch, s_q * heads, capacity), kv_cache[..., :rank])
    o_latent = o_latent.view(batch, s_q, heads, rank)

    per_head = o_latent.reshape(batch * s_q, heads, rank).transpose(0, 1)  # [H, B*S, rank]
    o_heads = torch.bmm(per_head, w_uv.transpose(1, 2)).transpose(0, 1).reshape(batch, s_q, heads, v_dim)
    outputs["o_heads"].copy_(o_heads)

    if trace is not None:
        trace.update(prepared)
        trace.update(
            {
                "kv_cache": kv_cache.clone(),
                "q_absorbed": q_absorbed,
                "scores": scores,
                "probs": probs,
                "o_latent": o_latent,
                "o_heads": o_heads,
            }
        )
