"""The paged multi-token contract: its reference is the multi-token reference on each request's gathered pages, its
layout gives each request the pages of all S new rows (a page boundary between two new tokens included) and poisons
every other page, and its honest implementations pass (the Triton one through a whole CPU check, where the contiguous
multi-token kernel, blind to the block table, is rejected)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from task_checks import stages_missed

from ferret.contract.load import load_contract
from ferret.gate.inputs import draw_inputs
from ferret.gate.judge import check
from tasks.mla_attention_mtp import reference as contiguous
from tasks.mla_attention_mtp_paged import baseline
from tasks.mla_attention_mtp_paged.layout import PAGE, gather_pages, new_token_slots
from tasks.mla_attention_mtp_paged.reference import reference

REPO = Path(__file__).resolve().parents[3]
CONTRACT = REPO / "contracts" / "mla_attention_mtp_paged.yaml"
HONEST = REPO / "tasks" / "mla_attention_mtp_paged" / "candidates" / "triton_mla_mtp_paged.py"
BLIND = REPO / "tasks" / "mla_attention_mtp" / "candidates" / "triton_mla_mtp.py"


def _case(name: str, profile: str = "cpu"):
    contract = load_contract(CONTRACT)
    case = next(c for c in contract.cases_for(profile) if c.name == name)  # type: ignore[arg-type]
    return contract, case, draw_inputs(contract, case, "bfloat16")


def test_the_reference_is_the_multi_token_reference_on_the_gathered_pages():
    contract, _, inputs = _case("typical")
    paged = reference(inputs, dict(contract.params))
    view = {k: v for k, v in inputs.items() if k != "block_table"}
    view["kv_cache"] = gather_pages(inputs["kv_cache"], inputs["block_table"], inputs["block_table"].shape[1] * PAGE)
    theirs = contiguous.reference(view, dict(contract.params))
    for stage in ("c_kv", "q_pe_roped", "k_pe_roped", "q_absorbed", "scores", "probs", "o_latent", "o_heads"):
        assert torch.equal(paged[stage], theirs[stage]), stage
    pages, rows = new_token_slots(inputs["block_table"], inputs["cache_lens"], 2)
    ends = inputs["cache_lens"].long()[:, None] + torch.arange(2)[None, :]
    assert torch.equal(paged["kv_cache"][pages, rows], theirs["kv_cache"][torch.arange(3)[:, None], ends])
    kept = torch.ones(paged["kv_cache"].shape[:2], dtype=torch.bool)
    kept[pages, rows] = False  # every other entry the input's (NaN where the input has NaN)
    assert torch.equal(paged["kv_cache"][kept].nan_to_num(7.0), inputs["kv_cache"].double()[kept].nan_to_num(7.0))


def test_each_request_owns_the_pages_of_all_its_new_rows_and_nothing_else_is_finite():
    _, _, inputs = _case("typical")  # request 0's new rows 63 and 64: the second starts a page of its own
    table, lens = inputs["block_table"], inputs["cache_lens"].tolist()
    assert lens[0] == 63
    owned = {int(p) for b, n in enumerate(lens) for p in table[b, : (n + 1) // PAGE + 1]}
    pages, _ = new_token_slots(table, inputs["cache_lens"], 2)
    assert pages[0, 0] != pages[0, 1] and {int(p) for p in pages.flatten()} <= owned and 0 not in owned
    pool = inputs["kv_cache"].float()
    for page in range(pool.shape[0]):
        assert bool(pool[page].isnan().all()) == (page not in owned), page


@pytest.mark.parametrize("case_name", [c.name for c in load_contract(CONTRACT).cases.cpu])
def test_the_baseline_passes_every_cpu_case(case_name):
    contract, case, _ = _case(case_name)
    assert stages_missed(contract, baseline.run, case, reference) == []


@pytest.fixture(scope="module")
def gates(tmp_path_factory) -> Path:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return tmp_path_factory.mktemp("mtp-paged-gates")


def test_the_honest_paged_kernel_passes_a_whole_check(gates):
    verdict, _ = check(CONTRACT, HONEST, gates, profile="cpu", measure_speed=False, run_stress=False)
    assert verdict.passed and verdict.detections == [], verdict.first_failing_stage


def test_the_contiguous_kernel_blind_to_the_block_table_is_rejected(gates):
    verdict, _ = check(CONTRACT, BLIND, gates, profile="cpu", measure_speed=False, run_stress=False)
    assert not verdict.passed


@pytest.mark.gpu
@pytest.mark.parametrize("case_name", ["tp1_b64_l4096", "tp8_b32_l8192", "page_crossing_tp1"])
def test_the_honest_paged_kernel_passes_the_gpu_cases(case_name):
    import importlib

    contract = load_contract(CONTRACT)
    case = next(c for c in contract.cases.gpu if c.name == case_name)
    run = importlib.import_module("tasks.mla_attention_mtp_paged.candidates.triton_mla_mtp_paged").run
    assert stages_missed(contract, run, case, reference, "cuda") == []
