"""The page layouts of contracts/mla_attention_paged.yaml's cases, and the YAML of their edits.

Contract inputs are drawn independently from declarative distributions, which cannot make a page table, so
each case spells its layout as edits (tasks/mla_attention_paged/layout.py says which). The edits are
written from the layouts below by `python -m tasks.mla_attention_paged.cases`, which prints the contract's
`cases:` section; tests/tasks/mla_attention_paged check that the contract holds exactly these edits.

A layout: cache_lens per request (a list, or ("draw", seed, {request: length}) for lengths drawn uniformly in
[0, L - 1], then the listed ones set), the pool size NB, the seed of the page shuffle, the requests whose pages are in
reverse (descending) order. Pools leave a few unowned pages besides the null page 0.
"""
from __future__ import annotations

import json

import torch
import yaml

from tasks.mla_attention_paged.layout import PAGE, case_edits, owned_pages, shuffled_tables

SPARE_PAGES = 7  # unowned pages besides the null page in the drawn-length (GPU) pools


def drawn_lens(batch: int, capacity: int, seed: int, overrides: dict[int, int]) -> list[int]:
    generator = torch.Generator().manual_seed(seed)
    lens = torch.randint(0, capacity, (batch,), generator=generator).tolist()
    for b, n in overrides.items():
        lens[b] = n
    return lens


# name -> (profile, kind, dims, seed, description, cache_lens, NB or None (owned + 1 + SPARE_PAGES), reverse)
LAYOUTS: dict[str, tuple] = {
    "typical": ("cpu", "correctness", {"B": 3, "H": 4, "L": 192}, 1,
                "shuffled pages, ragged lengths, three unowned pages besides the null page",
                [150, 70, 20], 12, ()),
    "reverse_pages": ("cpu", "edge", {"B": 2, "H": 2, "L": 192}, 2,
                      "request 0's three pages in reverse (descending) order in the pool",
                      [170, 100], 8, (0,)),
    "new_page": ("cpu", "edge", {"B": 3, "H": 2, "L": 128}, 3,
                 "request 0's new token starts a new page (cache_lens 64); request 1 fills its last page; "
                 "request 2 has an empty cache", [64, 127, 0], 8, ()),
    "tp1_b64_l4096": ("gpu", "correctness", {"B": 64, "H": 128, "L": 4096}, 12,
                      "ragged lengths; request 0's pages reversed, request 1's new token starts page 32",
                      ("draw", 12, {1: 32 * PAGE}), None, (0,)),
    "tp8_b32_l8192": ("gpu", "correctness", {"B": 32, "H": 16, "L": 8192}, 14,
                      "ragged lengths; request 0's pages reversed, request 1's new token starts page 100",
                      ("draw", 14, {1: 100 * PAGE}), None, (0,)),
}


def layout_of(name: str) -> tuple[dict[str, int], list[int], list[list[int]], int]:
    """(dims with NB, cache_lens, block tables, NB) of a case."""
    _, _, dims, seed, _, lens, num_pages, reverse = LAYOUTS[name]
    if isinstance(lens, tuple):
        lens = drawn_lens(dims["B"], dims["L"], lens[1], lens[2])
    if num_pages is None:
        num_pages = sum(owned_pages(n) for n in lens) + 1 + SPARE_PAGES
    tables = shuffled_tables(lens, dims["L"] // PAGE, num_pages, seed, reverse)
    return {**dims, "NB": num_pages}, lens, tables, num_pages


def case_entry(name: str) -> dict:
    profile, kind, _, seed, description, *_ = LAYOUTS[name]
    dims, lens, tables, num_pages = layout_of(name)
    return {"name": name, "kind": kind, "dims": dims, "seed": seed, "description": description,
            "edits": case_edits(lens, tables, num_pages)}


def _flow(mapping: dict) -> str:
    return yaml.safe_dump(mapping, default_flow_style=True, sort_keys=False, width=10**9).strip()


def cases_yaml(profile: str) -> str:
    """The profile's cases as YAML, one edit a line."""
    lines = []
    for name, layout in LAYOUTS.items():
        if layout[0] != profile:
            continue
        entry = case_entry(name)
        lines.append(f"    - name: {name}")
        lines += [f"      kind: {entry['kind']}", f"      dims: {_flow(entry['dims'])}", f"      seed: {entry['seed']}",
                  f"      description: {json.dumps(entry['description'])}", "      edits:"]
        lines += [f"        - {_flow(edit)}" for edit in entry["edits"]]
    return "\n".join(lines)


if __name__ == "__main__":
    print("  cpu:\n" + cases_yaml("cpu") + "\n  gpu:\n" + cases_yaml("gpu"))
