"""The paged layout of the multi-token step: tasks/mla_attention_paged/layout.py's, each request owning the pages of
its S new rows (logical rows cache_lens[b] .. cache_lens[b] + S - 1), not only the first's.
"""

from __future__ import annotations

import torch

from tasks.mla_attention_paged import layout as paged
from tasks.mla_attention_paged.layout import PAGE, gather_pages


def new_token_slots(block_table: torch.Tensor, cache_lens: torch.Tensor, s_q: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(page, row) [B, S] of each request's new tokens: logical row cache_lens[b] + i."""
    ends = cache_lens.long()[:, None] + torch.arange(s_q, device=cache_lens.device)[None, :]
    return block_table.long().gather(1, ends // PAGE), ends % PAGE


def arrange(inputs: dict[str, torch.Tensor], dims: dict[str, int], generator: torch.Generator) -> None:
    """The contract's layout, in place: the paged layout's, as if each request's length were that of its last new
    token's row (cache_lens + S - 1), so that it owns the pages of all S new rows."""
    last_row = {**inputs, "cache_lens": inputs["cache_lens"] + (dims["S"] - 1)}
    paged.arrange(last_row, dims, generator)


__all__ = ["PAGE", "arrange", "gather_pages", "new_token_slots"]
