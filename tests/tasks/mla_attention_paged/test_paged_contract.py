"""contracts/mla_attention_paged.yaml: the inputs the judge draws, for its frozen cases and for fresh cases, are
paged as vLLM, SGLang and FlashMLA page them (the contract's layout, tasks/mla_attention_paged/layout.py:arrange):
shuffled, non-contiguous pages, every unowned page NaN, request 0's pages in descending order, a case whose new
token starts a page; a layout entry that does not resolve is a contract error; the roofline counts the rows
requests own, not the pool."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from ferret.contract.load import load_contract
from ferret.contract.roofline import count_roofline
from ferret.errors import ContractError
from ferret.gate.fresh import plan_fresh_cases
from ferret.gate.inputs import draw_inputs
from tasks.mla_attention_paged.layout import PAGE, owned_pages, unowned_pages

CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_paged.yaml"


def _check_paged(inputs: dict[str, torch.Tensor]) -> None:
    lens, tables = inputs["cache_lens"].tolist(), inputs["block_table"].tolist()
    num_pages = inputs["kv_cache"].shape[0]
    owned = [table[: owned_pages(n)] for table, n in zip(tables, lens, strict=True)]
    flat = [page for pages in owned for page in pages]
    assert len(flat) == len(set(flat)) and 0 not in flat, "a page owned twice, or the null page owned"
    assert all(0 < page < num_pages for page in flat)
    assert all(page == 0 for table, n in zip(tables, lens, strict=True) for page in table[owned_pages(n) :])
    assert owned[0] == sorted(owned[0], reverse=True), "request 0's pages are in descending order"
    pool = inputs["kv_cache"].float()
    unowned = unowned_pages(tables, lens, num_pages)
    assert unowned[0] == 0 and torch.isnan(pool[unowned]).all()
    assert torch.isfinite(pool[flat]).all()


def test_frozen_cases_are_paged(paged_contract, paged_drawn):
    assert [c.name for c in paged_contract.cases_for("cpu")] == ["typical", "reverse_pages", "new_page", "decode_from_start"]
    assert [c.name for c in paged_contract.cases_for("gpu")] == ["tp1_b64_l4096", "tp8_b32_l8192", "decode_from_start_tp1"]
    for inputs in paged_drawn.values():
        assert inputs["block_table"].dtype == torch.int32 and inputs["kv_cache"].shape[1:] == (PAGE, 576)
        _check_paged(inputs)
    typical = paged_drawn["typical"]["block_table"].tolist()
    assert [page for table in typical for page in table if page] != sorted(p for t in typical for p in t if p)


def test_the_reverse_and_new_page_cases(paged_drawn):
    table, lens = paged_drawn["reverse_pages"]["block_table"].tolist(), paged_drawn["reverse_pages"]["cache_lens"]
    assert owned_pages(int(lens[0])) == 3 and table[0] == sorted(table[0], reverse=True)
    lens = paged_drawn["new_page"]["cache_lens"]
    assert ((lens % PAGE == 0) & (lens > 0)).any()


def test_a_case_decodes_from_a_prompts_start(paged_drawn):
    """A model decoding a short prompt puts its new token at position cache_lens[b], from 0: the positions of
    every other case are drawn past 2048, apart from the lengths."""
    inputs = paged_drawn["decode_from_start"]
    assert inputs["positions"].tolist() == inputs["cache_lens"].tolist() == [0, 9, 2 * PAGE - 1]


def test_fresh_cases_are_paged_and_cover_the_new_page_boundary(paged_contract):
    strata = set()
    for seed in range(20):
        for case, case_strata in plan_fresh_cases(paged_contract, "cpu", random.Random(seed)):
            _check_paged(draw_inputs(paged_contract, case, "bfloat16"))
            strata |= set(case_strata)
    assert {"new_page:multiple", "new_page:multiple-1", "new_page:multiple+1", "pages:below", "pages:above"} <= strata


def test_the_same_case_draws_the_same_layout(paged_contract):
    case = paged_contract.cases_for("cpu")[0]
    first, again = draw_inputs(paged_contract, case, "bfloat16"), draw_inputs(paged_contract, case, "bfloat16")
    assert torch.equal(first["block_table"], again["block_table"])
    other = draw_inputs(paged_contract, case.model_copy(update={"seed": case.seed + 1}), "bfloat16")
    assert not torch.equal(first["block_table"], other["block_table"])


def test_a_layout_entry_that_does_not_resolve_is_a_contract_error(tmp_path):
    text = CONTRACT.read_text().replace(
        "entry: tasks.mla_attention_paged.layout:arrange", "entry: tasks.mla_attention_paged.layout:no_such_function"
    )
    broken = tmp_path / "contracts" / "mla_attention_paged.yaml"
    broken.parent.mkdir()
    broken.write_text(text)
    (broken.parent / "mla_attention_paged.tolerances.yaml").write_text(
        CONTRACT.with_name("mla_attention_paged.tolerances.yaml").read_text()
    )
    (tmp_path / "tasks").symlink_to(CONTRACT.parents[1] / "tasks")
    with pytest.raises(ContractError, match=r"mla_attention_paged.yaml:\d+: layout.entry: .*no_such_function"):
        load_contract(broken)


def test_roofline_counts_owned_rows_not_the_pool(paged_contract, paged_drawn):
    inputs = paged_drawn["typical"]
    count = count_roofline(paged_contract, paged_contract.cases_for("cpu")[0].dims, inputs, "bfloat16")
    # literal: cache_lens 150, 70, 20 -> 243 rows of 1152 bytes and 3 + 2 + 1 block-table entries of 4 bytes
    others = sum(t.numel() * t.element_size() for n, t in inputs.items() if n not in ("kv_cache", "block_table"))
    assert count.bytes == 243 * 1152 + 6 * 4 + others + 3 * 4 * 128 * 2
    assert count.flops == 2 * 4 * 243 * 1088 + 4 * 3 * 4 * 128 * 512


def test_the_tolerances_are_never_looser_than_the_contiguous_table():
    """The committed table is what derive_tolerances leaves it: every bound at most the contiguous contract's."""
    import yaml

    from tasks.mla_attention_paged.derive_tolerances import CONTIGUOUS, PAGED, tightened

    paged = yaml.safe_load(PAGED.read_text())["by_dtype"]["bfloat16"]
    contiguous = yaml.safe_load(CONTIGUOUS.read_text())["by_dtype"]["bfloat16"]
    assert tightened(paged, contiguous) == paged
    loose = {"o_heads": {"rel_l2": 1.0, "max_abs_rel_peak": 1.0, "cosine_min": 0.5}, "scores": {"rel_l2": 1e-9}}
    tight = tightened(loose, contiguous)
    assert tight["o_heads"]["rel_l2"] == contiguous["o_heads"]["rel_l2"] and tight["o_heads"]["cosine_min"] > 0.99
    assert tight["scores"]["rel_l2"] == 1e-9 and tight["scores"]["peak_floor"] == contiguous["scores"]["peak_floor"]
    # a row bound: held to the contiguous one where the paged row has one, never added where it has none
    rows = tightened({"o_heads": {"max_row_rel": 1.0}, "probs": {"rel_l2": 1.0}}, contiguous)
    assert rows["o_heads"]["max_row_rel"] == contiguous["o_heads"]["max_row_rel"] and "max_row_rel" not in rows["probs"]
