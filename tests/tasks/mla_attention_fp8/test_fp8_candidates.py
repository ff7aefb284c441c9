"""The FP8 contract's honest implementations, stage by stage against the float64 reference within the contract's
tolerances (the appended codes against their allowance): the baseline on every CPU case here, the Triton candidate
through whole checks in tests/adversarial/test_fp8_cache.py; both on GPU cases (`pytest -m gpu`, times printed beside
the bf16 contract's Triton step at the same shape)."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import torch
from task_checks import stages_missed

from ferret.contract.load import load_contract
from ferret.gate.calibrate import _run_implementation
from ferret.gate.inputs import draw_inputs
from tasks.mla_attention_fp8.reference import reference

CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_fp8.yaml"
IMPLEMENTATIONS = {
    "baseline": "tasks.mla_attention_fp8.baseline",
    "triton_mla_fp8": "tasks.mla_attention_fp8.candidates.triton_mla_fp8",
}


def _failing(module: str, profile: str, case_name: str, device: str) -> list[str]:
    """Each stage the implementation misses on the case, with why (the judge's comparison and tolerances)."""
    os.environ.setdefault("TRITON_INTERPRET", "1" if device == "cpu" else "0")
    contract = load_contract(CONTRACT)
    case = next(c for c in contract.cases_for(profile) if c.name == case_name)  # type: ignore[arg-type]
    return stages_missed(contract, importlib.import_module(module).run, case, reference, device)


@pytest.mark.parametrize("case_name", [c.name for c in load_contract(CONTRACT).cases.cpu])
def test_the_baseline_passes_every_cpu_case(case_name):
    assert _failing(IMPLEMENTATIONS["baseline"], "cpu", case_name, "cpu") == []


@pytest.mark.gpu
@pytest.mark.parametrize("case_name", ["tp1_b64_l4096", "tp8_b32_l8192", "odd_tp8_b3_l4099"])
@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_honest_implementations_pass_the_gpu_cases(name, case_name):
    assert _failing(IMPLEMENTATIONS[name], "gpu", case_name, "cuda") == []


@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_a_block_of_zeros_gets_scale_zero_and_codes_zero(name):
    """The contract's one exception to amax / 448: a block of zeros (no division by zero, no NaN)."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    contract = load_contract(CONTRACT)
    case = next(c for c in contract.cases.cpu if c.name == "position_4096")
    inputs = draw_inputs(contract, case, "bfloat16")
    inputs["kv_a"][:, 128:256] = 0  # the second block of the new token's latent
    got = _run_implementation(importlib.import_module(IMPLEMENTATIONS[name]).run, inputs, contract, case, "bfloat16", "cpu")
    golden = reference(inputs, dict(contract.params))
    row = int(inputs["cache_lens"][0])
    assert float(golden["kv_scale"][0, row, 1]) == 0.0 and float(got["kv_scale"][0, row, 1]) == 0.0
    assert not got["kv_latent"][0, row, 128:256].float().any()
    assert torch.equal(got["kv_latent"][0, row].double(), golden["kv_latent"][0, row])
    assert bool(torch.isfinite(got["o_heads"].float()).all())
