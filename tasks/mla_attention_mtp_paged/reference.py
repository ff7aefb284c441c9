"""Canonical float64 reference of one DeepSeek-V3 MLA step with s_q query tokens per request over a paged KV cache.

Each request's logical rows are gathered from its pages (tasks/mla_attention_paged/layout.py), the multi-token
reference runs on that view (tasks/mla_attention_mtp/reference.py: the same math, not a copy), and the S new rows are
written into their pages of a float64 copy of the pool, the `kv_cache` stage. Only rows 0 .. cache_lens[b] + i reach
token i's output; rows past them (the rest of the last page, unowned pages holding NaN) are dropped.
"""

from __future__ import annotations

import torch

from tasks.mla_attention_mtp import reference as mtp
from tasks.mla_attention_mtp_paged.layout import PAGE, gather_pages, new_token_slots

F64 = torch.float64


def reference(inputs: dict[str, torch.Tensor], params: dict) -> dict[str, torch.Tensor]:
    """Every stage in float64; scores and probs over the logical rows [B, S, H, 64 * P], kv_cache the whole pool
    after the append. New tensors, inputs untouched."""
    kv_cache, block_table, cache_lens = inputs["kv_cache"], inputs["block_table"], inputs["cache_lens"]
    view = gather_pages(kv_cache, block_table, block_table.shape[1] * PAGE)
    contiguous = {**{k: v for k, v in inputs.items() if k != "block_table"}, "kv_cache": view}
    stages = mtp.reference(contiguous, params)
    pool = kv_cache.to(F64, copy=True)
    pages, rows = new_token_slots(block_table, cache_lens, inputs["q_nope"].shape[1])
    pool[pages, rows] = torch.cat((stages["c_kv"], stages["k_pe_roped"]), dim=-1)
    stages["kv_cache"] = pool
    return stages
