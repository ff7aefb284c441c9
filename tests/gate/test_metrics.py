"""compare_stage: the metrics, the strict NaN/Inf policy, don't-care regions and the worst error's place."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from ferret.contract.model import Stage, Tolerance
from ferret.gate.metrics import as_float64_on, compare_stage

STAGE = Stage(name="y", computes="test", shape=["M", "N"], dims=["row", "col"])
TOL = Tolerance(rel_l2=1e-3, max_abs_rel_peak=1e-3, cosine_min=0.9999)
LOOSE = Tolerance(rel_l2=10.0, max_abs_rel_peak=10.0, cosine_min=-0.99)


def _reference(m: int = 4, n: int = 6, seed: int = 0) -> torch.Tensor:
    return torch.randn(m, n, generator=torch.Generator().manual_seed(seed), dtype=torch.float64) + 0.1


def test_exact_candidate_passes():
    ref = _reference()
    m = compare_stage(ref.clone(), ref, STAGE, TOL)
    assert m.passed and m.reasons == []
    assert m.rel_l2 == 0.0 and m.max_abs_rel_peak == 0.0 and m.max_abs_err == 0.0
    assert m.cosine == pytest.approx(1.0)
    assert m.exposed and m.tolerance == TOL


def test_low_precision_candidate_is_compared_in_float64():
    ref = _reference()
    m = compare_stage(ref.to(torch.bfloat16), ref, STAGE, Tolerance(rel_l2=1e-2))
    assert m.passed
    assert m.rel_l2 is not None and 0 < m.rel_l2 < 1e-2


def test_not_exposed_stage():
    m = compare_stage(None, _reference(), STAGE, TOL)
    assert m.passed and not m.exposed and m.rel_l2 is None


@pytest.mark.quick
def test_nan_where_reference_is_finite_fails():
    ref = _reference()
    cand = ref.clone()
    cand[2, 3] = math.nan
    m = compare_stage(cand, ref, STAGE, LOOSE)
    assert not m.passed
    assert m.nonfinite_mismatches == 1
    assert m.reasons == ["1 NaN/Inf entries where the reference differs"]
    assert m.worst.index == [2, 3] and m.worst.named == {"row": 2, "col": 3}
    assert math.isnan(m.worst.candidate)


def test_inf_where_reference_is_finite_fails():
    ref = _reference()
    cand = ref.clone()
    cand[0, 0] = math.inf
    m = compare_stage(cand, ref, STAGE, LOOSE)
    assert not m.passed and m.nonfinite_mismatches == 1


def test_finite_where_reference_is_nan_fails():
    ref = _reference()
    ref[1, 1] = math.nan
    cand = ref.clone()
    cand[1, 1] = 0.0
    m = compare_stage(cand, ref, STAGE, LOOSE)
    assert not m.passed and m.nonfinite_mismatches == 1
    assert m.worst.named == {"row": 1, "col": 1}


def test_nan_at_the_same_place_passes():
    ref = _reference()
    ref[1, :] = math.nan
    cand = ref.clone()
    m = compare_stage(cand, ref, STAGE, TOL)
    assert m.passed, m.reasons
    assert m.nonfinite_mismatches == 0
    # The finite entries are still compared: a wrong finite value next to the NaN row fails.
    cand[0, 0] += 1.0
    assert not compare_stage(cand, ref, STAGE, TOL).passed


def test_inf_of_the_same_sign_passes_and_opposite_sign_fails():
    ref = _reference()
    ref[3, 5] = math.inf
    ref[0, 2] = -math.inf
    same = ref.clone()
    assert compare_stage(same, ref, STAGE, TOL).passed
    flipped = ref.clone()
    flipped[3, 5] = -math.inf
    m = compare_stage(flipped, ref, STAGE, LOOSE)
    assert not m.passed and m.nonfinite_mismatches == 1
    assert m.worst.named == {"row": 3, "col": 5}
    nan_for_inf = ref.clone()
    nan_for_inf[0, 2] = math.nan
    assert not compare_stage(nan_for_inf, ref, STAGE, LOOSE).passed


def test_ignore_where_reference_skips_masked_entries():
    masked = Stage(name="scores", computes="masked", shape=["M", "N"], dims=["row", "col"], ignore_where_reference="-inf")
    ref = _reference()
    ref[:, 4:] = -math.inf  # the masked region
    cand = ref.clone()
    cand[:, 4:] = torch.tensor([123.0, math.nan], dtype=torch.float64)  # garbage where nothing is defined
    m = compare_stage(cand, ref, masked, TOL)
    assert m.passed, m.reasons
    assert m.rel_l2 == 0.0
    # The same candidate against a stage without a don't-care region fails.
    assert not compare_stage(cand, ref, STAGE, LOOSE).passed
    # Outside the masked region the policy stays strict.
    cand[0, 0] = math.nan
    assert not compare_stage(cand, ref, masked, LOOSE).passed
    # And -inf where the reference is finite is still wrong.
    cand = ref.clone()
    cand[1, 1] = -math.inf
    assert not compare_stage(cand, ref, masked, LOOSE).passed


@pytest.mark.parametrize("value, token", [("nan", math.nan), ("inf", math.inf)])
def test_ignore_nan_and_inf_regions(value, token):
    stage = Stage(name="s", computes="", shape=["N"], ignore_where_reference=value)
    ref = torch.tensor([1.0, token, 2.0], dtype=torch.float64)
    cand = torch.tensor([1.0, -7.0, 2.0], dtype=torch.float64)
    assert compare_stage(cand, ref, stage, TOL).passed


def test_shape_mismatch_fails():
    ref = _reference()
    m = compare_stage(ref.reshape(6, 4), ref, STAGE, LOOSE)
    assert not m.passed
    assert m.reasons == ["shape [6, 4] != expected [4, 6]"]
    assert not compare_stage(ref[:, :5], ref, STAGE, LOOSE).passed
    assert not compare_stage(ref.reshape(-1), ref, STAGE, LOOSE).passed


def test_complex_candidate_fails():
    ref = _reference()
    assert not compare_stage(ref.to(torch.complex128), ref, STAGE, LOOSE).passed


def test_worst_error_location_is_named_by_dims():
    ref = _reference(5, 7)
    cand = ref.clone()
    cand[3, 6] += 0.5
    cand[1, 2] += 0.1
    m = compare_stage(cand, ref, Stage(name="y", computes="", shape=["M", "N"], dims=["token", "head"]), TOL)
    assert not m.passed
    assert m.worst.index == [3, 6]
    assert m.worst.named == {"token": 3, "head": 6}
    assert m.worst.candidate == pytest.approx(float(ref[3, 6]) + 0.5)
    assert m.worst.reference == pytest.approx(float(ref[3, 6]))
    assert m.max_abs_err == pytest.approx(0.5)
    # Without axis names only the index is given.
    unnamed = compare_stage(cand, ref, Stage(name="y", computes="", shape=["M", "N"]), TOL)
    assert unnamed.worst.index == [3, 6] and unnamed.worst.named == {}


def test_zero_output_fails_rel_l2():
    ref = _reference()
    m = compare_stage(torch.zeros_like(ref), ref, STAGE, Tolerance(rel_l2=0.5))
    assert not m.passed
    assert m.rel_l2 == pytest.approx(1.0)
    assert m.reasons == ["rel_l2 1.000e+00 > 5.000e-01"]
    assert m.cosine == 0.0


def test_constant_output_fails_rel_l2():
    ref = _reference(8, 16)
    cand = torch.full_like(ref, float(ref.mean()))
    m = compare_stage(cand, ref, STAGE, Tolerance(rel_l2=0.5))
    assert not m.passed
    assert m.rel_l2 > 0.5
    assert any(r.startswith("rel_l2") for r in m.reasons)


def test_all_zero_reference():
    ref = torch.zeros(3, 4, dtype=torch.float64)
    assert compare_stage(torch.zeros_like(ref), ref, STAGE, TOL).passed
    m = compare_stage(torch.full_like(ref, 1e-3), ref, STAGE, Tolerance(rel_l2=1e-3))
    assert not m.passed and m.rel_l2 == math.inf


def test_empty_tensors():
    ref = torch.zeros(0, 4, dtype=torch.float64)
    m = compare_stage(ref.clone(), ref, STAGE, TOL)
    assert m.passed and m.worst.index == []


@pytest.mark.parametrize("bound", ["rel_l2", "max_abs_rel_peak", "cosine_min"])
def test_each_bound_rejects_on_its_own(bound):
    ref = _reference(16, 32, seed=3)
    noise = torch.randn(ref.shape, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    cand = ref + 1e-3 * noise * ref.abs().max()
    observed = compare_stage(cand, ref, STAGE, LOOSE)
    assert observed.passed
    assert observed.cosine is not None
    assert observed.rel_l2 > 0 and observed.max_abs_rel_peak > 0 and observed.cosine < 1
    # The other two bounds set loose, this one just tighter than the candidate's error.
    tight = {
        "rel_l2": observed.rel_l2 * 0.9,
        "max_abs_rel_peak": observed.max_abs_rel_peak * 0.9,
        "cosine_min": 1 - (1 - observed.cosine) * 0.5,
    }[bound]
    tol = LOOSE.model_copy(update={bound: tight})
    m = compare_stage(cand, ref, STAGE, tol)
    assert not m.passed
    prefix = {"rel_l2": "rel_l2 ", "max_abs_rel_peak": "max_abs_rel_peak ", "cosine_min": "cosine "}[bound]
    assert len(m.reasons) == 1 and m.reasons[0].startswith(prefix), m.reasons
    # The same bound alone, with the others unset, rejects too.
    alone = compare_stage(cand, ref, STAGE, Tolerance(**{bound: tight}))
    assert not alone.passed and len(alone.reasons) == 1
    # And just looser than the error, it accepts.
    loose_enough = {
        "rel_l2": observed.rel_l2 * 1.1,
        "max_abs_rel_peak": observed.max_abs_rel_peak * 1.1,
        "cosine_min": 1 - (1 - observed.cosine) * 2,
    }[bound]
    assert compare_stage(cand, ref, STAGE, Tolerance(**{bound: loose_enough})).passed


def test_metric_values():
    ref = torch.tensor([3.0, 4.0], dtype=torch.float64)
    cand = torch.tensor([3.0, 4.5], dtype=torch.float64)
    m = compare_stage(cand, ref, Stage(name="s", computes="", shape=["N"]), LOOSE)
    assert m.rel_l2 == pytest.approx(0.5 / 5.0)
    assert m.max_abs_rel_peak == pytest.approx(0.5 / 4.0)
    assert m.cosine == pytest.approx((9 + 18) / (5.0 * math.hypot(3.0, 4.5)))
    assert m.worst.index == [1]


def test_a_scale_floor_judges_near_zero_values_against_the_stages_natural_scale():
    from ferret.contract.model import Stage, Tolerance
    from ferret.gate.metrics import compare_stage

    stage = Stage(name="scores", computes="dot products", shape=["H"], dims=["head"])
    # One dot product near zero: its honest absolute error (0.015) is 15% of it.
    near_zero, honest = torch.tensor([0.1], dtype=torch.float64), torch.tensor([0.115], dtype=torch.float64)
    plain = Tolerance(rel_l2=0.0155, max_abs_rel_peak=0.017, cosine_min=0.9998)
    floored = plain.model_copy(update={"scale_floor": 2.0})
    assert not compare_stage(honest, near_zero, stage, plain).passed
    assert compare_stage(honest, near_zero, stage, floored).passed
    # A wrong value is still wrong: 0.1 off on the natural scale of 2.
    assert not compare_stage(torch.tensor([0.2], dtype=torch.float64), near_zero, stage, floored).passed
    # On ordinary values (above the floor) the floor changes nothing.
    ordinary, off = torch.tensor([4.0, -3.0]), torch.tensor([4.1, -3.0])
    assert compare_stage(off, ordinary, stage, floored).rel_l2 == compare_stage(off, ordinary, stage, plain).rel_l2


def test_a_peak_floor_judges_a_few_entries_against_the_stages_peak_and_leaves_the_l2_alone():
    from ferret.contract.model import Stage, Tolerance
    from ferret.gate.metrics import compare_stage

    stage = Stage(name="scores", computes="dot products", shape=["H"], dims=["head"])
    # Two scores of one token, both below the stage's usual peak: the honest error 0.035 (the float32 rope angle
    # at position 16k) is 0.0233 of their own peak 1.5, but 0.0088 of a peak of 4.
    ref, honest = torch.tensor([1.5, -1.2], dtype=torch.float64), torch.tensor([1.535, -1.2], dtype=torch.float64)
    floored = Tolerance(rel_l2=0.0155, max_abs_rel_peak=0.017, scale_floor=2.0)
    peaked = floored.model_copy(update={"peak_floor": 4.0})
    assert not compare_stage(honest, ref, stage, floored).passed
    judged = compare_stage(honest, ref, stage, peaked)
    assert judged.max_abs_rel_peak == pytest.approx(0.035 / 4.0)
    assert judged.rel_l2 == compare_stage(honest, ref, stage, floored).rel_l2  # the norm keeps the scale floor
    # Above the floor the stage's own peak is used: a 0.1 error on a peak of 8 is 0.0125, under the limit...
    ordinary = torch.tensor([8.0, -3.0], dtype=torch.float64)
    assert compare_stage(ordinary + torch.tensor([0.1, 0.0]), ordinary, stage, peaked).max_abs_rel_peak == pytest.approx(
        0.1 / 8.0
    )
    # ...and an error of 0.1 on the two small scores is still rejected against the floor (0.025 > 0.017).
    assert not compare_stage(ref + torch.tensor([0.1, 0.0], dtype=torch.float64), ref, stage, peaked).passed


class _RecordsMoves(torch.Tensor):
    """A tensor that notes every `.to` called on it (and on what it returns)."""

    moves: list[tuple] = []

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func is torch.Tensor.to:
            cls.moves.append(tuple(args[1:]) + tuple(sorted((kwargs or {}).items())))
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_stage_goes_to_the_compare_device_in_its_own_dtype_then_becomes_float64_there():
    """A blocking host-to-device copy that also changes the dtype converts on the host and moves 2-8x the bytes
    (seconds on MLA's large stages): the move comes first, without a dtype, and the conversion after it."""
    _RecordsMoves.moves = []
    value = _reference().to(torch.bfloat16).as_subclass(_RecordsMoves)
    converted = as_float64_on(value, "cpu")
    assert _RecordsMoves.moves == [("cpu",), (torch.float64,)]
    assert converted.dtype == torch.float64
    assert torch.equal(converted.as_subclass(torch.Tensor), value.as_subclass(torch.Tensor).double())


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on a CUDA machine with `pytest -m gpu`)")
def test_metrics_on_the_gpu_equal_those_on_the_cpu():
    """The same verdict wherever the judge compares. Maxima and counts are order-free, so equal; the norms and the
    cosine are float64 sums whose order the GPU's reduction sets, so equal to a few float64 rounding units."""
    ref = _reference(64, 96).float()
    cand = (ref + 1e-3 * _reference(64, 96, seed=1).float()).to(torch.bfloat16)
    on_cpu, on_gpu = compare_stage(cand, ref, STAGE, LOOSE), compare_stage(cand, ref, STAGE, LOOSE, device="cuda")
    summed = {"rel_l2", "cosine", "max_abs_rel_peak"}
    assert on_gpu.model_dump(exclude=summed) == on_cpu.model_dump(exclude=summed)
    for name in summed:
        assert getattr(on_gpu, name) == pytest.approx(getattr(on_cpu, name), rel=1e-12), name


def test_an_error_scale_judges_each_entry_against_at_least_the_size_of_its_terms():
    from ferret.contract.model import Stage, Tolerance
    from ferret.gate.metrics import compare_stage

    stage = Stage(
        name="scores",
        computes="dot products",
        shape=["T"],
        dims=["token"],
        ignore_where_reference="-inf",
        error_scale="scores_error_scale",
    )
    tol = Tolerance(rel_l2=0.0155, max_abs_rel_peak=0.017, cosine_min=0.99988, scale_floor=2.0, peak_floor=4.0)
    # One dot product whose terms (norm 6) cancel to 0.24: an error of 0.054 (0.009 of the terms) is 0.027 of the
    # scale floor, rejected without the scale, passed with it.
    ref, honest, scale = (torch.tensor([x], dtype=torch.float64) for x in (0.24, 0.294, 6.0))
    assert not compare_stage(honest, ref, stage, tol).passed
    judged = compare_stage(honest, ref, stage, tol, error_scale=scale)
    assert judged.passed and judged.rel_l2 == pytest.approx(0.054 / 6.0)
    assert not judged.own_norm  # the terms' norm, not the score's own, set the denominator
    assert not compare_stage(ref + 0.12, ref, stage, tol, error_scale=scale).passed  # 0.02 of the terms: wrong
    # Masked entries (-inf) take no part in the scale, and a scale of the wrong shape is ignored (never looser).
    masked = torch.tensor([0.24, -math.inf], dtype=torch.float64)
    big = torch.tensor([6.0, 1e6], dtype=torch.float64)
    assert (
        compare_stage(torch.tensor([0.294, -math.inf], dtype=torch.float64), masked, stage, tol, error_scale=big).rel_l2
        == judged.rel_l2
    )
    assert not compare_stage(honest, ref, stage, tol, error_scale=torch.tensor([6.0, 6.0])).passed
    # Ordinary scores (the terms' norm about the scores' own) are judged as before.
    ordinary, off = torch.tensor([4.0, -3.0], dtype=torch.float64), torch.tensor([4.1, -3.0], dtype=torch.float64)
    small_scale = torch.tensor([3.0, 2.0], dtype=torch.float64)
    plain = compare_stage(off, ordinary, stage, tol)
    assert compare_stage(off, ordinary, stage, tol, error_scale=small_scale).rel_l2 == plain.rel_l2
    assert plain.own_norm  # a norm of 5 above the floor of 2 * sqrt(2): judged against itself


def test_a_contract_refuses_an_error_scale_named_like_a_stage():
    import yaml

    from ferret.contract.model import Contract

    data = yaml.safe_load((Path(__file__).resolve().parents[2] / "contracts" / "mla_attention.yaml").read_text())
    data.pop("tolerances", None)
    next(s for s in data["stages"] if s["name"] == "scores")["error_scale"] = "probs"
    with pytest.raises(ValueError, match="error_scale"):
        Contract.model_validate(data)


def _awkward_stage(seed: int = 3) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A candidate, its reference and an error scale with what each chunk must carry: ignored -inf entries, a NaN where
    the reference is finite (twice), NaN and Inf where the reference has the same, and the largest error twice (a tie)."""
    ref = _reference(9, 13, seed=seed)
    cand = ref + 1e-3 * _reference(9, 13, seed=seed + 1)
    ref[0, 2] = ref[5, 7] = -math.inf
    cand[0, 2] = 1.0  # ignored where the reference is -inf
    cand[5, 7] = -math.inf
    ref[2, 4] = cand[2, 4] = math.nan
    ref[3, 0] = cand[3, 0] = math.inf
    cand[6, 11], cand[8, 12] = math.nan, math.inf  # the reference is finite there: two mismatches
    cand[4, 5], cand[8, 1] = ref[4, 5] + 0.25, ref[8, 1] - 0.25
    scale = ref.abs() * 3 + 1
    return cand, ref, scale


@pytest.mark.parametrize("chunk", [1, 7, 40, 117, 1 << 24])
def test_the_metrics_are_the_same_whatever_the_chunk(chunk):
    """compare_stage sums a stage chunk by chunk (the memory of a comparison is bounded so): counts, maxima, the worst
    entry and the first mismatch are the same for any chunk, and the norms and cosine to a few rounding units."""
    stage = Stage(
        name="y", computes="test", shape=["M", "N"], dims=["row", "col"], ignore_where_reference="-inf", error_scale="y_scale"
    )
    cand, ref, scale = _awkward_stage()
    whole = compare_stage(cand, ref, stage, TOL, error_scale=scale, chunk=ref.numel())
    chunked = compare_stage(cand, ref, stage, TOL, error_scale=scale, chunk=chunk)
    assert whole.nonfinite_mismatches == 2 and whole.worst.named == {"row": 6, "col": 11}
    summed = {"rel_l2", "cosine", "max_abs_rel_peak"}
    assert chunked.model_dump(exclude=summed | {"worst"}) == whole.model_dump(exclude=summed | {"worst"})
    for name in summed:
        assert getattr(chunked, name) == pytest.approx(getattr(whole, name), rel=1e-12), name
    assert chunked.worst.index == [6, 11] and math.isnan(chunked.worst.candidate)  # NaN is no NaN's equal
    assert chunked.worst.reference == whole.worst.reference == float(ref[6, 11])
    # Without the non-finite mismatches the worst entry is the first of the two largest errors, in any chunking.
    cand[6, 11], cand[8, 12] = ref[6, 11], ref[8, 12]
    worst = compare_stage(cand, ref, stage, TOL, error_scale=scale, chunk=chunk)
    assert worst.worst.named == {"row": 4, "col": 5} and worst.max_abs_err == pytest.approx(0.25)
    assert worst.rel_l2 == pytest.approx(compare_stage(cand, ref, stage, TOL, error_scale=scale).rel_l2, rel=1e-12)


def test_a_stage_is_moved_and_converted_a_chunk_at_a_time(monkeypatch):
    """No more than `chunk` entries of the stage (candidate, reference, error scale) are in float64 at once."""
    import ferret.gate.metrics as metrics

    sizes = []
    real = metrics.as_float64_on
    monkeypatch.setattr(metrics, "as_float64_on", lambda tensor, device: (sizes.append(tensor.numel()), real(tensor, device))[1])
    stage = Stage(name="y", computes="test", shape=["M", "N"], dims=["row", "col"], error_scale="y_scale")
    ref = _reference(9, 13)
    compare_stage(ref + 1e-4, ref, stage, TOL, error_scale=ref.abs(), chunk=50)
    assert sizes == [50] * 3 + [50] * 3 + [17] * 3  # 117 entries: two whole chunks and the rest, three tensors each


def test_an_entry_is_located_as_torch_locates_it():
    """The worst entry's and row's index (`_unravel`, plain arithmetic) agree with torch.unravel_index."""
    from ferret.gate.metrics import _unravel

    for shape in [(7,), (3, 5), (2, 3, 4, 5), (1, 6, 1), (4, 0, 2)]:
        count = int(torch.tensor(shape).prod())
        for flat in range(count):
            assert _unravel(flat, shape) == [int(i) for i in torch.unravel_index(torch.tensor(flat), shape)], (flat, shape)
