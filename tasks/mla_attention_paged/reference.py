"""Canonical float64 reference of one DeepSeek-V3 MLA decode step over a paged KV cache.

Each request's logical cache rows are gathered from its pages (tasks/mla_attention_paged/layout.py), the
contiguous task's stages run on that view (tasks/mla_attention/reference.py: the same math, not a copy),
and the new token's row is written into its page of a float64 copy of the pool, the `kv_cache` stage.
Only rows 0 .. cache_lens[b] of request b reach its output; a page the block table names for one of those
rows is read whatever it holds, so a NaN (or inf) page there poisons the answer, as it must. Rows past the
length (the rest of the last page, the padding entries' null page) are dropped, whatever they hold.
"""
from __future__ import annotations

import torch

from tasks.mla_attention import reference as contiguous
from tasks.mla_attention_paged.layout import PAGE, gather_pages, new_token_slots

DEEPSEEK_V3_PARAMS = contiguous.DEEPSEEK_V3_PARAMS
STAGES = contiguous.STAGES
FINAL_OUTPUTS = contiguous.FINAL_OUTPUTS
INOUT_INPUTS = contiguous.INOUT_INPUTS
F64 = contiguous.F64


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """Every stage in float64; `scores` and `probs` over the logical rows [B, H, L] (L = max_blocks * PAGE),
    `kv_cache` the whole pool [NB, PAGE, 576] after the append. New tensors, inputs untouched."""
    kv_cache, block_table, cache_lens = inputs["kv_cache"], inputs["block_table"], inputs["cache_lens"]
    view = gather_pages(kv_cache, block_table, block_table.shape[1] * PAGE)
    stages = contiguous.decode_step(
        inputs["q_nope"], inputs["q_pe"], inputs["kv_a"], inputs["kv_a_norm_weight"], inputs["w_kv_b"],
        inputs["positions"], cache_lens, view, params,
    )
    pool = kv_cache.to(F64, copy=True)  # one float64 copy of the pool, not a second
    pages, rows = new_token_slots(block_table, cache_lens)
    pool[pages, rows] = torch.cat((stages["c_kv"], stages["k_pe_roped"]), dim=-1)
    stages["kv_cache"] = pool
    return stages
