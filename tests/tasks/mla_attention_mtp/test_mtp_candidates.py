"""The multi-token contract's honest implementations, stage by stage against the float64 reference within the
contract's tolerances: the baseline on every CPU case here, the Triton candidate through whole checks in
tests/adversarial/test_mtp_masking.py; both on GPU cases (`pytest -m gpu`), and the Triton candidate through a whole
GPU check."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
from task_checks import stages_missed

from ferret.contract.load import load_contract
from tasks.mla_attention_mtp.reference import reference

REPO = Path(__file__).resolve().parents[3]
CONTRACT = REPO / "contracts" / "mla_attention_mtp.yaml"
IMPLEMENTATIONS = {
    "baseline": "tasks.mla_attention_mtp.baseline",
    "triton_mla_mtp": "tasks.mla_attention_mtp.candidates.triton_mla_mtp",
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
@pytest.mark.parametrize("case_name", ["tp1_b64_l4096", "tp8_b32_l8192", "tp1_b32_s4_l4096", "odd_tp8_b3_l4099"])
@pytest.mark.parametrize("name", sorted(IMPLEMENTATIONS))
def test_honest_implementations_pass_the_gpu_cases(name, case_name):
    assert _failing(IMPLEMENTATIONS[name], "gpu", case_name, "cuda") == []


@pytest.mark.gpu
def test_the_triton_candidate_passes_a_whole_gpu_check(tmp_path):
    from ferret.gate.judge import check

    candidate = REPO / "tasks" / "mla_attention_mtp" / "candidates" / "triton_mla_mtp.py"
    verdict, _ = check(CONTRACT, candidate, tmp_path, profile="gpu", measure_speed=False, run_stress=False)
    assert verdict.passed, verdict.first_failing_stage
    assert verdict.detections == []
