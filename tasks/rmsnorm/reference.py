"""Canonical RMSNorm: every stage in float64 from the upcast inputs."""

from __future__ import annotations

import torch


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """RMSNorm of each row of `x`, scaled by `weight`; returns float64 stages, never mutates inputs.

    inv_rms[m] = 1 / sqrt(mean_n(x[m, n]^2) + eps)                    [M]
    y[m, n]    = x[m, n] * inv_rms[m] * weight[n]                     [M, N]

    Rounding contract for implementations: accumulate in float32, form x * inv_rms * weight in
    float32, and round once to x's dtype at the end. That is the order of
    `torch.nn.functional.rms_norm` (which DeepSeek-V3's own inference code calls; torch 2.13 rounds
    once). Hugging Face's `DeepseekV3RMSNorm` rounds x * inv_rms to the input dtype *before*
    multiplying by the weight: a legitimate variant one extra rounding away, which the tolerances
    must accept (tests check that they do).

    Edge values, as float64 arithmetic defines them (and `F.rms_norm` in float64 agrees):
    - an all-zero row: inv_rms = 1/sqrt(eps), y = 0;
    - a row holding +-inf: mean square inf, inv_rms = 0, y = NaN where x is inf (inf * 0), 0 elsewhere;
    - a NaN in a row: inv_rms and the whole row of y are NaN; NaN/inf in weight spoil that column.
    Finite fp32 inputs above ~1.8e19 overflow x^2 in any fp32-accumulating kernel; they are outside
    the domain the tolerances cover.
    """
    eps = float(params["eps"])
    x = inputs["x"].to(torch.float64)
    weight = inputs["weight"].to(torch.float64)
    if x.dim() != 2 or weight.shape != (x.shape[-1],):
        raise ValueError(f"expected x [M, N] and weight [N], got {tuple(x.shape)} and {tuple(weight.shape)}")
    mean_square = x.square().mean(dim=-1)
    inv_rms = 1.0 / torch.sqrt(mean_square + eps)
    y = x * inv_rms[:, None] * weight[None, :]
    return {"inv_rms": inv_rms, "y": y}


def check_against_oracle(seed: int = 0) -> dict:
    """Compare `reference` with `torch.nn.functional.rms_norm` in float64 on ordinary and edge rows.

    Returns `{"passed": bool, "oracle": str, "max_rel_err": float, "nan_positions_match": bool}`.
    """
    generator = torch.Generator().manual_seed(seed)
    eps = 1e-6
    worst = 0.0
    nan_match = True
    shapes = [(3, 1000), (1, 1), (4, 7168), (5, 64)]
    for m, n in shapes:
        scale = torch.exp(torch.empty(m, 1, dtype=torch.float64).uniform_(-5, 5, generator=generator))
        x = torch.randn(m, n, dtype=torch.float64, generator=generator) * scale
        weight = 1.0 + 0.5 * torch.randn(n, dtype=torch.float64, generator=generator)
        if m >= 3:
            x[0] = 0.0
            x[1, n // 2] = float("inf")
            x[2, 0] = float("nan")
        ours = reference({"x": x, "weight": weight}, {"eps": eps})["y"]
        oracle = torch.nn.functional.rms_norm(x, (n,), weight, eps)
        nan_match &= bool(torch.equal(torch.isnan(ours), torch.isnan(oracle)))
        finite = torch.isfinite(oracle)
        err = (ours[finite] - oracle[finite]).abs().max().item()
        worst = max(worst, err / max(oracle[finite].abs().max().item(), 1e-300))
    return {
        "passed": nan_match and worst <= 1e-12,
        "oracle": "torch.nn.functional.rms_norm (float64)",
        "max_rel_err": worst,
        "nan_positions_match": nan_match,
    }
