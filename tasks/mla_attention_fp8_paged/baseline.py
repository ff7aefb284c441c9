"""Eager MLA decode step over a paged FP8 cache: each request's pages gathered into contiguous copies, the FP8
baseline (tasks/mla_attention_fp8/baseline.py) on them, the new token's row written back into its page. Rows past a
request's length are zeroed in the copies, as the paged bf16 baseline's (tasks/mla_attention_paged/baseline.py)."""
from __future__ import annotations

import torch

from tasks.mla_attention_fp8 import baseline as contiguous
from tasks.mla_attention_fp8_paged.layout import PAGE, gather, slots

POOLS = ("kv_latent", "kv_scale", "kv_rope")


def run(inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor], params: dict,
        trace: dict | None = None) -> None:
    block_table, lens = inputs["block_table"], inputs["cache_lens"]
    view = {k: v for k, v in inputs.items() if k != "block_table"}
    # Rows past a request's length come from pages it does not own (NaN there) or the stale tail of its last page:
    # zeroed (a zero scale, zero codes), since the contiguous step multiplies them by zero probabilities.
    hidden = torch.arange(block_table.shape[1] * PAGE, device=lens.device)[None, :] > lens.long()[:, None]
    for name in POOLS:
        rows = gather(inputs[name], block_table)
        bits = rows.view(torch.uint8) if rows.element_size() == 1 else rows  # torch has no masked_fill for float8
        view[name] = bits.masked_fill(hidden[..., None], 0).view(rows.dtype)
    contiguous.run(view, outputs, params, trace)
    pages, rows = slots(block_table, lens)
    batch = torch.arange(lens.numel(), device=lens.device)
    for name in POOLS:
        inputs[name][pages, rows] = view[name][batch, lens.long()]
        if trace is not None:
            trace[name] = inputs[name].clone()
