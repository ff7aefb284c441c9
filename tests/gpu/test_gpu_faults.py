"""On the GPU: a device fault costs seconds. A candidate whose kernel poisons the CUDA context on one
variant (a device-side assertion) has that failure named once as the run's fault; the variants after it
are reported as not run, and no process is restarted for them."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts/rmsnorm.yaml"  # its GPU profile has edge cases after single_element
HONEST = REPO / "tasks/rmsnorm/candidates/triton_rmsnorm.py"
GATES = Path(os.environ.get("FERRET_GATES_DIR", REPO / "gates"))

pytestmark = pytest.mark.gpu

POISON_ON_SINGLE_ELEMENT = """

def run(inputs, outputs, params, trace=None):
    if tuple(inputs["x"].shape) == (1, 1):
        import torch

        # An out-of-range index on the device: a device-side assertion leaves the CUDA context unusable.
        torch.zeros(1, device="cuda")[torch.tensor([1 << 20], device="cuda")].sum().item()
    _honest_run(inputs, outputs, params, trace)
"""


def test_a_poisoned_cuda_context_is_one_fault_and_the_rest_is_not_run(tmp_path):
    from ferret.gate.judge import check

    candidate = tmp_path / "poisons.py"
    candidate.write_text(HONEST.read_text().replace("\ndef run(", "\ndef _honest_run(") + POISON_ON_SINGLE_ELEMENT)
    verdict, _ = check(CONTRACT, candidate, GATES, profile="gpu", progress=print, measure_speed=False, run_stress=False)
    order = [r.id for r in verdict.variants]
    edge = "single_element@bfloat16"
    results = {r.id: r for r in verdict.variants}
    assert not verdict.passed
    assert results[edge].failure.kind == "exception" and "CUDA" in results[edge].failure.message
    assert all(results[v].passed for v in order[: order.index(edge)])
    after = order[order.index(edge) + 1 :]
    assert after and all(results[v].failure.kind == "not_run" for v in after)
    assert verdict.fault.variant == edge and verdict.fault.not_run == after
    assert "stopped after its failure" in verdict.fault.message
    assert not any(d.cheat == "result_forging" for d in verdict.detections), "not run is not a forged result"
