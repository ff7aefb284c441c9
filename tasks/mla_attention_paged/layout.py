"""The paged KV cache layout of the MLA decode step, as vLLM, SGLang and FlashMLA store it.

The cache is a pool of pages, kv_cache [NB, PAGE, 576] with PAGE = 64 rows of 512 latent | 64 roped key.
block_table [B, L // PAGE] int32 names each request's pages in order: logical cache row t of request b
(t = 0 .. L - 1, L the per-request capacity) lives at kv_cache[block_table[b, t // PAGE], t % PAGE].
Request b owns its first cache_lens[b] // PAGE + 1 entries (the page holding row cache_lens[b], where
the new token is appended, included); the entries past them are padding and name page 0, the null page
(vLLM's null block). Pages no request owns, the null page included, hold no finite value, so that a read
outside a request's pages shows in its output.

The contract's inputs are drawn one by one from declarative distributions, which cannot draw a page table:
`arrange` is contracts/mla_attention_paged.yaml's `layout`, called by the judge on every drawn case (frozen and
fresh) after its edits. From the drawn cache_lens it writes the block table (shuffled pages, request 0's in
descending order) and fills every page no request owns with NaN.
"""
from __future__ import annotations

import torch

from tasks.mla_attention.inputs import make_inputs

PAGE = 64
NULL_PAGE = 0


def owned_pages(cache_len: int) -> int:
    """Pages a request with cache_len past tokens holds: the new token's row cache_len included."""
    return cache_len // PAGE + 1


def gather_pages(kv_cache: torch.Tensor, block_table: torch.Tensor, rows: int) -> torch.Tensor:
    """The contiguous view [B, rows, 576] of each request's first `rows` logical cache rows (a copy)."""
    t = torch.arange(rows, device=kv_cache.device)
    pages = block_table[:, t // PAGE].long()  # [B, rows]
    return kv_cache[pages, t % PAGE]


def new_token_slots(block_table: torch.Tensor, cache_lens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(page, row) of each request's new token: block_table[b, cache_lens[b] // PAGE], cache_lens[b] % PAGE."""
    lens = cache_lens.long()
    batch = torch.arange(block_table.shape[0], device=block_table.device)
    return block_table[batch, lens // PAGE].long(), lens % PAGE


def shuffled_tables(cache_lens: list[int], max_blocks: int, num_pages: int, seed: int,
                    reverse: tuple[int, ...] = ()) -> list[list[int]]:
    """Each request's owned pages, drawn without replacement from pages 1 .. NB-1 in a shuffled order (the
    null page 0 is never owned); the requests in `reverse` get theirs in descending order. Padding: page 0."""
    need = [owned_pages(n) for n in cache_lens]
    if max(need) > max_blocks or sum(need) > num_pages - 1:
        raise ValueError(f"{need} pages do not fit in {max_blocks} per request, {num_pages - 1} in the pool")
    generator = torch.Generator().manual_seed(seed)
    pool = (torch.randperm(num_pages - 1, generator=generator) + 1).tolist()
    tables = []
    for b, count in enumerate(need):
        pages, pool = pool[:count], pool[count:]
        if b in reverse:
            pages = sorted(pages, reverse=True)
        tables.append(pages + [NULL_PAGE] * (max_blocks - count))
    return tables


def unowned_pages(tables: list[list[int]], cache_lens: list[int], num_pages: int) -> list[int]:
    owned = {page for table, n in zip(tables, cache_lens, strict=True) for page in table[:owned_pages(n)]}
    return [page for page in range(num_pages) if page not in owned]


def page_inputs(contiguous: dict[str, torch.Tensor], tables: list[list[int]], num_pages: int,
                poison: float = float("nan")) -> dict[str, torch.Tensor]:
    """The paged inputs holding the same cache as contiguous inputs (kv_cache [B, L, 576], L a multiple of
    PAGE): each request's rows copied into its pages, every unowned page filled with `poison`."""
    cache, lens = contiguous["kv_cache"], contiguous["cache_lens"]
    batch, capacity, width = cache.shape
    block_table = torch.tensor(tables, dtype=torch.int32)
    if capacity != block_table.shape[1] * PAGE:
        raise ValueError(f"capacity {capacity} is not {block_table.shape[1]} pages of {PAGE}")
    pool = torch.full((num_pages, PAGE, width), poison, dtype=cache.dtype)
    for b in range(batch):
        count = owned_pages(int(lens[b]))
        pool[block_table[b, :count].long()] = cache[b, :count * PAGE].view(count, PAGE, width)
    return {**{k: v for k, v in contiguous.items() if k != "kv_cache"}, "block_table": block_table, "kv_cache": pool}


def unpage_inputs(paged: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The contiguous task's inputs (kv_cache [B, L, 576]) holding the same cache as paged inputs."""
    capacity = paged["block_table"].shape[1] * PAGE
    view = gather_pages(paged["kv_cache"], paged["block_table"], capacity)
    return {**{k: v for k, v in paged.items() if k not in ("kv_cache", "block_table")}, "kv_cache": view}


def make_paged_inputs(batch: int, heads: int, max_blocks: int, num_pages: int, cache_lens: list[int],
                      seed: int = 0, reverse: tuple[int, ...] = (), positions: list[int] | None = None,
                      poison: float = float("nan")) -> dict[str, torch.Tensor]:
    """Inputs drawn as the contiguous task draws them (tasks/mla_attention/inputs.py), cache paged into a
    shuffled pool whose unowned pages hold `poison`."""
    contiguous = make_inputs(batch, heads, max_blocks * PAGE, seed=seed, cache_lens=cache_lens, positions=positions)
    tables = shuffled_tables(cache_lens, max_blocks, num_pages, seed, reverse)
    return page_inputs(contiguous, tables, num_pages, poison)


def arrange(inputs: dict[str, torch.Tensor], dims: dict[str, int], generator: torch.Generator) -> None:
    """The contract's layout, in place: each request's owned pages drawn without replacement from pages
    1 .. NB-1 in shuffled order (request 0's in descending order: a kernel that assumes ascending pages shows),
    the padding entries the null page 0, and every page no request owns, the null page included, NaN."""
    lens = [int(n) for n in inputs["cache_lens"].tolist()]
    block_table, kv_cache = inputs["block_table"], inputs["kv_cache"]
    batch, max_blocks = block_table.shape
    num_pages = kv_cache.shape[0]
    need = [owned_pages(n) for n in lens]
    if max(need) > max_blocks or sum(need) > num_pages - 1:
        raise ValueError(f"cache_lens {lens} need {need} pages: more than {max_blocks} per request or "
                         f"{num_pages - 1} in the pool (dims {dims})")
    pool = (torch.randperm(num_pages - 1, generator=generator) + 1).tolist()
    tables = []
    for b, count in enumerate(need):
        pages, pool = pool[:count], pool[count:]
        tables.append((sorted(pages, reverse=True) if b == 0 else pages) + [NULL_PAGE] * (max_blocks - count))
    block_table.copy_(torch.tensor(tables, dtype=block_table.dtype))
    kv_cache[unowned_pages(tables, lens, num_pages)] = float("nan")
