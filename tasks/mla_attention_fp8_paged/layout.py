"""The paged FP8 cache: three pools of 64-row pages (kv_latent e4m3 codes, kv_scale float32, kv_rope bf16) sharing
one block table, laid out as the paged bf16 task lays out its one pool (tasks/mla_attention_paged/layout.py)."""
from __future__ import annotations

import torch

from tasks.mla_attention_paged.layout import NULL_PAGE, PAGE, owned_pages, unowned_pages

POOLS = ("kv_latent", "kv_scale", "kv_rope")


def gather(pool: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """The contiguous view [B, P * PAGE, ...] of each request's logical rows (a copy)."""
    t = torch.arange(block_table.shape[1] * PAGE, device=pool.device)
    return pool[block_table[:, t // PAGE].long(), t % PAGE]


def slots(block_table: torch.Tensor, cache_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(page, row) of each request's new token."""
    lens = cache_lens.long()
    return block_table[torch.arange(block_table.shape[0], device=block_table.device), lens // PAGE].long(), lens % PAGE


def arrange(inputs: dict[str, torch.Tensor], dims: dict[str, int], generator: torch.Generator) -> None:
    """The contract's layout, in place: each request's owned pages drawn without replacement from pages 1 .. NB-1
    in shuffled order (request 0's descending), padding the null page 0, every page no request owns NaN in all
    three pools (e4m3's NaN code, a NaN scale, a NaN rope key)."""
    lens = [int(n) for n in inputs["cache_lens"].tolist()]
    block_table = inputs["block_table"]
    batch, max_blocks = block_table.shape
    num_pages = inputs["kv_latent"].shape[0]
    need = [owned_pages(n) for n in lens]
    if max(need) > max_blocks or sum(need) > num_pages - 1:
        raise ValueError(f"cache_lens {lens} need {need} pages: more than the table or the pool holds (dims {dims})")
    pool = (torch.randperm(num_pages - 1, generator=generator) + 1).tolist()
    tables = []
    for b, count in enumerate(need):
        pages, pool = pool[:count], pool[count:]
        tables.append((sorted(pages, reverse=True) if b == 0 else pages) + [NULL_PAGE] * (max_blocks - count))
    block_table.copy_(torch.tensor(tables, dtype=block_table.dtype))
    unowned = unowned_pages(tables, lens, num_pages)
    for name in POOLS:
        inputs[name][unowned] = float("nan")
