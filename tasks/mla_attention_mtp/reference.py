"""Canonical float64 reference of one DeepSeek-V3 MLA step with s_q query tokens per request (absorbed form).

Inputs are the single-token step's with a query-token axis after the batch: q_nope [B, S, H, 128], q_pe [B, S, H, 64],
kv_a [B, S, 576]. Token i of request b sits at position positions[b] + i (consecutive, as a draft of speculative
decoding is) and appends its row c_kv | k_pe_roped at cache row cache_lens[b] + i. Query token i attends causally: to
the past cache and to the new tokens 0..i, i.e. to rows 0 .. cache_lens[b] + i. The math of every token is the bf16
contract's decode step (tasks/mla_attention/reference.py: the same functions, not a copy), over the cache with all
S rows appended and token i's own length cache_lens[b] + i; `sequential_steps` is the independent statement of the
same thing (S single-token steps one after the other), which the tests hold it to.
"""

from __future__ import annotations

import torch

from tasks.mla_attention import reference as bf16

F64 = torch.float64
DEEPSEEK_V3_PARAMS = bf16.DEEPSEEK_V3_PARAMS
# Query tokens per request the reference supports (FlashMLA's s_q for multi-token prediction); the contract declares
# the same range (reference.supported_dims.S), so a case outside it is a contract error before anything runs.
MIN_S_Q, MAX_S_Q = 1, 4


def token_positions(positions: torch.Tensor, s_q: int) -> torch.Tensor:
    """[B, S] the position of each query token: positions[b] + i."""
    return positions.long()[:, None] + torch.arange(s_q, device=positions.device)[None, :]


def append_rows(kv_cache: torch.Tensor, rows: torch.Tensor, cache_lens: torch.Tensor) -> torch.Tensor:
    """A float64 copy of the cache with row cache_lens[b] + i of request b replaced by rows[b, i]."""
    updated = kv_cache.to(F64, copy=True)
    batch, s_q = rows.shape[:2]
    requests = torch.arange(batch, device=updated.device)[:, None].expand(batch, s_q)
    updated[requests, token_positions(cache_lens, s_q)] = rows.to(F64)
    return updated


def _per_token(q_absorbed, q_pe_roped, cache, cache_lens, w_uv, params) -> dict[str, torch.Tensor]:
    """The stages from the scores on, for each query token i over rows 0..cache_lens + i, stacked on axis 1."""
    rank, scale = params["kv_lora_rank"], bf16.softmax_scale(params)
    per_token: dict[str, list[torch.Tensor]] = {}
    for i in range(q_absorbed.shape[1]):
        lens = cache_lens.long() + i
        q_abs, q_pe = q_absorbed[:, i], q_pe_roped[:, i]
        scores = bf16.attention_scores(q_abs, q_pe, cache, lens, scale, rank)
        probs = bf16.attention_probs(scores)
        o_latent = bf16.latent_output(probs, cache, lens, rank)
        stages = {
            "scores": scores,
            "probs": probs,
            "o_latent": o_latent,
            "o_heads": bf16.unabsorb(o_latent, w_uv),
            "scores_error_scale": bf16.score_error_scale(q_abs, q_pe, cache, lens, scale, rank),
        }
        for name, value in stages.items():
            per_token.setdefault(name, []).append(value)
    return {name: torch.stack(values, dim=1) for name, values in per_token.items()}


def check_s_q(s_q: int) -> None:
    if not MIN_S_Q <= s_q <= MAX_S_Q:
        raise ValueError(f"s_q (dim S) = {s_q}: the reference supports {MIN_S_Q} to {MAX_S_Q} query tokens per request")


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """Every stage in float64 from the upcast inputs (and the scores' error scale); inputs untouched."""
    rank, lens = params["kv_lora_rank"], inputs["cache_lens"]
    q_nope, q_pe, kv_a = inputs["q_nope"], inputs["q_pe"], inputs["kv_a"]
    check_s_q(q_nope.shape[1])
    angles = bf16.rope_angles(token_positions(inputs["positions"], q_nope.shape[1]), bf16.yarn_inv_freq(params))
    magnitude = bf16.rope_magnitude(params)
    c_kv = bf16.rms_norm(kv_a[..., :rank], inputs["kv_a_norm_weight"], params["rms_norm_eps"])
    q_pe_roped = bf16.rotate_interleaved(q_pe.to(F64), angles[:, :, None, :], magnitude)
    k_pe_roped = bf16.rotate_interleaved(kv_a[..., rank:].to(F64), angles, magnitude)
    cache = append_rows(inputs["kv_cache"], torch.cat((c_kv, k_pe_roped), dim=-1), lens)
    w_uk, w_uv = bf16.split_kv_b(inputs["w_kv_b"], params)
    q_absorbed = torch.einsum("bshn,hnr->bshr", q_nope.to(F64), w_uk)
    return {
        "c_kv": c_kv,
        "q_pe_roped": q_pe_roped,
        "k_pe_roped": k_pe_roped,
        "kv_cache": cache,
        "q_absorbed": q_absorbed,
        **_per_token(q_absorbed, q_pe_roped, cache, lens, w_uv, params),
    }


def sequential_steps(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """The same step as S single-token decode steps run one after the other (bf16.reference on token i's slices,
    position positions + i, length cache_lens + i, over the cache the steps before it appended to): what a
    multi-token step must equal. Stages stacked on axis 1; kv_cache is the cache after the last step."""
    cache = inputs["kv_cache"].to(F64)
    steps: dict[str, list[torch.Tensor]] = {}
    for i in range(inputs["q_nope"].shape[1]):
        token = {name: inputs[name][:, i] for name in ("q_nope", "q_pe", "kv_a")}
        token.update(
            kv_a_norm_weight=inputs["kv_a_norm_weight"],
            w_kv_b=inputs["w_kv_b"],
            kv_cache=cache,
            positions=inputs["positions"].long() + i,
            cache_lens=inputs["cache_lens"].long() + i,
        )
        stages = bf16.reference(token, params)
        cache = stages.pop("kv_cache")
        for name, value in stages.items():
            steps.setdefault(name, []).append(value)
    return {"kv_cache": cache, **{name: torch.stack(values, dim=1) for name, values in steps.items()}}
