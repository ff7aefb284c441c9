"""Canonical float64 reference of one MLA decode step over a paged FP8 cache: each request's pages gathered from
the three pools (tasks/mla_attention_fp8_paged/layout.py), the FP8 reference's stages on that view
(tasks/mla_attention_fp8/reference.py: the same math, not a copy), then the new token's row written into its page of
a float64 copy of each pool, the pools' stages (and the codes' and scales' allowances, placed alike)."""
from __future__ import annotations

import torch

from tasks.mla_attention_fp8 import reference as contiguous
from tasks.mla_attention_fp8_paged.layout import gather, slots

F64 = torch.float64
# stage (or allowance) of the contiguous reference -> the pool its appended row goes to
POOLED = {"kv_latent": "kv_latent", "kv_scale": "kv_scale", "kv_rope": "kv_rope",
          "kv_latent_allowance": "kv_latent", "kv_scale_allowance": "kv_scale"}


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """Every stage in float64; scores and probs over the logical rows [B, H, P * 64], the pools whole."""
    block_table, lens = inputs["block_table"], inputs["cache_lens"]
    view = {k: v for k, v in inputs.items() if k != "block_table"}
    for name in ("kv_latent", "kv_scale", "kv_rope"):
        view[name] = gather(inputs[name], block_table)
    stages = contiguous.reference(view, params)
    pages, rows = slots(block_table, lens)
    batch = torch.arange(lens.numel(), device=lens.device)
    for name, pool in POOLED.items():
        paged = inputs[pool].to(F64, copy=True)
        if name.endswith("_allowance"):
            paged.zero_()
        paged[pages, rows] = stages[name][batch, lens.long()]
        stages[name] = paged
    return stages
