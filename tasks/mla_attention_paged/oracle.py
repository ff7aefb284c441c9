"""Validation of the paged reference: the contiguous reference (itself validated against transformers'
DeepseekV3Attention, tasks/mla_attention/oracle.py) on the same cache after un-paging.

On shuffled, reversed and new-page layouts of contiguous inputs (unowned pages NaN): every stage of the
paged reference must equal the contiguous reference's bitwise (the same float64 math on the same rows), the
paged kv_cache stage must be the contiguous one paged again, and a layout that names a NaN page for a row
inside a request's length must poison that request's output, and only that request's.
"""
from __future__ import annotations

import torch

from tasks.mla_attention import oracle as contiguous_oracle
from tasks.mla_attention import reference as contiguous
from tasks.mla_attention.inputs import make_inputs
from tasks.mla_attention_paged import reference as paged
from tasks.mla_attention_paged.layout import PAGE, page_inputs, shuffled_tables, unowned_pages

ORACLE_NAME = "tasks.mla_attention.reference after un-paging (validated against transformers.DeepseekV3Attention)"
TOLERANCE = contiguous_oracle.TOLERANCE

# (cache_lens, max_blocks, NB, reverse): shuffled ragged; request 0 reversed; new tokens starting pages.
LAYOUTS: dict[str, tuple[list[int], int, int, tuple[int, ...]]] = {
    "shuffled": ([150, 70, 20], 3, 12, ()),
    "reversed": ([170, 100, 191], 3, 10, (0, 2)),
    "new_page": ([64, 128, 0], 3, 9, ()),
}


def _stages_equal(paged_stages: dict, contiguous_stages: dict, tables: list[list[int]], lens: list[int],
                  num_pages: int) -> dict[str, bool]:
    equal = {name: torch.equal(paged_stages[name].nan_to_num(), contiguous_stages[name].nan_to_num())
             for name in contiguous.STAGES if name != "kv_cache"}
    repaged = page_inputs({"kv_cache": contiguous_stages["kv_cache"], "cache_lens": torch.tensor(lens)}, tables,
                          num_pages)["kv_cache"]
    owned = torch.ones(num_pages, dtype=torch.bool)
    owned[unowned_pages(tables, lens, num_pages)] = False
    equal["kv_cache"] = torch.equal(paged_stages["kv_cache"][owned], repaged[owned]) and bool(
        paged_stages["kv_cache"][~owned].isnan().all())
    return equal


def _misread_poisons(inputs: dict[str, torch.Tensor], tables: list[list[int]], lens: list[int], num_pages: int,
                     params: dict) -> bool:
    """Request 0's first page swapped for an unowned (NaN) page: its output turns NaN, the others' do not."""
    spare = unowned_pages(tables, lens, num_pages)[-1]
    block_table = inputs["block_table"].clone()
    block_table[0, 0] = spare
    out = paged.reference({**inputs, "block_table": block_table}, params)["o_heads"]
    return bool(out[0].isnan().all() and out[1:].isfinite().all())


def check_layouts(seed: int = 0, params: dict = paged.DEEPSEEK_V3_PARAMS) -> dict[str, dict]:
    """Per layout: stage -> whether the paged reference equals the contiguous one, and `misread_poisons`."""
    results = {}
    for name, (lens, max_blocks, num_pages, reverse) in LAYOUTS.items():
        contiguous_inputs = make_inputs(len(lens), 3, max_blocks * PAGE, seed=seed, cache_lens=lens)
        tables = shuffled_tables(lens, max_blocks, num_pages, seed, reverse)
        inputs = page_inputs(contiguous_inputs, tables, num_pages)
        expected = contiguous.reference(contiguous_inputs, params)
        results[name] = {**_stages_equal(paged.reference(inputs, params), expected, tables, lens, num_pages),
                         "misread_poisons": _misread_poisons(inputs, tables, lens, num_pages, params)}
    return results


def validate_against_oracle(seed: int = 0, params: dict = paged.DEEPSEEK_V3_PARAMS) -> dict:
    """The contiguous reference against transformers, then the paged reference against the contiguous one."""
    contiguous_result = contiguous_oracle.validate_against_oracle(seed=seed, params=params)
    layouts = check_layouts(seed, params)
    passed = contiguous_result["passed"] and all(all(checks.values()) for checks in layouts.values())
    return {
        "oracle": ORACLE_NAME,
        "passed": bool(passed),
        "contiguous_oracle": contiguous_result,
        "layouts": layouts,
        "tolerance": TOLERANCE,
    }
