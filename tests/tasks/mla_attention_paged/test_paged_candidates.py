"""The eager baseline and the honest Triton candidate against the paged float64 reference on the contract's
CPU cases (Triton under its interpreter), stage by stage within the contract's tolerances; the candidate
through the whole CPU gate; and a wrong variant that reads pages contiguously, rejected."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
from task_checks import run_mla_step

from tasks.mla_attention_paged import reference as ref
from tasks.mla_attention_paged.layout import new_token_slots
from tasks.mla_attention_paged.wrong_variants import CANDIDATE_PATH, load_variant, write_variant

PARAMS = ref.DEEPSEEK_V3_PARAMS
CONTRACT = Path(__file__).resolve().parents[3] / "contracts" / "mla_attention_paged.yaml"
IMPLEMENTATIONS = {
    "baseline": "tasks.mla_attention_paged.baseline",
    "triton_mla_paged": "tasks.mla_attention_paged.candidates.triton_mla_paged",
}


@pytest.fixture
def contract(paged_contract):
    return paged_contract


@pytest.fixture(scope="module")
def cases(paged_drawn):
    """case -> (inputs as the judge draws them, the reference's stages)."""
    return {name: (inputs, ref.reference(inputs, PARAMS)) for name, inputs in paged_drawn.items()}


def _run(module, inputs: dict[str, torch.Tensor], traced: bool):
    return run_mla_step(module, inputs, PARAMS, traced)


def rel_l2(actual: torch.Tensor, expected: torch.Tensor) -> float:
    """Relative L2 over the finite entries; the non-finite ones (masked scores, unowned pages) must match."""
    actual, expected = actual.detach().double(), expected.double()
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    finite = torch.isfinite(expected)
    assert torch.equal(actual[~finite].nan_to_num(), expected[~finite].nan_to_num()), "non-finite entries differ"
    assert torch.isfinite(actual[finite]).all(), "non-finite where the reference is finite"
    return float((actual[finite] - expected[finite]).norm() / expected[finite].norm())


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_every_stage_within_the_contract_tolerance(impl, contract, cases):
    module = importlib.import_module(IMPLEMENTATIONS[impl])
    for name, (inputs, golden) in cases.items():
        outputs, trace, _ = _run(module, inputs, traced=True)
        errors = {stage: rel_l2(trace[stage], golden[stage]) for stage in ref.STAGES}
        failing = {s: e for s, e in errors.items() if e > contract.tolerance("bfloat16", s, name).rel_l2}
        assert not failing, (impl, name, failing)
        assert torch.equal(outputs["o_heads"], trace["o_heads"])


def test_candidate_fast_path_is_deterministic_and_writes_only_the_new_rows(contract, cases):
    module = importlib.import_module(IMPLEMENTATIONS["triton_mla_paged"])
    inputs, golden = cases["new_page"]
    fast, _, after = _run(module, inputs, traced=False)
    again, _, _ = _run(module, inputs, traced=False)
    assert torch.equal(fast["o_heads"], again["o_heads"])
    pages, rows = new_token_slots(inputs["block_table"], inputs["cache_lens"])
    changed = torch.zeros(inputs["kv_cache"].shape[:2], dtype=torch.bool)
    changed[pages, rows] = True
    unchanged = after["kv_cache"][~changed].view(torch.int16), inputs["kv_cache"][~changed].view(torch.int16)
    assert torch.equal(*unchanged)  # bitwise, so the NaN pages compare too
    assert rel_l2(after["kv_cache"][changed], golden["kv_cache"][changed]) <= contract.tolerance("bfloat16", "c_kv").rel_l2
    for name in inputs:
        if name != "kv_cache":
            assert torch.equal(after[name], inputs[name]), name


def test_candidate_with_its_gpu_sizing_matches_the_reference(contract, cases, monkeypatch):
    """The sizing the candidate uses on a GPU (16 or 64 rows per batch block, a 64-wide split vector whatever the
    split count: one compilation per kernel), run under the interpreter, stage by stage."""
    module = importlib.import_module(IMPLEMENTATIONS["triton_mla_paged"])
    monkeypatch.setattr(module, "_batch_block", lambda batch, interpreted: 16 if batch <= 16 else 64)
    monkeypatch.setattr(module, "_splits_vector", lambda num_splits, interpreted: module.MAX_SPLITS)
    assert module.MAX_SPLITS == 64
    for name, (inputs, golden) in cases.items():
        outputs, trace, _ = _run(module, inputs, traced=True)
        errors = {stage: rel_l2(trace[stage], golden[stage]) for stage in ref.STAGES}
        failing = {s: e for s, e in errors.items() if e > contract.tolerance("bfloat16", s, name).rel_l2}
        assert not failing, (name, failing)
        assert torch.equal(outputs["o_heads"], trace["o_heads"])


def test_contiguous_page_reads_diverge(cases, tmp_path):
    variant = load_variant("contiguous_pages", tmp_path)
    inputs, golden = cases["typical"]
    outputs, _, _ = _run(variant, inputs, traced=False)
    out = outputs["o_heads"].double()
    assert not torch.isfinite(out).all() or rel_l2(out, golden["o_heads"]) > 0.1


@pytest.fixture(scope="module")
def judge(paged_contract, tmp_path_factory):
    """One CPU judge for both checks, on the contract already loaded (its YAML takes seconds to parse)."""
    from ferret.contract.task import Task, project_root_of
    from ferret.gate.judge import Judge

    task = Task(CONTRACT, paged_contract, project_root_of(CONTRACT))
    return Judge(task, tmp_path_factory.mktemp("gates"), profile="cpu")


def test_honest_candidate_passes_the_cpu_gate(judge):
    verdict = judge.check(CANDIDATE_PATH, measure_speed=False)
    assert verdict.passed, [(v.id, v.failure) for v in verdict.variants if not v.passed]


def test_contiguous_page_reads_are_rejected_by_the_cpu_gate(judge, tmp_path):
    candidate = write_variant("contiguous_pages", tmp_path / "triton_mla_paged_contiguous.py")
    verdict = judge.check(candidate, measure_speed=False)
    assert not verdict.passed
    assert verdict.first_failing_stage in {"scores", "probs", "o_latent", "o_heads"}, verdict.first_failing_stage
    assert {d.cheat for d in verdict.detections} == {"math_mismatch"}, verdict.detections
