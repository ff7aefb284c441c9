"""The paged reference: equal to the contiguous reference (validated against transformers) after un-paging,
on shuffled, reversed and new-page layouts; a page read outside a request's pages poisons its output."""

from __future__ import annotations

import pytest
import torch

from tasks.mla_attention_paged import oracle
from tasks.mla_attention_paged import reference as paged
from tasks.mla_attention_paged.layout import PAGE, make_paged_inputs, new_token_slots, owned_pages

PARAMS = paged.DEEPSEEK_V3_PARAMS


def test_reference_agrees_with_oracle_after_unpaging():
    result = oracle.validate_against_oracle()
    contiguous = result["contiguous_oracle"]
    assert contiguous["passed"] and contiguous["oracle"] == "transformers.DeepseekV3Attention", contiguous
    assert set(result["layouts"]) == {"shuffled", "reversed", "new_page"}
    for name, checks in result["layouts"].items():
        assert all(checks.values()), (name, checks)
    assert result["passed"]


def test_oracle_catches_a_reference_that_reads_pages_contiguously(monkeypatch):
    """A paged reference that ignores the block table (request b's page j read at b * max_blocks + j) fails."""

    def contiguous_gather(kv_cache, block_table, rows):
        t = torch.arange(rows)
        pages = torch.arange(block_table.shape[0])[:, None] * block_table.shape[1] + t[None, :] // PAGE
        return kv_cache[pages % kv_cache.shape[0], t % PAGE]

    monkeypatch.setattr(paged, "gather_pages", contiguous_gather)
    layouts = oracle.check_layouts()
    assert not any(checks["o_heads"] for checks in layouts.values()), layouts


def test_reference_leaves_inputs_alone_and_appends_in_the_new_tokens_page():
    lens = [64, 130, 0]  # request 0's new token starts its second page
    inputs = make_paged_inputs(3, 2, 3, 10, lens, seed=4, reverse=(1,))
    before = {name: t.clone() for name, t in inputs.items()}
    stages = paged.reference(inputs, PARAMS)
    for name, tensor in inputs.items():
        assert torch.equal(tensor.nan_to_num(), before[name].nan_to_num()), name
    pages, rows = new_token_slots(inputs["block_table"], inputs["cache_lens"])
    assert pages.tolist()[0] == int(inputs["block_table"][0, 1]) and rows.tolist() == [0, 130 % PAGE, 0]
    changed = torch.zeros(inputs["kv_cache"].shape[:2], dtype=torch.bool)
    changed[pages, rows] = True
    pool = inputs["kv_cache"].double()
    assert torch.equal(stages["kv_cache"][~changed].nan_to_num(), pool[~changed].nan_to_num())
    expected_rows = torch.cat((stages["c_kv"], stages["k_pe_roped"]), dim=-1)
    assert torch.equal(stages["kv_cache"][pages, rows], expected_rows)
    assert stages["o_heads"].isfinite().all()
    # Request 1 owns three pages in descending order; the NaN null page pads requests 0 and 2.
    table = inputs["block_table"].tolist()
    assert table[1] == sorted(table[1], reverse=True) and table[2][owned_pages(0) :] == [0, 0]


@pytest.mark.parametrize("row", [0, 63, 129])
def test_a_nan_row_inside_the_length_poisons_only_its_request(row):
    inputs = make_paged_inputs(2, 2, 3, 8, [130, 40], seed=5)
    page = int(inputs["block_table"][0, row // PAGE])
    inputs["kv_cache"][page, row % PAGE] = float("nan")
    out = paged.reference(inputs, PARAMS)["o_heads"]
    assert out[0].isnan().all() and out[1].isfinite().all()


def test_the_scores_error_scale_is_finite_over_owned_pages_and_zero_past_each_length():
    """The paged contract judges its scores against their error scale (contracts/mla_attention_paged.yaml): from the
    gathered pages, so the NaN of pages no request owns never reaches it."""
    from pathlib import Path

    from ferret.contract.task import Task

    contract = Task.load(Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_paged.yaml").contract
    assert contract.stage("scores").error_scale == "scores_error_scale"
    lens = [64, 130, 0]
    inputs = make_paged_inputs(3, 2, 3, 10, lens, seed=4, reverse=(1,))
    scale = paged.reference(inputs, PARAMS)["scores_error_scale"]
    assert scale.shape == (3, 2, 3 * PAGE) and bool(torch.isfinite(scale).all())
    visible = torch.arange(3 * PAGE)[None, :] <= torch.tensor(lens)[:, None]
    assert bool((scale[~visible[:, None, :].expand_as(scale)] == 0).all())
    assert bool((scale[visible[:, None, :].expand_as(scale)] > 0).all())
