"""Evidence turned into names: a small error in the right direction reads as a precision cut, a large one
(or one in the wrong direction) as a math mismatch at its first failing stage, with its numbers."""

from __future__ import annotations

from ferret.contract.model import Tolerance
from ferret.gate.detect import COARSEST_ROUNDOFF, from_outputs
from ferret.gate.metrics import StageMetrics
from ferret.gate.models import VariantResult


def _result(*stages: StageMetrics) -> VariantResult:
    first = next((s.stage for s in stages if not s.passed), None)
    return VariantResult(id="typical@bfloat16", case="typical", dtype="bfloat16", part="correctness", passed=first is None,
                         stages=list(stages), first_failing_stage=first, repeats_bitwise_equal=True, traced_equals_fast=True)


def _stage(name: str, passed: bool, rel_l2: float, cosine: float) -> StageMetrics:
    return StageMetrics(stage=name, passed=passed, rel_l2=rel_l2, cosine=cosine, max_abs_rel_peak=rel_l2,
                        reasons=[] if passed else [f"rel_l2 {rel_l2:.3g} > 0.0236"], tolerance=Tolerance(rel_l2=0.0236))


def _cheats(result: VariantResult) -> dict[str, str]:
    return {d.cheat: d.evidence for d in from_outputs(result, {}, {}, [])}


def test_a_wrong_scale_is_a_math_mismatch_not_lower_precision():
    # The MLA candidate with softmax scale 1/sqrt(576): the direction nearly kept, the norm not.
    found = _cheats(_result(_stage("q_absorbed", True, 1e-3, 0.99999), _stage("scores", False, 0.69, 0.9991)))
    assert "lower_precision" not in found
    evidence = found["math_mismatch"]
    assert evidence.startswith("stage scores differs from the contract's math: rel_l2 0.69, cosine 0.99910")
    assert "29x the tolerance" in evidence and "'rel_l2': 0.0236" in evidence


def test_an_error_rounding_could_make_is_lower_precision():
    found = _cheats(_result(_stage("scores", False, 0.03, 0.9996)))
    assert set(found) == {"lower_precision"} and "scores (cosine 0.99960, rel_l2 3.00e-02)" in found["lower_precision"]


def test_the_boundary_is_the_coarsest_formats_roundoff():
    assert "lower_precision" in _cheats(_result(_stage("y", False, COARSEST_ROUNDOFF, 0.9995)))
    assert "math_mismatch" in _cheats(_result(_stage("y", False, COARSEST_ROUNDOFF * 1.01, 0.9995)))


def test_a_wrong_direction_is_a_math_mismatch_at_the_first_failing_stage():
    found = _cheats(_result(_stage("inv_rms", False, 0.01, 0.95), _stage("y", False, 0.5, 0.7)))
    assert set(found) == {"math_mismatch"} and found["math_mismatch"].startswith("stage inv_rms differs")


def test_a_passing_variant_names_nothing():
    assert _cheats(_result(_stage("y", True, 1e-3, 0.99999))) == {}
