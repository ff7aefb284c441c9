"""PyTorch eager RMSNorm, the way Hugging Face model code writes it (float32 math, one op at a time)."""

from __future__ import annotations

import torch


def run(
    inputs: dict[str, torch.Tensor],
    outputs: dict[str, torch.Tensor],
    params: dict,
    trace: dict | None = None,
) -> None:
    x = inputs["x"]
    weight = inputs["weight"]
    hidden = x.to(torch.float32)
    variance = hidden.pow(2).mean(dim=-1, keepdim=True)
    inv_rms = torch.rsqrt(variance + params["eps"])
    # Weight multiplied in float32 before the single cast: the rounding order the reference documents.
    outputs["y"].copy_(hidden * inv_rms * weight.to(torch.float32))
    if trace is not None:
        trace["inv_rms"] = inv_rms.squeeze(-1)
