"""PyTorch eager DeepSeek-V3 rope: YaRN inv_freq and the cos/sin table built per call in float32 (as
transformers and vLLM build them), then the interleaved rotation on x viewed as (even, odd) pairs."""

from __future__ import annotations

import math

import torch


def _yarn_ramp_bounds(params: dict) -> tuple[float, float]:
    scaling = params["rope_scaling"]
    dim = int(params["qk_rope_head_dim"])
    theta = float(params["rope_theta"])
    original = int(scaling["original_max_position_embeddings"])

    def correction_dim(rotations: float) -> float:
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(theta))

    low = correction_dim(float(scaling.get("beta_fast", 32.0)))
    high = correction_dim(float(scaling.get("beta_slow", 1.0)))
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    return low, (high + 0.001 if low == high else high)


def _cos_sin_scale(scaling: dict) -> float:
    def mscale(factor: float, m: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0

    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling["factor"])
    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return mscale(factor, float(scaling["mscale"])) / mscale(factor, float(scaling["mscale_all_dim"]))
    return mscale(factor)


def _inverse_frequencies(params: dict, device: torch.device) -> tuple[torch.Tensor, float]:
    dim = int(params["qk_rope_head_dim"])
    theta = float(params["rope_theta"])
    base = 1.0 / theta ** (torch.arange(0, dim, 2, dtype=torch.float32, device=device) / dim)
    scaling = params.get("rope_scaling")
    kind = scaling.get("type", scaling.get("rope_type")) if scaling else None
    if not scaling or kind in (None, "default"):
        return base, 1.0
    if kind != "yarn":
        raise ValueError(f"rope_scaling type {kind!r} is not supported (only yarn or none)")
    low, high = _yarn_ramp_bounds(params)
    ramp = ((torch.arange(dim // 2, dtype=torch.float32, device=device) - low) / (high - low)).clamp(0.0, 1.0)
    return base * (1.0 - ramp) + (base / float(scaling["factor"])) * ramp, _cos_sin_scale(scaling)


def run(
    inputs: dict[str, torch.Tensor],
    outputs: dict[str, torch.Tensor],
    params: dict,
    trace: dict | None = None,
) -> None:
    x = inputs["x"]
    positions = inputs["positions"]
    tokens, heads, dim = x.shape
    inv_freq, scale = _inverse_frequencies(params, x.device)
    angles = torch.outer(positions.to(torch.float32), inv_freq)
    cos = torch.cos(angles) * scale
    sin = torch.sin(angles) * scale

    pairs = x.to(torch.float32).reshape(tokens, heads, dim // 2, 2)
    x_even, x_odd = pairs[..., 0], pairs[..., 1]
    cos_b, sin_b = cos[:, None, :], sin[:, None, :]
    rotated = torch.stack((x_even * cos_b - x_odd * sin_b, x_odd * cos_b + x_even * sin_b), dim=-1)
    outputs["y"].copy_(rotated.reshape(tokens, heads, dim))
    if trace is not None:
        trace["inv_freq"] = inv_freq
        trace["cos"] = cos
        trace["sin"] = sin
