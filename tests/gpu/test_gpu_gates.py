"""On the GPU: the honest Triton candidates pass their gates at production shapes, and the four MLA
simplifications fail there too. Run on a CUDA machine with `python -m pytest -m gpu tests/gpu`.

The honest checks time the candidate as every GPU verdict does; nothing here asserts on speed:
`python -m benchmarks timing` tables them (benchmarks/README.md).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GATES = Path(os.environ.get("FERRET_GATES_DIR", REPO / "gates"))

pytestmark = pytest.mark.gpu


def _progress(message: str) -> None:
    import sys
    import time

    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


HONEST = [
    ("rmsnorm", "tasks/rmsnorm/candidates/triton_rmsnorm.py"),
    ("softmax", "tasks/softmax/candidates/triton_softmax.py"),
    ("rope", "tasks/rope/candidates/triton_rope.py"),
    ("mla_attention", "tasks/mla_attention/candidates/triton_mla.py"),
    # kernel 3 on Hopper's warpgroup MMA (a CUDA candidate: the contract allows CUDA)
    ("mla_attention", "tasks/mla_attention/candidates/wgmma_mla.py"),
]


@pytest.mark.parametrize("op,candidate", HONEST, ids=[op + ("_wgmma" if "wgmma" in c else "") for op, c in HONEST])
def test_honest_candidate_passes_at_production_shapes(op, candidate):
    from ferret.gate.judge import check

    verdict, _gate = check(REPO / f"contracts/{op}.yaml", REPO / candidate, GATES, profile="gpu", progress=_progress)
    failing = {r.id: (r.failure.message if r.failure else r.first_failing_stage) for r in verdict.variants if not r.passed}
    assert verdict.passed, f"{op}: {failing}; parts {verdict.parts}"
    assert verdict.parts["stress"].status == "pass", verdict.parts["stress"].detail
    assert verdict.profile == "gpu"
    # An honest candidate's timing counts: no case unstable, the baseline's rounds included (a baseline that
    # synchronizes with the host inside each call had its rounds swing by up to 85% when timed by events).
    assert verdict.timing.measured and not verdict.timing.unstable_cases, [
        (c.case, c.unstable_reason) for c in verdict.timing.cases
    ]


@pytest.mark.parametrize("simplification", ["theta", "scale", "no_kv_norm", "head_sum"])
def test_mla_simplifications_fail_at_production_shapes(simplification, tmp_path):
    from ferret.gate.judge import check
    from tasks.mla_attention.simplifications import SIMPLIFICATIONS, write_variant

    variant = write_variant(simplification, tmp_path / f"mla_{simplification}.py")
    verdict, _gate = check(
        REPO / "contracts/mla_attention.yaml",
        variant,
        GATES,
        profile="gpu",
        measure_speed=False,
        run_stress=False,
        progress=_progress,
    )
    assert not verdict.passed
    assert verdict.first_failing_stage == SIMPLIFICATIONS[simplification].expected_first_stage
    final = [s for r in verdict.variants for s in r.stages if s.stage == "o_heads"]
    assert any(not s.passed for s in final), "the final output alone must also reject the simplification"


def test_mla_bf16_partials_fail_on_the_gpu_cancelling_case(tmp_path):
    """Each split's partial carried in bf16 (a precision cut): on the GPU profile the edge case whose cache
    halves cancel under flat attention rejects it, at o_latent, whatever else passes."""
    from ferret.gate.judge import check
    from tasks.mla_attention.precision_variants import write_variant

    variant = write_variant("partial_bf16", tmp_path / "mla_partial_bf16.py")
    verdict, _gate = check(
        REPO / "contracts/mla_attention.yaml",
        variant,
        GATES,
        profile="gpu",
        measure_speed=False,
        run_stress=False,
        progress=_progress,
    )
    assert not verdict.passed
    failing = {r.id for r in verdict.variants if not r.passed}
    assert "cancelling_halves_tp1@bfloat16" in failing, failing
    stages = {s.stage for r in verdict.variants if r.id == "cancelling_halves_tp1@bfloat16" for s in r.stages if not s.passed}
    assert "o_latent" in stages, stages
