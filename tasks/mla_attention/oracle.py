"""Validation of the reference against an oracle nobody in this project wrote:
transformers' DeepseekV3Attention, configured as DeepSeek-V3 (per-head sizes, YaRN, interleaved rope).

The oracle is first checked to really be DeepSeek-V3 (softmax scale and YaRN inv_freq): its default
configuration uses plain rope and would otherwise happily validate the theta-10000 bug.

The oracle computes rope angles in float32 (position * fp32 inv_freq), while the reference uses float64
angles. At positions ~6000 that rounding alone moves angles by ~1e-4 rad, which peaked attention
amplifies. So the tight comparison feeds the oracle's own float32 angles to the reference (its rotation,
pairing and everything else stay the reference's own), the frequencies are compared separately, and the
exact-angle reference is compared too, against a bound that grows with the position.

transformers 5 caches MLA compressed: the normalized latent and the roped k_pe (in its (evens, odds)
layout). Both are compared directly with the reference's cache rows, and so are the per-head keys and
values the oracle expands from them (expand_kv), which checks the W_UK / W_UV split of kv_b_proj.
"""
from __future__ import annotations

import inspect
import math

import torch

from tasks.mla_attention import reference as ref

ORACLE_NAME = "transformers.DeepseekV3Attention"
EXPECTED_SCALE = 0.1352338
TOLERANCE = 1e-4
# The fp32 product position * inv_freq adds up to half an ulp, 2^-24 relative, to the inv_freq rounding.
FP32_PRODUCT_REL_ERROR = 2.0 ** -24

_HIDDEN, _HEADS, _Q_LORA_RANK = 256, 4, 64
_PREFILL_TOKENS = 5
_FIRST_POSITIONS = (6000, 7321)  # past the 4096 original context, where YaRN and plain rope differ most


def cache_keyword(forward, cache) -> dict:
    """`{name: cache}` under the name `forward` declares for its cache. transformers renamed the argument
    (past_key_values -> cache, 5.2x) and swallows an unknown keyword in **kwargs: a wrong name runs every step
    without its past, as if the cache were empty."""
    return {"cache" if "cache" in inspect.signature(forward).parameters else "past_key_values": cache}


def deepseek_v3_oracle_config(params: dict = ref.DEEPSEEK_V3_PARAMS):
    """A small DeepseekV3Config with DeepSeek-V3's per-head sizes and YaRN rope (transformers 5 API)."""
    from transformers import DeepseekV3Config

    yarn = params["rope_scaling"]
    return DeepseekV3Config(
        hidden_size=_HIDDEN,
        num_attention_heads=_HEADS,
        num_key_value_heads=_HEADS,
        q_lora_rank=_Q_LORA_RANK,
        kv_lora_rank=params["kv_lora_rank"],
        qk_nope_head_dim=params["qk_nope_head_dim"],
        qk_rope_head_dim=params["qk_rope_head_dim"],
        v_head_dim=params["v_head_dim"],
        rms_norm_eps=params["rms_norm_eps"],
        max_position_embeddings=163840,
        num_hidden_layers=1,
        # transformers 5 reads YaRN from rope_parameters; leaving it out silently gives plain rope.
        rope_parameters={
            "rope_type": "yarn",
            "rope_theta": params["rope_theta"],
            "factor": yarn["factor"],
            "beta_fast": yarn["beta_fast"],
            "beta_slow": yarn["beta_slow"],
            "mscale": yarn["mscale"],
            "mscale_all_dim": yarn["mscale_all_dim"],
            "original_max_position_embeddings": yarn["original_max_position_embeddings"],
        },
        rope_interleave=True,
        attention_bias=False,
        # a keyword of every transformers config that DeepseekV3Config's typed signature does not name
        attn_implementation="eager",  # pyright: ignore[reportCallIssue]
    )


def max_rel_err(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Largest absolute difference, relative to the largest magnitude of the expected tensor."""
    actual, expected = actual.to(ref.F64), expected.to(ref.F64)
    return float((actual - expected).abs().max() / expected.abs().max())


def _random_weights(attn, generator: torch.Generator) -> None:
    """Weights that make attention peaked (raw logits std ~30, scaled ~4) and the layernorms matter."""
    def normal(shape, std):
        return torch.randn(shape, generator=generator, dtype=ref.F64) * std

    def gamma(size):
        return torch.rand(size, generator=generator, dtype=ref.F64) + 0.5

    rank = attn.kv_lora_rank
    with torch.no_grad():
        attn.q_a_proj.weight.copy_(normal(attn.q_a_proj.weight.shape, 3.0 / math.sqrt(_HIDDEN)))
        attn.q_a_layernorm.weight.copy_(gamma(_Q_LORA_RANK))
        attn.q_b_proj.weight.copy_(normal(attn.q_b_proj.weight.shape, 2.0 / math.sqrt(_Q_LORA_RANK)))
        attn.kv_a_proj_with_mqa.weight.copy_(normal(attn.kv_a_proj_with_mqa.weight.shape, 2.0 / math.sqrt(_HIDDEN)))
        attn.kv_a_layernorm.weight.copy_(gamma(rank))
        attn.kv_b_proj.weight.copy_(normal(attn.kv_b_proj.weight.shape, 1.0 / math.sqrt(rank)))
        attn.o_proj.weight.copy_(normal(attn.o_proj.weight.shape, 1.0 / math.sqrt(attn.o_proj.in_features)))


def _layer_weights(attn) -> dict[str, torch.Tensor]:
    return {name: getattr(attn, name).weight.detach() for name in ref.LAYER_WEIGHT_NAMES}


def _evens_then_odds(x: torch.Tensor) -> torch.Tensor:
    """transformers stores roped vectors as (x[0::2], x[1::2]) concatenated."""
    return torch.cat((x[..., 0::2], x[..., 1::2]), dim=-1)


def _run_reference_steps(hidden, weights, positions, params, angles=None):
    """Prefill as a sequence of decode steps (causal attention == growing cache), then the decode step.
    Returns (outputs [B, steps, hidden], final cache, last step's probs)."""
    batch, steps = positions.shape
    rank_plus_rope = params["kv_lora_rank"] + params["qk_rope_head_dim"]
    kv_cache = torch.zeros(batch, steps, rank_plus_rope, dtype=ref.F64)
    outputs = []
    for t in range(steps):
        lens = torch.full((batch,), t, dtype=torch.int32)
        step = ref.full_layer_reference(hidden[:, t], weights, positions[:, t], kv_cache, lens, params,
                                        angles=None if angles is None else angles[:, t])
        kv_cache = step["kv_cache"]
        outputs.append(step["output"])
    return torch.stack(outputs, dim=1), kv_cache, step["probs"]


def check_oracle_is_deepseek_v3(attn, rotary, params: dict = ref.DEEPSEEK_V3_PARAMS) -> dict:
    """Softmax scale and rope frequencies of a transformers attention/rotary pair, against DeepSeek-V3's."""
    scaling = float(attn.scaling)
    oracle_inv_freq = rotary.inv_freq.detach().to(ref.F64)
    yarn, plain = ref.yarn_inv_freq(params), ref.plain_inv_freq(params)
    inv_freq_err = float(((oracle_inv_freq - yarn).abs() / yarn).max())
    distance_from_plain = float(((oracle_inv_freq - plain).abs() / plain).max())
    ok = (
        abs(scaling - EXPECTED_SCALE) < 1e-6
        and abs(scaling - ref.softmax_scale(params)) < 1e-12
        and inv_freq_err < 1e-6
        and distance_from_plain > 0.5
        and abs(float(rotary.attention_scaling) - ref.rope_magnitude(params)) < 1e-12
    )
    return {"ok": bool(ok), "scaling": scaling, "inv_freq_max_rel_err": inv_freq_err,
            "inv_freq_distance_from_plain": distance_from_plain}


def _cache_errors(attn, oracle_latent, oracle_k_rot, kv_cache, params) -> dict[str, float]:
    rank = params["kv_lora_rank"]
    c_kv, k_pe = kv_cache[..., :rank], kv_cache[..., rank:]
    w_uk, w_uv = ref.split_kv_b(attn.kv_b_proj.weight.detach(), params)
    with torch.no_grad():
        oracle_keys, oracle_values = attn.expand_kv(oracle_latent, oracle_k_rot)
    nope = params["qk_nope_head_dim"]
    return {
        "c_kv": max_rel_err(oracle_latent[:, 0], c_kv),
        "k_pe_roped": max_rel_err(oracle_k_rot[:, 0], _evens_then_odds(k_pe)),
        "k_nope_per_head": max_rel_err(oracle_keys[..., :nope], torch.einsum("bsr,hnr->bhsn", c_kv, w_uk)),
        "v_per_head": max_rel_err(oracle_values, torch.einsum("bsr,hvr->bhsv", c_kv, w_uv)),
        "k_pe_per_head": max_rel_err(oracle_keys[:, 0, :, nope:], _evens_then_odds(k_pe)),
    }


def validate_against_oracle(seed: int = 0, params: dict = ref.DEEPSEEK_V3_PARAMS) -> dict:
    """Prefill a few tokens then decode one, past position 4096, through both the oracle and the reference."""
    import transformers
    from transformers.cache_utils import CacheLayerMixin, DynamicCache
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3Attention,
        DeepseekV3RotaryEmbedding,
    )

    config = deepseek_v3_oracle_config(params)
    attn = DeepseekV3Attention(config, layer_idx=0).to(ref.F64).eval()
    rotary = DeepseekV3RotaryEmbedding(config)
    generator = torch.Generator().manual_seed(seed)
    _random_weights(attn, generator)

    # Is the oracle DeepSeek-V3 at all? Checked before any comparison is trusted.
    identity = check_oracle_is_deepseek_v3(attn, rotary, params)

    batch, steps = len(_FIRST_POSITIONS), _PREFILL_TOKENS + 1
    positions = torch.tensor(_FIRST_POSITIONS, dtype=torch.int64)[:, None] + torch.arange(steps)
    hidden = torch.randn(batch, steps, _HIDDEN, generator=generator, dtype=ref.F64)

    cache = DynamicCache(config=config)
    cache_argument = cache_keyword(DeepseekV3Attention.forward, cache)
    prefill = slice(0, _PREFILL_TOKENS)
    causal = torch.full((_PREFILL_TOKENS, _PREFILL_TOKENS), float("-inf"), dtype=ref.F64).triu(1)
    with torch.no_grad():
        cos, sin = rotary(hidden[:, prefill], positions[:, prefill])
        out_prefill, _ = attn(hidden[:, prefill], (cos, sin), causal[None, None], **cache_argument)
        cos, sin = rotary(hidden[:, -1:], positions[:, -1:])
        out_decode, _ = attn(hidden[:, -1:], (cos, sin), None, **cache_argument)
    oracle_out = torch.cat((out_prefill, out_decode), dim=1)
    layer = cache.layers[0]
    assert isinstance(layer, CacheLayerMixin)  # an attention layer's cache, not a linear-attention state
    oracle_latent, oracle_k_rot = layer.keys, layer.values  # compressed cache (transformers 5)

    weights = _layer_weights(attn)
    # The oracle's own float32 angles: position.float() * inv_freq in float32, as its rotary embedding does.
    oracle_angles = (positions.float()[..., None] * rotary.inv_freq.float()).to(ref.F64)
    out_matched, cache_matched, probs = _run_reference_steps(hidden, weights, positions, params,
                                                             angles=oracle_angles)
    out_exact, cache_exact, _ = _run_reference_steps(hidden, weights, positions, params)

    cache_errors = _cache_errors(attn, oracle_latent, oracle_k_rot, cache_matched, params)
    cache_errors_exact = _cache_errors(attn, oracle_latent, oracle_k_rot, cache_exact, params)
    max_err_output = max_rel_err(oracle_out, out_matched)
    max_err_cache = max(cache_errors.values())
    max_err_output_exact = max_rel_err(oracle_out, out_exact)
    max_err_cache_exact = max(cache_errors_exact.values())
    # The oracle's angles are off by up to position * (inv_freq rounding + product rounding) rad; a factor 2
    # covers what the peaked softmax makes of that on the output. Capped so that a wrong frequency table
    # cannot widen its own tolerance.
    inv_freq_rounding = min(identity["inv_freq_max_rel_err"], 1e-6)
    angle_error_bound = (inv_freq_rounding + FP32_PRODUCT_REL_ERROR) * int(positions.max())
    exact_angle_tolerance = max(TOLERANCE, 2 * angle_error_bound)

    passed = (
        identity["ok"]
        and max_err_output < TOLERANCE
        and max_err_cache < TOLERANCE
        and max_err_output_exact < exact_angle_tolerance
        and max_err_cache_exact < exact_angle_tolerance
    )
    return {
        "oracle": ORACLE_NAME,
        "oracle_version": transformers.__version__,
        "max_rel_err_output": max_err_output,
        "max_rel_err_cache": max_err_cache,
        "scaling": identity["scaling"],
        "passed": bool(passed),
        "oracle_is_deepseek_v3": identity["ok"],
        "inv_freq_max_rel_err": identity["inv_freq_max_rel_err"],
        "decode_mean_top1_prob": float(probs.max(dim=-1).values.mean()),
        "cache_errors": cache_errors,
        "max_rel_err_output_exact_angles": max_err_output_exact,
        "max_rel_err_cache_exact_angles": max_err_cache_exact,
        "exact_angle_tolerance": exact_angle_tolerance,
        "tolerance": TOLERANCE,
        "positions": positions.tolist(),
    }
