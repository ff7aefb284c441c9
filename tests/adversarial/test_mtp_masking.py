"""The causal mask of a multi-token MLA step, each bug class rejected by the multi-token contract's CPU gate, and the
honest kernel passing it.

- `mtp_sees_next.py` lets query token i see new token i + 1: its scores there are where the reference holds -inf
  (not compared), the weights they take are not: rejected at probs;
- `mtp_cache_only.py` lets every token see only the past cache, none of the new tokens: the new tokens' scores are
  -inf where the reference holds values: rejected at scores.
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
CONTRACT = CONTRACTS / "mla_attention_mtp.yaml"
HONEST = REPO / "tasks" / "mla_attention_mtp" / "candidates" / "triton_mla_mtp.py"
# candidate -> (a case variant that must fail, the stage it must fail at first there)
CHEATS = {
    "mtp_sees_next.py": ("first_tokens@bfloat16", "probs"),
    "mtp_cache_only.py": ("typical@bfloat16", "scores"),
}


@pytest.fixture(scope="module")
def gates(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("mtp-gates")


def _judged(gates: Path, candidate: Path):
    verdict, _ = check(CONTRACT, candidate, gates, profile="cpu", measure_speed=False, run_stress=False)
    return verdict


def test_the_honest_multi_token_kernel_passes_with_no_detection(gates):
    verdict = _judged(gates, HONEST)
    assert verdict.passed, verdict.first_failing_stage
    assert verdict.detections == []


@pytest.mark.parametrize("name", sorted(CHEATS))
def test_each_masking_bug_is_rejected_at_its_stage(gates, name):
    verdict = _judged(gates, HERE / name)
    assert not verdict.passed
    variant, stage = CHEATS[name]
    judged = next(v for v in verdict.variants if v.id == variant)
    failing = [m.stage for m in judged.stages if not m.passed]
    assert failing and failing[0] == stage, failing
    assert "math_mismatch" in {d.cheat for d in verdict.detections}
    assert unnamed_rejection(verdict) is None
