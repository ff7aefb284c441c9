"""The timing guards rehearsed on the CPU (`time_candidate(..., device="cpu")`): the real timing process,
input pool, output slots, fingerprint re-check and the judge's check of every timed answer, under the
Triton interpreter with a plain clock. The GPU runs of the same candidates are in
tests/gpu/test_gpu_timing_guards.py; here CI sees the same logic break if it breaks."""

from __future__ import annotations

from pathlib import Path

import pytest
from timing_cheats import LAZY, REWRITES_INPUTS, SIMPLIFIED, write_cheat

from ferret.contract.task import Task
from ferret.gate.judge import locate_gate
from ferret.gate.lock import verify_gate
from ferret.gate.models import GateManifest
from ferret.gate.timing import time_candidate

REPO = Path(__file__).resolve().parents[2]
CONTRACT = REPO / "contracts" / "rmsnorm.yaml"
HONEST = REPO / "tasks" / "rmsnorm" / "candidates" / "triton_rmsnorm.py"

@pytest.fixture(scope="module")
def rehearse(tmp_path_factory):
    task = Task.load(CONTRACT)
    gate = locate_gate(CONTRACT, task.contract, tmp_path_factory.mktemp("gates"), "cpu", lambda m: None)
    manifest = GateManifest.model_validate(verify_gate(gate))
    folder = tmp_path_factory.mktemp("candidates")

    def run_one(name: str, wrapper: str | None):
        # The rehearsal has no correctness runs before it: the switch comes after the warm-up calls.
        path = HONEST if wrapper is None else write_cheat(folder / f"{name}.py", wrapper, after=3)
        return time_candidate(task, manifest, gate, path, lambda m: None, device="cpu")

    return run_one


def test_honest_candidate_rehearses_clean_and_every_timed_answer_is_checked(rehearse):
    result = rehearse("honest", None)
    assert not result.measured and "not speedups" in result.reason
    assert len(result.cases) == 1 and result.cases[0].case == "typical"
    case = result.cases[0]
    assert case.pool_sets == 2 and case.answers_checked == case.pool_sets + 1
    assert case.flags == [] and result.detections == []
    assert case.floor_ms is None  # no datasheet floor on the CPU


def test_a_candidate_that_leaves_old_answers_is_named_twice(rehearse):
    result = rehearse("lazy", LAZY)
    cheats = {d.cheat for d in result.detections}
    assert {"cross_call_caching", "warmup_detection"} <= cheats, result.cases[0].flags


def test_math_simplified_after_the_warm_up_is_named_by_its_answers_alone(rehearse):
    result = rehearse("simplified", SIMPLIFIED)
    case = result.cases[0]
    # Deterministic: the fingerprint re-check agrees with it; only the answers show it.
    assert not any(f.startswith("cross_call_caching") for f in case.flags), case.flags
    assert any(f.startswith("warmup_detection: the answer a timed call left in output slot") for f in case.flags), case.flags
    assert {d.cheat for d in result.detections} == {"warmup_detection"}


def test_inputs_rewritten_to_an_answered_set_are_named_by_the_judges_copy(rehearse):
    """The timing process hands the candidate its input sets; the judge drew them and checks against its
    own copy, so rewriting them in the timing process cannot make a replayed answer look right."""
    result = rehearse("rewrites_inputs", REWRITES_INPUTS)
    case = result.cases[0]
    assert any(f.startswith("input_mutation: after the timed calls, read-only input") for f in case.flags), case.flags
    assert any(f.startswith("warmup_detection: the answer a timed call left in output slot") for f in case.flags), case.flags
    assert {"input_mutation", "warmup_detection"} <= {d.cheat for d in result.detections}


def test_the_floor_is_applied_by_the_judge_from_the_shapes_it_drew(rehearse, monkeypatch):
    """The floor is computed in the judge's process (the timing process shares memory with the candidate):
    given a datasheet that no kernel could beat, even the honest candidate's time is impossible."""
    from ferret.gate import timing

    monkeypatch.setattr(timing, "_peaks_seen_by_judge", lambda device: {"bytes_per_s": 1e3, "flops_per_s": 1e3, "l2_bytes": 0})
    case = rehearse("honest", None).cases[0]
    x, weight = 16 * 512 * 2, 512 * 2  # the CPU gate's first case, bfloat16: read once each
    assert case.floor_ms == pytest.approx((x + weight + x) / 1e3 * 1e3)  # plus y written once; ms
    assert any(f.startswith("impossible_speed:") for f in case.flags), case.flags
