"""The paged FP8 contract: its reference is the FP8 reference on each request's gathered pages, its layout poisons every
page no request owns in all three pools, and its honest implementations pass (the Triton one through a whole CPU
check, where the contiguous FP8 kernel, blind to the block table, is rejected)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from task_checks import stages_missed

from ferret.contract.load import load_contract
from ferret.gate.inputs import draw_inputs
from ferret.gate.judge import check
from tasks.mla_attention_fp8 import reference as contiguous
from tasks.mla_attention_fp8_paged import baseline
from tasks.mla_attention_fp8_paged.layout import POOLS, gather, slots
from tasks.mla_attention_fp8_paged.reference import reference
from tasks.mla_attention_paged.layout import owned_pages

REPO = Path(__file__).resolve().parents[3]
CONTRACT = REPO / "contracts" / "mla_attention_fp8_paged.yaml"
HONEST = REPO / "tasks" / "mla_attention_fp8_paged" / "candidates" / "triton_mla_fp8_paged.py"
BLIND = REPO / "tasks" / "mla_attention_fp8" / "candidates" / "triton_mla_fp8.py"


def _case(name: str):
    contract = load_contract(CONTRACT)
    case = next(c for c in contract.cases.cpu if c.name == name)
    return contract, case, draw_inputs(contract, case, "bfloat16")


def test_the_reference_is_the_fp8_reference_on_the_gathered_pages():
    contract, _, inputs = _case("typical")
    paged = reference(inputs, dict(contract.params))
    view = {k: v for k, v in inputs.items() if k != "block_table"}
    view.update({name: gather(inputs[name], inputs["block_table"]) for name in POOLS})
    theirs = contiguous.reference(view, dict(contract.params))
    for stage in ("c_kv", "q_absorbed", "o_latent", "o_heads", "o_heads_unquantized"):
        assert torch.equal(paged[stage], theirs[stage]), stage
    pages, rows = slots(inputs["block_table"], inputs["cache_lens"])
    batch = torch.arange(3)
    lens = inputs["cache_lens"].long()
    for name in POOLS:  # the appended row in its page, every other entry the input's (NaN where the input has NaN)
        assert torch.equal(paged[name][pages, rows], theirs[name][batch, lens]), name
        kept = torch.ones(paged[name].shape[:2], dtype=torch.bool)
        kept[pages, rows] = False
        assert torch.equal(paged[name][kept].nan_to_num(7.0), inputs[name].double()[kept].nan_to_num(7.0)), name


def test_the_layout_poisons_every_unowned_page_of_the_three_pools():
    _, _, inputs = _case("typical")
    table, lens = inputs["block_table"], inputs["cache_lens"].tolist()
    owned = {int(p) for b, n in enumerate(lens) for p in table[b, : owned_pages(n)]}
    for name in POOLS:
        pool = inputs[name].float()
        for page in range(pool.shape[0]):
            assert bool(pool[page].isnan().all()) == (page not in owned), (name, page)


@pytest.mark.parametrize("case_name", [c.name for c in load_contract(CONTRACT).cases.cpu])
def test_the_baseline_passes_every_cpu_case(case_name):
    contract, case, _ = _case(case_name)
    assert stages_missed(contract, baseline.run, case, reference) == []


@pytest.fixture(scope="module")
def gates(tmp_path_factory) -> Path:
    os.environ.setdefault("TRITON_INTERPRET", "1")
    return tmp_path_factory.mktemp("fp8-paged-gates")


def test_the_honest_paged_kernel_passes_a_whole_check(gates):
    verdict, _ = check(CONTRACT, HONEST, gates, profile="cpu", measure_speed=False, run_stress=False)
    assert verdict.passed and verdict.detections == [], verdict.first_failing_stage


def test_the_contiguous_kernel_blind_to_the_block_table_is_rejected(gates):
    verdict, _ = check(CONTRACT, BLIND, gates, profile="cpu", measure_speed=False, run_stress=False)
    assert not verdict.passed


@pytest.mark.gpu
@pytest.mark.parametrize("case_name", ["tp1_b64_l4096", "tp8_b32_l8192"])
def test_the_honest_paged_kernel_passes_the_gpu_cases(case_name):
    import importlib

    contract = load_contract(CONTRACT)
    case = next(c for c in contract.cases.gpu if c.name == case_name)
    run = importlib.import_module("tasks.mla_attention_fp8_paged.candidates.triton_mla_fp8_paged").run
    assert stages_missed(contract, run, case, reference, "cuda") == []
