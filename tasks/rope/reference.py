"""Canonical DeepSeek-V3 rope (YaRN, interleaved pairs): every stage in float64 from the upcast inputs."""

from __future__ import annotations

import math

import torch


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _correction_dim(rotations: float, dim: int, theta: float, original_max_positions: int) -> float:
    # The pair index whose wavelength fits `rotations` times into the pre-training context.
    return dim * math.log(original_max_positions / (rotations * 2 * math.pi)) / (2 * math.log(theta))


def yarn_correction_range(params: dict) -> tuple[float, float]:
    """(low, high) pair indices of the YaRN ramp: pairs <= low keep theta's frequency, pairs >= high
    are divided by `factor`, pairs between are blended linearly. DeepSeek-V3: (10, 23)."""
    scaling = params["rope_scaling"]
    dim = int(params["qk_rope_head_dim"])
    theta = float(params["rope_theta"])
    original = int(scaling["original_max_position_embeddings"])
    low = _correction_dim(float(scaling.get("beta_fast", 32.0)), dim, theta, original)
    high = _correction_dim(float(scaling.get("beta_slow", 1.0)), dim, theta, original)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # a zero-width ramp would divide by zero
    return low, high


def cos_sin_scale(params: dict) -> float:
    """The factor YaRN puts on cos and sin. DeepSeek-V3 sets mscale = mscale_all_dim, so it is exactly
    1: its whole magnitude correction lives in the softmax scale instead."""
    scaling = params.get("rope_scaling")
    if not scaling or scaling.get("type", scaling.get("rope_type")) in (None, "default"):
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling["factor"])
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return _yarn_mscale(factor, float(scaling["mscale"])) / _yarn_mscale(factor, float(scaling["mscale_all_dim"]))
    return _yarn_mscale(factor)


def inverse_frequencies(params: dict) -> torch.Tensor:
    """float64 [qk_rope_head_dim // 2]: theta^(-2i/d), YaRN-blended when rope_scaling is yarn."""
    dim = int(params["qk_rope_head_dim"])
    theta = float(params["rope_theta"])
    pair = torch.arange(dim // 2, dtype=torch.float64)
    base = 1.0 / theta ** (2.0 * pair / dim)
    scaling = params.get("rope_scaling")
    kind = scaling.get("type", scaling.get("rope_type")) if scaling else None
    if not scaling or kind in (None, "default"):
        return base
    if kind != "yarn":
        raise ValueError(f"rope_scaling type {kind!r} is not defined by this task (only yarn or none)")
    low, high = yarn_correction_range(params)
    ramp = ((pair - low) / (high - low)).clamp(0.0, 1.0)
    return base * (1.0 - ramp) + (base / float(scaling["factor"])) * ramp


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """Rotary embedding of `x` at `positions`; returns float64 stages, never mutates inputs.

    inv_freq[i] = YaRN blend of theta^(-2i/d), i < d/2 (see `inverse_frequencies`)      [d/2]
    cos[t, i]   = s * cos(positions[t] * inv_freq[i]),  sin likewise                    [T, d/2]
    y[t, h, 2i]   = x[t, h, 2i] * cos[t, i] - x[t, h, 2i+1] * sin[t, i]                 [T, H, d]
    y[t, h, 2i+1] = x[t, h, 2i+1] * cos[t, i] + x[t, h, 2i] * sin[t, i]

    Pairs are interleaved, (x[2i], x[2i+1]), as DeepSeek lays out q_pe and k_pe. s is
    `cos_sin_scale(params)`, exactly 1 for DeepSeek-V3. YaRN applies at every position (the
    transformers convention), not only past original_max_position_embeddings.

    Angles are exact here (float64); a float32 kernel's angles drift in proportion to the angle
    (about 1e-3 rad at position 16k), so tolerances on cos, sin and y must grow with the position.
    NaN/inf in x follow float64 arithmetic per pair: inf * cos is +-inf, inf * 0 (sin at position 0)
    is NaN, and a NaN spoils both members of its pair.
    """
    dim = int(params["qk_rope_head_dim"])
    x = inputs["x"].to(torch.float64)
    positions = inputs["positions"]
    if x.dim() != 3 or x.shape[-1] != dim or positions.shape != (x.shape[0],):
        raise ValueError(f"expected x [T, H, {dim}] and positions [T], got {tuple(x.shape)} and {tuple(positions.shape)}")
    if positions.is_floating_point():
        raise ValueError("positions must be integers")

    inv_freq = inverse_frequencies(params).to(x.device)
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    scale = cos_sin_scale(params)
    cos = torch.cos(angles) * scale
    sin = torch.sin(angles) * scale

    x_even, x_odd = x[..., 0::2], x[..., 1::2]
    cos_b, sin_b = cos[:, None, :], sin[:, None, :]
    y = torch.stack((x_even * cos_b - x_odd * sin_b, x_odd * cos_b + x_even * sin_b), dim=-1).flatten(-2)
    return {"inv_freq": inv_freq, "cos": cos, "sin": sin, "y": y}


def transformers_config(params: dict):
    """A transformers `DeepseekV3Config` carrying these rope params (transformers >= 5 reads YaRN from
    `rope_parameters`; leaving it out silently gives plain theta-10000 rope)."""
    from transformers import DeepseekV3Config

    scaling = dict(params.get("rope_scaling") or {})
    rope_type = scaling.pop("type", scaling.pop("rope_type", "default"))
    rope_parameters = {"rope_type": rope_type, "rope_theta": float(params["rope_theta"]), **scaling}
    return DeepseekV3Config(
        rope_parameters=rope_parameters,
        qk_rope_head_dim=int(params["qk_rope_head_dim"]),
        max_position_embeddings=163840,  # DeepSeek-V3's; YaRN reads `factor`, so it changes nothing here
        rope_interleave=True,
    )


ORACLE_POSITIONS = (0, 1, 2, 17, 1000, 4095, 4096, 4097, 8191, 12345, 16383, 16384, 163839)


def check_against_oracle(params: dict | None = None, seed: int = 0) -> dict:
    """Compare `reference` with Hugging Face transformers' DeepSeek-V3 rope.

    - inv_freq against `ROPE_INIT_FUNCTIONS["yarn"]` (float32 there: relative 1e-6), and its
      attention factor against `cos_sin_scale`;
    - the rotation: transformers' `apply_rotary_pos_emb_interleave` fed this reference's float64
      cos/sin; it returns pairs permuted to (evens, odds), so y is permuted the same way (1e-12);
      and its rotate-half `apply_rotary_pos_emb` on x de-interleaved by hand, the same permutation;
    - the cos/sin transformers' `DeepseekV3RotaryEmbedding` builds itself (float32 angles), within
      1e-6 + 5e-7 * angle, the float32 angle drift.
    Returns a dict with `passed`, `oracle` and each measured error.
    """
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import (
        DeepseekV3RotaryEmbedding,
        apply_rotary_pos_emb,
        apply_rotary_pos_emb_interleave,
    )

    if params is None:
        from tasks.rope import DEFAULT_PARAMS

        params = DEFAULT_PARAMS
    dim = int(params["qk_rope_head_dim"])
    config = transformers_config(params)
    rope_type = (config.rope_parameters or {}).get("rope_type")
    if rope_type is None:
        raise ValueError("transformers' config names no rope_type")
    if rope_type == "default":
        oracle_inv_freq, oracle_scale = DeepseekV3RotaryEmbedding.compute_default_rope_parameters(config)
    else:
        oracle_inv_freq, oracle_scale = ROPE_INIT_FUNCTIONS[rope_type](config)
    ours_inv_freq = inverse_frequencies(params)
    inv_freq_err = ((oracle_inv_freq.double() - ours_inv_freq).abs() / ours_inv_freq).max().item()

    generator = torch.Generator().manual_seed(seed)
    positions = torch.tensor(ORACLE_POSITIONS, dtype=torch.int64)
    heads = 3
    x = torch.randn(len(ORACLE_POSITIONS), heads, dim, dtype=torch.float64, generator=generator)
    ours = reference({"x": x, "positions": positions}, params)

    # transformers' layout: [batch, heads, tokens, dim], cos/sin as cat(freqs, freqs) [batch, tokens, dim].
    x_bhtd = x.permute(1, 0, 2)[None]
    cos_full = torch.cat((ours["cos"], ours["cos"]), dim=-1)[None]
    sin_full = torch.cat((ours["sin"], ours["sin"]), dim=-1)[None]
    oracle_y, _ = apply_rotary_pos_emb_interleave(x_bhtd, x_bhtd, cos_full, sin_full)
    ours_y = ours["y"].permute(1, 0, 2)[None]
    ours_y_permuted = torch.cat((ours_y[..., 0::2], ours_y[..., 1::2]), dim=-1)
    rotation_err = ((oracle_y - ours_y_permuted).abs().max() / ours_y.abs().max()).item()
    x_deinterleaved = torch.cat((x_bhtd[..., 0::2], x_bhtd[..., 1::2]), dim=-1)
    rotate_half_y, _ = apply_rotary_pos_emb(x_deinterleaved, x_deinterleaved, cos_full, sin_full)
    rotate_half_err = ((rotate_half_y - ours_y_permuted).abs().max() / ours_y.abs().max()).item()

    rotary = DeepseekV3RotaryEmbedding(config)
    oracle_cos, oracle_sin = rotary(x.to(torch.float32), positions[None])
    half = dim // 2
    angle = positions.to(torch.float64)[:, None] * ours["inv_freq"][None, :]
    bound = 1e-6 + 5e-7 * angle
    table_excess = max(
        ((oracle_cos[0, :, :half].double() - ours["cos"]).abs() / bound).max().item(),
        ((oracle_sin[0, :, :half].double() - ours["sin"]).abs() / bound).max().item(),
    )
    scale_matches = math.isclose(float(oracle_scale), cos_sin_scale(params), rel_tol=1e-12)
    return {
        "passed": inv_freq_err <= 1e-6
        and max(rotation_err, rotate_half_err) <= 1e-12
        and table_excess <= 1.0
        and scale_matches,
        "oracle": "transformers DeepSeek-V3 (ROPE_INIT_FUNCTIONS, DeepseekV3RotaryEmbedding, "
        "apply_rotary_pos_emb_interleave, apply_rotary_pos_emb)",
        "rope_type": rope_type,
        "inv_freq_max_rel_err": inv_freq_err,
        "cos_sin_scale": float(oracle_scale),
        "rotation_max_rel_err": rotation_err,
        "rotate_half_max_rel_err": rotate_half_err,
        "float32_table_err_over_bound": table_excess,
    }
