"""contracts/mla_attention_paged.yaml: its cases are the layouts tasks/mla_attention_paged/cases.py writes,
and the inputs the judge draws for them are paged as vLLM, SGLang and FlashMLA page them: shuffled,
non-contiguous pages, unowned pages non-finite, a request with its pages in reverse order, one whose new
token starts a new page; the roofline counts the rows requests own, not the pool."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ferret.contract.roofline import count_roofline
from tasks.mla_attention_paged.cases import LAYOUTS, cases_yaml, layout_of
from tasks.mla_attention_paged.layout import PAGE, owned_pages, unowned_pages

CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_paged.yaml"


@pytest.fixture
def contract(paged_contract):
    return paged_contract


@pytest.fixture
def drawn(paged_drawn):
    return paged_drawn


def test_the_contract_holds_the_written_cases():
    text = CONTRACT.read_text()
    assert "\ncases:\n  cpu:\n" + cases_yaml("cpu") + "\n  gpu:\n" + cases_yaml("gpu") + "\nbackend:" in text


def _check_layout(lens: list[int], tables: list[list[int]], num_pages: int) -> None:
    owned = [table[:owned_pages(n)] for table, n in zip(tables, lens, strict=True)]
    flat = [page for pages in owned for page in pages]
    assert len(flat) == len(set(flat)) and 0 not in flat, "a page owned twice, or the null page owned"
    assert all(page < num_pages for page in flat)
    assert flat != sorted(flat), "pages in pool order: not shuffled"
    assert unowned_pages(tables, lens, num_pages)[0] == 0


@pytest.mark.parametrize("name", LAYOUTS)
def test_every_case_layout_is_shuffled_and_disjoint(name):
    dims, lens, tables, num_pages = layout_of(name)
    _check_layout(lens, tables, num_pages)
    assert dims["L"] % PAGE == 0 and len(tables[0]) == dims["L"] // PAGE and num_pages == dims["NB"]
    if LAYOUTS[name][0] == "gpu":  # the GPU cases have a reversed request and a new-page request too
        assert tables[0][:owned_pages(lens[0])] == sorted(tables[0][:owned_pages(lens[0])], reverse=True)
        assert lens[1] % PAGE == 0 and lens[1] > 0


def test_drawn_cpu_inputs_are_paged(contract, drawn):
    assert [c.name for c in contract.cases_for("cpu")] == ["typical", "reverse_pages", "new_page"]
    assert [c.name for c in contract.cases_for("gpu")] == ["tp1_b64_l4096", "tp8_b32_l8192"]
    for name, inputs in drawn.items():
        lens, tables = inputs["cache_lens"].tolist(), inputs["block_table"].tolist()
        assert inputs["block_table"].dtype == torch.int32 and inputs["kv_cache"].shape[1:] == (PAGE, 576)
        assert (lens, tables) == layout_of(name)[1:3]
        _check_layout(lens, tables, inputs["kv_cache"].shape[0])
        unowned = unowned_pages(tables, lens, inputs["kv_cache"].shape[0])
        pool = inputs["kv_cache"].float()
        assert torch.isinf(pool[unowned]).all(), name
        owned = [page for page in range(pool.shape[0]) if page not in unowned]
        assert torch.isfinite(pool[owned]).all(), name


def test_the_reverse_and_new_page_cases(drawn):
    table, lens = drawn["reverse_pages"]["block_table"].tolist(), drawn["reverse_pages"]["cache_lens"].tolist()
    pages = table[0][:owned_pages(lens[0])]
    assert len(pages) >= 3 and pages == sorted(pages, reverse=True)
    lens = drawn["new_page"]["cache_lens"]
    assert ((lens % PAGE == 0) & (lens > 0)).any()


def test_roofline_counts_owned_rows_not_the_pool(contract, drawn):
    inputs = drawn["typical"]
    count = count_roofline(contract, contract.cases_for("cpu")[0].dims, inputs, "bfloat16")
    lens = inputs["cache_lens"].long()
    cache_bytes = int((lens + 1).sum()) * 1152 + int((lens // PAGE + 1).sum()) * 4
    others = sum(t.numel() * t.element_size() for n, t in inputs.items() if n not in ("kv_cache", "block_table"))
    assert count.bytes == cache_bytes + others + 3 * 4 * 128 * 2
    assert count.flops == 2 * 4 * int((lens + 1).sum()) * 1088 + 4 * 3 * 4 * 128 * 512
