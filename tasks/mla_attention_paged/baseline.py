"""Eager PyTorch MLA decode step over a paged KV cache: the contiguous baseline on a gathered view.

As an eager serving path without a paged kernel does it: gather each request's logical rows (every
page its table holds) out of its pages into a contiguous [B, T, 576] view (one indexing op), run the contiguous
eager step on it (tasks/mla_attention/baseline.py: norm, rope, append, bmm, fp32 softmax, bmm), then write
each request's new row back into its page. Rows past a request's length are zeroed in the view.
"""
from __future__ import annotations

import torch

from tasks.mla_attention import baseline as contiguous
from tasks.mla_attention_paged.layout import PAGE, gather_pages, new_token_slots


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    kv_cache, block_table, cache_lens = inputs["kv_cache"], inputs["block_table"], inputs["cache_lens"]
    # Every page the table holds, each request masked to its own length: no host synchronization (CUDA-graph
    # capturable), as the contiguous baseline's own.
    visible_len = block_table.shape[1] * PAGE
    view = gather_pages(kv_cache, block_table, visible_len)
    # Rows past a request's length come from pages it does not own (NaN there) or the stale tail of its
    # last page: zeroed, since the contiguous step multiplies them by zero probabilities.
    hidden = torch.arange(visible_len, device=view.device)[None, :] > cache_lens.long()[:, None]
    view = view.masked_fill(hidden[..., None], 0.0)
    view_inputs = {**{k: v for k, v in inputs.items() if k != "block_table"}, "kv_cache": view}
    view_trace = {} if trace is not None else None
    contiguous.run(view_inputs, outputs, params, trace=view_trace)
    pages, rows = new_token_slots(block_table, cache_lens)
    batch = torch.arange(view.shape[0], device=view.device)
    kv_cache[pages, rows] = view[batch, cache_lens.long()]
    if trace is not None:
        assert view_trace is not None  # made beside trace above
        capacity = block_table.shape[1] * PAGE
        scores, probs = view_trace["scores"], view_trace["probs"]
        padded_scores = scores.new_full((*scores.shape[:2], capacity), float("-inf"))
        padded_scores[..., :visible_len] = scores
        padded_probs = probs.new_zeros((*probs.shape[:2], capacity))
        padded_probs[..., :visible_len] = probs
        trace.update({**view_trace, "kv_cache": kv_cache.clone(), "scores": padded_scores, "probs": padded_probs})
