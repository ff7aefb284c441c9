"""Eager PyTorch MLA step with s_q query tokens per request over a paged KV cache: the multi-token baseline on a
gathered view (tasks/mla_attention_mtp/baseline.py), as tasks/mla_attention_paged/baseline.py does for one token.

Every page the table holds is gathered into a contiguous [B, 64 * P, 576] view (one indexing op), rows past the last
new token's zeroed (unowned pages hold NaN), the multi-token step runs on it, and the S new rows are written back into
their pages. No host synchronization.
"""

from __future__ import annotations

import torch

from tasks.mla_attention_mtp import baseline as contiguous
from tasks.mla_attention_mtp_paged.layout import PAGE, gather_pages, new_token_slots


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict, trace: dict | None = None) -> None:
    kv_cache, block_table, cache_lens = inputs["kv_cache"], inputs["block_table"], inputs["cache_lens"]
    s_q = inputs["q_nope"].shape[1]
    view = gather_pages(kv_cache, block_table, block_table.shape[1] * PAGE)
    hidden = torch.arange(view.shape[1], device=view.device)[None, :] > cache_lens.long()[:, None] + (s_q - 1)
    view = view.masked_fill(hidden[..., None], 0.0)
    view_inputs = {**{k: v for k, v in inputs.items() if k != "block_table"}, "kv_cache": view}
    contiguous.run(view_inputs, outputs, params, trace=trace)
    pages, rows = new_token_slots(block_table, cache_lens, s_q)
    ends = cache_lens.long()[:, None] + torch.arange(s_q, device=view.device)[None, :]
    kv_cache[pages, rows] = view[torch.arange(view.shape[0], device=view.device)[:, None], ends]
    if trace is not None:
        trace["kv_cache"] = kv_cache.clone()
