"""Cheats of an FP8 KV cache, each rejected by the FP8 MLA contract's CPU gate, and the honest kernel passing it.

- `f8_no_scale.py` rounds the values to e4m3 without their scale (scales stored as 1): rejected at kv_latent,
  whose codes must be the contract's (exact but at rounding ties);
- `f8_coarse_block.py` scales 512 values by one scale instead of 128 by each: rejected at kv_latent;
- `f8_bf16_shadow.py` writes the right FP8 row but attends over a bf16 shadow holding its own token unquantized:
  rejected at o_latent on first_token, the frozen case whose cache holds that token alone (its own row in the table,
  `by_case`: the honest error there is a fifteenth of the shadow's).
Every one goes through a whole `ferret.gate.judge.check` on the CPU profile (one gate, built once).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
from ferret_testkit import CONTRACTS, REPO, unnamed_rejection  # noqa: E402

from ferret.gate.judge import check  # noqa: E402

HERE = Path(__file__).resolve().parent / "candidates"
CONTRACT = CONTRACTS / "mla_attention_fp8.yaml"
HONEST = REPO / "tasks" / "mla_attention_fp8" / "candidates" / "triton_mla_fp8.py"
# candidate -> (a case variant that must fail, a stage it must fail at there)
CHEATS = {
    "f8_no_scale.py": ("typical@bfloat16", "kv_latent"),
    "f8_coarse_block.py": ("typical@bfloat16", "kv_latent"),
    "f8_bf16_shadow.py": ("first_token@bfloat16", "o_latent"),
}


@pytest.fixture(scope="module")
def gates(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("fp8-gates")


def _judged(gates: Path, candidate: Path):
    verdict, _ = check(CONTRACT, candidate, gates, profile="cpu", measure_speed=False, run_stress=False)
    return verdict


def test_the_honest_fp8_kernel_passes_with_no_detection(gates):
    verdict = _judged(gates, HONEST)
    assert verdict.passed, verdict.first_failing_stage
    assert verdict.detections == []


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_fp8_cheat_is_rejected_where_it_cheats(gates, name):
    verdict = _judged(gates, HERE / name)
    assert not verdict.passed
    variant, stage = CHEATS[name]
    judged = next(v for v in verdict.variants if v.id == variant)
    assert stage in {m.stage for m in judged.stages if not m.passed}, judged.first_failing_stage
    assert unnamed_rejection(verdict) is None
    if stage == "kv_latent":  # the evidence says the codes are off, not by how much of a statistical bound
        assert any("past their allowance" in d.evidence for d in verdict.detections if d.cheat == "math_mismatch")
