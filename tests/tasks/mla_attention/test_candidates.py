"""The eager baseline and the Triton candidate against the float64 reference, stage by stage, on small CPU
shapes (Triton under its interpreter), and the four simplified variants of the candidate diverging where
they must."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import torch
from task_checks import run_mla_step

from ferret.contract.load import load_contract
from tasks.mla_attention import reference as ref
from tasks.mla_attention.inputs import make_inputs
from tasks.mla_attention.simplifications import CANDIDATE_PATH, SIMPLIFICATIONS, load_variant, variant_source

PARAMS = ref.DEEPSEEK_V3_PARAMS
CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention.yaml"
# The gate's own limit for each stage in bfloat16, from the contract's tolerance file: `ferret calibrate`'s
# largest error of the honest implementations over 16 seeds, times a margin of 4 (bf16 storage of every
# stage through a peaked softmax), not a number one machine's run suggested.
STAGE_REL_L2: dict[str, float] = {
    stage: float(load_contract(CONTRACT).tolerance("bfloat16", stage).rel_l2 or 0.0) for stage in ref.STAGES
}
# The appended cache row is the normalized c_kv and the roped k_pe, each within its stage's limit (the
# kv_cache stage's own limit is over the whole cache, mostly rows copied exactly).
NEW_ROW_REL_L2 = max(STAGE_REL_L2["c_kv"], STAGE_REL_L2["k_pe_roped"])
# A simplification must miss by far more than rounding does.
DIVERGED_REL_L2 = 0.1

CASES: dict[str, dict[str, Any]] = {
    # cache_lens hit both ends: 0 (only the new token) and L-1 (the appended row is the last one)
    "B2_H4_L40": dict(batch=2, heads=4, cache_capacity=40, cache_lens=[0, 39], positions=[4500, 16000]),
    # heads not a multiple of the head block, odd batch, lengths across split boundaries
    "B3_H40_L70": dict(batch=3, heads=40, cache_capacity=70, cache_lens=[69, 5, 33], positions=[16383, 6000, 9000]),
    # enough requests that the candidate runs a single split; positions below and around 4096 too
    "B9_H4_L33": dict(
        batch=9,
        heads=4,
        cache_capacity=33,
        cache_lens=[32, 0, 1, 31, 16, 17, 2, 30, 8],
        positions=[0, 1, 4095, 4096, 4097, 12000, 16384, 300, 8191],
    ),
}
IMPLEMENTATIONS = {
    "baseline": "tasks.mla_attention.baseline",
    "triton_mla": "tasks.mla_attention.candidates.triton_mla",
}


def _inputs(case: str, seed: int = 0) -> dict[str, torch.Tensor]:
    return make_inputs(seed=seed, **CASES[case])


def _run(module, inputs: dict[str, torch.Tensor], traced: bool):
    return run_mla_step(module, inputs, PARAMS, traced)


def stage_errors(actual: torch.Tensor, expected: torch.Tensor) -> tuple[float, float]:
    """(relative L2, max abs error / max |expected|) over the finite entries; the -inf pattern must match."""
    actual, expected = actual.detach().to(torch.float64).cpu(), expected.to(torch.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(actual), finite), "non-finite entries differ (mask or NaN)"
    assert torch.equal(actual[~finite], expected[~finite]), "masked entries differ"
    diff = actual[finite] - expected[finite]
    return float(diff.norm() / expected[finite].norm()), float(diff.abs().max() / expected[finite].abs().max())


@pytest.fixture(scope="module")
def golden():
    return {case: ref.reference(_inputs(case), PARAMS) for case in CASES}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_every_stage_matches_reference(impl, case, golden):
    module = importlib.import_module(IMPLEMENTATIONS[impl])
    inputs = _inputs(case)
    outputs, trace, _ = _run(module, inputs, traced=True)
    assert trace is not None
    assert set(ref.STAGES) <= set(trace), f"missing stages: {set(ref.STAGES) - set(trace)}"
    errors = {stage: stage_errors(trace[stage], golden[case][stage]) for stage in ref.STAGES}
    failing = {stage: err for stage, err in errors.items() if not err[0] <= STAGE_REL_L2[stage]}
    assert not failing, f"{impl} {case}: {failing}"
    assert stage_errors(outputs["o_heads"], golden[case]["o_heads"])[0] <= STAGE_REL_L2["o_heads"]


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_fast_and_traced_outputs_are_bitwise_equal(impl):
    module = importlib.import_module(IMPLEMENTATIONS[impl])
    inputs = _inputs("B3_H40_L70", seed=1)
    fast, _, fast_inputs = _run(module, inputs, traced=False)
    traced, trace, traced_inputs = _run(module, inputs, traced=True)
    assert not torch.isnan(fast["o_heads"]).any()
    assert torch.equal(fast["o_heads"], traced["o_heads"])
    assert torch.equal(trace["o_heads"], fast["o_heads"])
    assert torch.equal(fast_inputs["kv_cache"], traced_inputs["kv_cache"])
    repeat, _, _ = _run(module, inputs, traced=False)
    assert torch.equal(fast["o_heads"], repeat["o_heads"]), "not deterministic"


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_cache_append_touches_only_the_new_row(impl, golden):
    module = importlib.import_module(IMPLEMENTATIONS[impl])
    case = "B2_H4_L40"
    inputs = _inputs(case)
    _, _, after = _run(module, inputs, traced=False)
    batch, capacity = inputs["kv_cache"].shape[:2]
    appended = torch.zeros(batch, capacity, dtype=torch.bool)
    appended[torch.arange(batch), inputs["cache_lens"].long()] = True
    assert torch.equal(after["kv_cache"][~appended], inputs["kv_cache"][~appended])
    new_rows = after["kv_cache"][appended]
    assert stage_errors(new_rows, golden[case]["kv_cache"][appended])[0] <= NEW_ROW_REL_L2
    for name in inputs:
        if name != "kv_cache":
            assert torch.equal(after[name], inputs[name]), f"{impl} modified input {name}"


def test_simplification_lines_occur_once_in_candidate():
    source = CANDIDATE_PATH.read_text()
    lines = source.splitlines()
    for name, (old_line, new_line, _) in SIMPLIFICATIONS.items():
        assert lines.count(old_line) == 1, name
        variant_lines = variant_source(name, source).splitlines()
        changed = [i for i, (a, b) in enumerate(zip(lines, variant_lines, strict=False)) if a != b]
        assert len(variant_lines) == len(lines) and len(changed) == 1, name
        assert variant_lines[changed[0]] == new_line


@pytest.mark.parametrize("name", SIMPLIFICATIONS)
def test_simplified_variant_diverges_first_at_expected_stage(name, golden, tmp_path):
    variant = load_variant(name, tmp_path)
    case = "B2_H4_L40"
    outputs, trace, _ = _run(variant, _inputs(case), traced=True)
    rel_l2 = {stage: stage_errors(trace[stage], golden[case][stage])[0] for stage in ref.STAGES}
    first = next(stage for stage in ref.STAGES if rel_l2[stage] > STAGE_REL_L2[stage])
    expected = SIMPLIFICATIONS[name][2]
    assert first == expected, f"{name}: first divergence at {first}, expected {expected}: {rel_l2}"
    assert rel_l2[expected] > DIVERGED_REL_L2, rel_l2
    assert stage_errors(outputs["o_heads"], golden[case]["o_heads"])[0] > DIVERGED_REL_L2, rel_l2


def test_candidate_host_constants_match_reference(tmp_path):
    from tasks.mla_attention.candidates import triton_mla

    expected_freq = ref.yarn_inv_freq(PARAMS)
    freq = torch.tensor(triton_mla._rope_inv_freq_values(PARAMS), dtype=torch.float64)
    torch.testing.assert_close(freq, expected_freq, rtol=1e-14, atol=0)
    assert triton_mla._softmax_scale(PARAMS) == pytest.approx(ref.softmax_scale(PARAMS), rel=1e-14)
    assert triton_mla._rope_magnitude(PARAMS) == pytest.approx(ref.rope_magnitude(PARAMS), rel=1e-14)

    plain = load_variant("theta", tmp_path)
    torch.testing.assert_close(
        torch.tensor(plain._rope_inv_freq_values(PARAMS), dtype=torch.float64), ref.plain_inv_freq(PARAMS), rtol=1e-14, atol=0
    )
    assert load_variant("scale", tmp_path)._softmax_scale(PARAMS) == pytest.approx(1 / 24, rel=1e-14)


def test_candidate_never_reads_cache_rows_past_length():
    """Rows past len are not part of the sequence (stale or uninitialised memory in a real cache). The eager
    baseline multiplies them by zero probabilities, so it assumes they are finite; the candidate skips them."""
    module = importlib.import_module(IMPLEMENTATIONS["triton_mla"])
    inputs = _inputs("B2_H4_L40")
    poisoned = {name: t.clone() for name, t in inputs.items()}
    for b, length in enumerate(inputs["cache_lens"].tolist()):
        poisoned["kv_cache"][b, length + 1 :] = float("nan")
    clean_out, _, _ = _run(module, inputs, traced=False)
    poisoned_out, _, _ = _run(module, poisoned, traced=False)
    assert torch.equal(clean_out["o_heads"], poisoned_out["o_heads"])
