"""Evidence turned into names: a small error in the right direction reads as a precision cut, a large one
(or one in the wrong direction) as a math mismatch at its first failing stage, with its numbers; and every
other way to fail (a wrong shape, bytes that change, a fault, a failed stress run) is named too."""

from __future__ import annotations

import pytest

from ferret import wire
from ferret.contract.model import Tolerance
from ferret.gate.detect import COARSEST_ROUNDOFF, from_failure, from_outputs, from_stress, unnamed
from ferret.gate.metrics import StageMetrics
from ferret.gate.models import PartResult, RunFailure, VariantResult


def _result(*stages: StageMetrics) -> VariantResult:
    first = next((s.stage for s in stages if not s.passed), None)
    return VariantResult(
        id="typical@bfloat16",
        case="typical",
        dtype="bfloat16",
        part="correctness",
        passed=first is None,
        stages=list(stages),
        first_failing_stage=first,
        repeats_bitwise_equal=True,
        traced_equals_fast=True,
    )


def _stage(name: str, passed: bool, rel_l2: float, cosine: float) -> StageMetrics:
    return StageMetrics(
        stage=name,
        passed=passed,
        rel_l2=rel_l2,
        cosine=cosine,
        max_abs_rel_peak=rel_l2,
        reasons=[] if passed else [f"rel_l2 {rel_l2:.3g} > 0.0236"],
        tolerance=Tolerance(rel_l2=0.0236),
    )


def _cheats(result: VariantResult, tensors: dict | None = None) -> dict[str, str]:
    """The names `from_outputs` gives, with `tensors` (stage -> (candidate, reference)) for the rounding test."""
    tensors = tensors or {}
    golden = {name: ref for name, (_, ref) in tensors.items()}
    values = {name: cand for name, (cand, _) in tensors.items()}
    return {d.cheat: d.evidence for d in from_outputs(result, {}, golden, [], values=values)}


def _rounded(dtype, shape=(16, 512), seed=0):
    """(a float32 candidate rounded through `dtype`, its float64 reference)."""
    import torch

    reference = torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return reference.to(dtype).float(), reference


def test_a_wrong_scale_is_a_math_mismatch_not_lower_precision():
    # The MLA candidate with softmax scale 1/sqrt(576): the direction nearly kept, the norm not.
    found = _cheats(_result(_stage("q_absorbed", True, 1e-3, 0.99999), _stage("scores", False, 0.69, 0.9991)))
    assert "lower_precision" not in found
    evidence = found["math_mismatch"]
    assert evidence.startswith("stage scores differs from the contract's math: rel_l2 0.69, cosine 0.99910")
    assert "29x the tolerance" in evidence and "'rel_l2': 0.0236" in evidence


def test_an_error_rounding_could_make_is_lower_precision_only_where_the_tensors_show_rounding():
    import torch

    found = _cheats(_result(_stage("scores", False, 0.03, 0.9996)), {"scores": _rounded(torch.bfloat16)})
    assert set(found) == {"lower_precision"}
    assert "rounding at bfloat16" in found["lower_precision"]
    assert "scores (cosine 0.99960, rel_l2 3.00e-02)" in found["lower_precision"]


def test_a_small_error_in_the_right_direction_alone_is_no_evidence_of_rounding():
    # Without the tensors to read (or with too few entries) the size and direction of an error say nothing of its
    # pattern: a wrong divisor is as small. It is named by its numbers.
    import torch

    assert set(_cheats(_result(_stage("scores", False, 0.03, 0.9996)))) == {"math_mismatch"}
    three = _rounded(torch.float32, shape=(3,))
    found = _cheats(_result(_stage("scores", False, 0.03, 0.9996)), {"scores": (three[0] * 1.01, three[1])})
    assert set(found) == {"math_mismatch"} and "too few to tell" in found["math_mismatch"]


def test_a_scale_error_the_size_of_rounding_is_a_math_mismatch_that_says_why():
    import torch

    reference = _rounded(torch.float32)[1]
    found = _cheats(_result(_stage("y", False, 2.0**-8, 1.0)), {"y": ((reference * (1 + 2.0**-8)).float(), reference)})
    assert set(found) == {"math_mismatch"}
    assert "not a precision cut: y: its error leans along the reference (cosine +1.00)" in found["math_mismatch"]


def test_a_miss_measured_only_against_an_error_scale_is_no_evidence_of_rounding():
    # The wrong softmax scale on the one score of a B = H = L = 1 case (CI, 2026-12-04): the score is near zero
    # against its terms' norm, so 0.69 of it reads 0.023 of that norm, cosine 1 by construction. Alone it names a
    # math mismatch; beside a miss against its own norm whose tensors show rounding, a precision cut.
    import torch

    scaled = _stage("scores", False, 0.0226, 1.0).model_copy(update={"own_norm": False})
    assert set(_cheats(_result(scaled))) == {"math_mismatch"}
    rounded = {"o_heads": _rounded(torch.bfloat16)}
    assert set(_cheats(_result(scaled, _stage("o_heads", False, 0.03, 0.9996)), rounded)) == {"lower_precision"}


def test_the_wrong_scale_on_one_near_zero_score_is_a_math_mismatch_through_the_metrics():
    import torch

    from ferret.contract.model import Stage
    from ferret.gate.metrics import compare_stage

    stage = Stage(name="scores", computes="dot products", shape=["T"], dims=["token"], error_scale="scores_error_scale")
    tol = Tolerance(rel_l2=0.0155, cosine_min=0.99988)
    score, terms_norm = torch.tensor([0.2], dtype=torch.float64), torch.tensor([6.0], dtype=torch.float64)
    wrong_scale = compare_stage(score * 1.69, score, stage, tol, error_scale=terms_norm)
    assert not wrong_scale.passed and wrong_scale.rel_l2 <= COARSEST_ROUNDOFF and wrong_scale.cosine == 1.0
    assert set(_cheats(_result(wrong_scale))) == {"math_mismatch"}


def test_the_boundary_is_the_coarsest_formats_roundoff():
    import torch

    fp8 = {"y": _rounded(torch.float8_e4m3fn)}
    assert "lower_precision" in _cheats(_result(_stage("y", False, COARSEST_ROUNDOFF, 0.9995)), fp8)
    assert set(_cheats(_result(_stage("y", False, COARSEST_ROUNDOFF * 1.01, 0.9995)), fp8)) == {"math_mismatch"}


def test_a_wrong_direction_is_a_math_mismatch_at_the_first_failing_stage():
    found = _cheats(_result(_stage("inv_rms", False, 0.01, 0.95), _stage("y", False, 0.5, 0.7)))
    assert set(found) == {"math_mismatch"} and found["math_mismatch"].startswith("stage inv_rms differs")


def test_a_passing_variant_names_nothing():
    assert _cheats(_result(_stage("y", True, 1e-3, 0.99999))) == {}


def _constant_output_named(reference, stage_passed: bool = False) -> bool:
    import torch

    written = torch.full(reference.shape, 1.1953125, dtype=torch.bfloat16)
    stage = _stage("y", stage_passed, 1e-3 if stage_passed else 0.05, 0.99)
    found = from_outputs(_result(stage), {wire.fast_key(0, "y"): written}, {"y": reference}, ["y"])
    return "constant_output" in {d.cheat for d in found}


def test_a_constant_output_is_named_only_where_the_reference_varies_in_the_outputs_dtype():
    import torch

    # one column: every row is w up to eps, below bfloat16's resolution, and an honest kernel writes w everywhere
    below_resolution = 1.1953125 + torch.linspace(0, 1e-5, 64, dtype=torch.float64)
    assert not _constant_output_named(below_resolution)
    assert _constant_output_named(1.1953125 + torch.linspace(0, 1e-1, 64, dtype=torch.float64))


def test_a_constant_output_within_its_tolerance_is_not_named():
    import torch

    # two rows of one column: +-w each, the reference's two values one bfloat16 rounding apart, the honest kernel's
    # one value within the tolerance (seen on a fresh case of two rows and one column)
    one_rounding_apart = torch.tensor([1.1953125, 1.1953125 + 2**-7], dtype=torch.float64)
    assert not _constant_output_named(one_rounding_apart, stage_passed=True)
    assert _constant_output_named(one_rounding_apart, stage_passed=False)


# --- every rejection path names what it saw -----------------------------------------------------------------


def test_a_nan_where_the_reference_is_finite_or_back_is_named_at_the_first_failing_stage():
    stage = StageMetrics(
        stage="y",
        passed=False,
        rel_l2=0.0,
        cosine=1.0,
        nonfinite_mismatches=3,
        reasons=["3 NaN/Inf mismatches"],
        tolerance=Tolerance(rel_l2=0.0236),
    )
    found = _cheats(_result(stage))
    assert set(found) == {"math_mismatch"} and "3 NaN/Inf mismatches" in found["math_mismatch"]


def test_a_stage_of_the_wrong_shape_is_named_so():
    stage = StageMetrics(stage="inv_rms", passed=False, reasons=["shape [1] != expected [16]"], tolerance=Tolerance(rel_l2=0.1))
    assert _cheats(_result(stage)) == {"wrong_shape": "stage inv_rms: shape [1] != expected [16]"}


def test_repeats_and_traced_runs_that_differ_say_where():
    result = _result(_stage("y", True, 1e-3, 0.99999))
    result.repeats_bitwise_equal = result.traced_equals_fast = False
    found = {
        d.cheat: d.evidence
        for d in from_outputs(
            result, {}, {}, [], ["y: call 3 against call 1: 2 of 8 entries differ"], ["y: 1 of 8 entries differ, first at [0, 0]"]
        )
    }
    assert "y: call 3 against call 1: 2 of 8 entries differ" in found["warmup_detection"]
    assert "first at [0, 0]" in found["traced_differs"]


@pytest.mark.parametrize("kind", ["exception", "crash", "timeout", "out_of_memory", "internal"])
def test_a_failure_to_run_is_named_by_its_kind_and_message(kind):
    result = VariantResult(
        id="edge@bfloat16",
        case="edge",
        dtype="bfloat16",
        part="edge_cases",
        passed=False,
        failure=RunFailure(kind=kind, message="what the process said"),
    )
    (found,) = from_failure(result)
    assert (found.cheat, found.source, found.variant) == (kind, "run", "edge@bfloat16")
    assert found.evidence.endswith("on edge@bfloat16: what the process said")


def test_a_variant_not_run_is_named_by_the_fault_not_by_itself():
    result = VariantResult(
        id="b@bfloat16",
        case="b",
        dtype="bfloat16",
        part="correctness",
        passed=False,
        failure=RunFailure(kind=wire.FailureKind.NOT_RUN, message="not run: the candidate's process ended at a"),
    )
    assert from_failure(result) == []


def test_a_failed_stress_run_is_named_with_its_numbers():
    drift = wire.StressResult(variant="big@bfloat16", iterations=200, outputs_differing_from_first=3, memory_growth_bytes=4096)
    assert {d.cheat: d.evidence for d in from_stress(drift)} == {
        "stress_drift": "3 of 200 calls on big@bfloat16 gave outputs that differ from the first call's (races, uninitialised "
        "reads, or state kept across calls)",
        "memory_growth": "device memory grew 4096 bytes over 200 calls on big@bfloat16",
    }
    assert [d.cheat for d in from_stress(wire.StressResult(error="crash: exited with code 139"))] == ["stress_failed"]
    assert "did not complete" in from_stress(None)[0].evidence
    assert from_stress(wire.StressResult(variant="big@bfloat16", iterations=200)) == []


def test_the_last_resort_names_the_failing_parts():
    (found,) = unnamed(
        {"correctness": PartResult(status="fail", detail="typical@bfloat16: stage y"), "dtypes": PartResult(status="pass")}
    )
    assert found.cheat == "unnamed_rejection" and found.evidence == "failing parts: correctness: typical@bfloat16: stage y"


def test_launch_counts_and_the_no_op_run_name_decoys_whatever_the_candidates_language():
    """Triton's launches and the CUDA backend's are counted and made no-ops alike, so neither check depends on the
    contract's `backend.language` (a CUDA-only contract once skipped the no-op check)."""
    import torch

    from ferret.gate.detect import from_runtime

    result = _result()
    out = torch.ones(3)
    same = {wire.fast_key(0, "y"): out, wire.noop_key("y"): out.clone()}
    differs = {wire.fast_key(0, "y"): out, wire.noop_key("y"): torch.full((3,), float("nan"))}

    def named(status, got):
        return [d.evidence for d in from_runtime(result, status, got, ["y"], lambda a, b: torch.equal(a, b))]

    assert named(wire.VariantStatus(ok=True, launches=2), differs) == []
    assert named(wire.VariantStatus(ok=True, launches=0), differs) == [
        "no kernel (Triton, or CUDA through Source.launch) was launched by the fast path"
    ]
    assert any(
        "with every kernel launch made a no-op, outputs ['y']" in e for e in named(wire.VariantStatus(ok=True, launches=2), same)
    )


# --- hard-coded cases only with evidence that the candidate depends on the case --------------------------------


def _case(vid: str, part: str, passed: bool) -> VariantResult:
    return VariantResult(id=vid, case=vid.split("@")[0], dtype="float32", part=part, passed=passed)  # type: ignore[arg-type]


def _frozen_pass_fresh_fail(fresh_dims: dict[str, int]):
    frozen = [_case("typical@float32", "correctness", True), _case("odd@float32", "correctness", True)]
    fresh = [_case("fresh0@float32", "fresh_cases", False), _case("fresh1@float32", "fresh_cases", True)]
    dims = {
        "typical@float32": {"M": 16, "N": 512},
        "odd@float32": {"M": 3, "N": 1000},
        "fresh0@float32": fresh_dims,
        "fresh1@float32": {"M": 5, "N": 64},
    }
    return frozen, fresh, dims


def test_failing_only_on_fresh_dims_without_evidence_is_a_math_mismatch_that_says_why():
    from ferret.gate.detect import hardcoded_cases

    frozen, fresh, dims = _frozen_pass_fresh_fail({"M": 7, "N": 1300})
    (found,) = hardcoded_cases(frozen, fresh, dims, [])
    assert found.cheat == "math_mismatch" and found.catalogue == []
    assert "fresh0@float32 {'M': 7, 'N': 1300}" in found.evidence
    assert "not named hard-coded cases: nothing shows that the candidate depends on the case" in found.evidence


def test_a_scan_finding_of_case_dims_makes_it_hardcoded_cases():
    from ferret.gate.detect import hardcoded_cases
    from ferret.gate.models import Detection

    frozen, fresh, dims = _frozen_pass_fresh_fail({"M": 7, "N": 1300})
    static = Detection(cheat="hardcoded_cases", catalogue=[5], source="static", evidence="c.py:3: a table keyed by 7168")
    (found,) = hardcoded_cases(frozen, fresh, dims, [static])
    assert found.cheat == "hardcoded_cases" and "the scan or the run found hardcoded_cases" in found.evidence
    # the outputs' own detection is no evidence of itself
    own = static.model_copy(update={"source": "outputs"})
    assert hardcoded_cases(frozen, fresh, dims, [own])[0].cheat == "math_mismatch"


def test_a_failure_at_a_gate_cases_own_dims_with_new_values_makes_it_hardcoded_cases():
    from ferret.gate.detect import hardcoded_cases

    frozen, fresh, dims = _frozen_pass_fresh_fail({"M": 3, "N": 1000})
    (found,) = hardcoded_cases(frozen, fresh, dims, [])
    assert found.cheat == "hardcoded_cases"
    assert "fresh cases with a gate case's own dims and new values fail too (['fresh0@float32'])" in found.evidence


def test_no_fresh_failure_or_a_gate_failure_names_nothing_here():
    from ferret.gate.detect import hardcoded_cases

    frozen, fresh, dims = _frozen_pass_fresh_fail({"M": 7, "N": 1300})
    assert hardcoded_cases(frozen, [r.model_copy(update={"passed": True}) for r in fresh], dims, []) == []
    assert hardcoded_cases([frozen[0].model_copy(update={"passed": False})], fresh, dims, []) == []
