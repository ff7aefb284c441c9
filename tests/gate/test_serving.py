"""The judge's side of serving-true timing (ferret/gate/serving.py, ferret/gate/answers.py) on the CPU: the replayed
answers checked against the reference, the comparison's basis, the contract's `speed.graph_capture`, and the CPU
profile saying that serving timing was not measured. The timing processes' capture and replay need a GPU:
tests/gpu/test_graph_timing_gpu.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from safetensors.torch import save_file

from ferret import wire
from ferret.contract.load import load_contract
from ferret.contract.task import Task
from ferret.gate.answers import check_replayed_answers
from ferret.gate.inputs import draw_inputs
from ferret.gate.models import CaseTiming, ServingTiming, TimingResult
from ferret.gate.serving import NOT_MEASURED_ON_CPU, judge_serving, serving_speedups

REPO = Path(__file__).resolve().parents[2]
MLA = REPO / "contracts" / "mla_attention.yaml"


# --- the replayed answers ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def replayed():
    """One MLA CPU case: two pool sets (the second's floats perturbed), one fresh draw (every input differs, the
    lengths too), and the reference's answer to each, as honest replays would give them."""
    from tasks.mla_attention.reference import reference

    task = Task.load(MLA)
    contract = task.contract
    case = contract.cases_for("cpu")[1]  # ragged_batch: lengths differ per request
    gate_inputs = draw_inputs(contract, case, contract.primary_dtype)
    second = dict(gate_inputs)
    second["q_nope"] = (gate_inputs["q_nope"].float() * 1.01).to(torch.bfloat16)
    pool = [gate_inputs, second]
    fresh = [draw_inputs(contract, case, contract.primary_dtype, seed=12345)]
    assert not torch.equal(fresh[0]["cache_lens"], gate_inputs["cache_lens"])

    def answer(inputs):
        copies = {n: t.clone() for n, t in inputs.items()}
        return reference(copies, dict(contract.params))["o_heads"].to(torch.bfloat16).contiguous()

    answers = {
        wire.graph_key(wire.FRESH_SET, 0, "o_heads"): answer(fresh[0]),
        wire.graph_key(wire.POOL_SET, 1, "o_heads"): answer(pool[1]),
        wire.graph_key(wire.POOL_SET, 0, "o_heads"): answer(pool[0]),
    }
    return task, pool, fresh, answers


def _check(replayed, answers, tmp_path):
    task, pool, fresh, _ = replayed
    path = tmp_path / "answers.safetensors"
    save_file(answers, str(path))
    return check_replayed_answers(task, pool, fresh, path, task.contract.primary_dtype)


def test_honest_replays_on_every_set_pass(replayed, tmp_path):
    assert _check(replayed, replayed[3], tmp_path) == (3, [])


def test_a_replay_that_answers_the_captured_set_again_is_a_frozen_graph(replayed, tmp_path):
    """The graph captured on pool set 0 replays its frozen path on the fresh draw: the answer is set 0's."""
    answers = dict(replayed[3])
    answers[wire.graph_key(wire.FRESH_SET, 0, "o_heads")] = answers[wire.graph_key(wire.POOL_SET, 0, "o_heads")].clone()
    checked, flags = _check(replayed, answers, tmp_path)
    assert checked == 3 and len(flags) == 1
    assert flags[0].startswith(
        "graph_frozen: a CUDA-graph replay of the candidate's captured call on fresh input set 0, copied into the "
        "captured buffers, fails stage o_heads"
    )


def test_a_replay_left_out_or_a_missing_file_is_a_finding(replayed, tmp_path):
    answers = dict(replayed[3])
    del answers[wire.graph_key(wire.POOL_SET, 1, "o_heads")]
    checked, flags = _check(replayed, answers, tmp_path)
    assert checked == 0 and flags == [
        "graph_frozen: the timing process sent back no CUDA-graph replay answers for input sets ['pool1']"
    ]
    task, pool, fresh, _ = replayed
    checked, flags = check_replayed_answers(task, pool, fresh, tmp_path / "none.safetensors", "bfloat16")
    assert checked == 0 and "missing or unreadable" in flags[0]


# --- the comparison -----------------------------------------------------------------------------------


def _result(name: str, serving: wire.ServingTimes | None, answers: str = "") -> wire.TimingCaseResult:
    return wire.TimingCaseResult(
        case="c",
        samples={name: [0.01]},
        host_ms={},
        pool_sets=2,
        persisting_l2="",
        flags=[],
        answers_file=answers or None,
        serving={name: serving} if serving else {},
    )


def _reference(baseline: wire.ServingTimes) -> wire.TimingCaseResult:
    result = _result("baseline", baseline)
    result.samples["baseline_compiled"] = [0.02]
    result.serving["baseline_compiled"] = wire.ServingTimes(eager_ms=0.05, replay_ms=0.018)
    return result


CAPTURED = wire.ServingTimes(eager_ms=0.040, replay_ms=0.010)
BASELINE = wire.ServingTimes(eager_ms=0.090, replay_ms=0.030)
ITEM = wire.ServingTimes(
    eager_ms=0.050,
    not_capturable="RuntimeError: CUDA error: operation not permitted when stream is capturing",
    capture_site="cand.py:12: longest = int(lens.max().item())",
)
EVENTS = {"candidate": 0.012, "baseline": 0.032, "baseline_compiled": 0.02}


def _checks(calls: list[Path]):
    def check(path: Path) -> tuple[int, list[str]]:
        calls.append(path)
        return 3, []

    return check


def test_replay_against_replay_where_both_capture_and_every_candidate_process_is_checked():
    checked: list[Path] = []
    mine = [_result("candidate", CAPTURED, "a0"), _result("candidate", wire.ServingTimes(eager_ms=0.044, replay_ms=0.012), "a1")]
    serving, flags, review = judge_serving(mine, [_reference(BASELINE)], EVENTS, "require", _checks(checked))
    assert serving is not None and (flags, review) == ([], [])
    assert checked == [Path("a0"), Path("a1")] and serving.replay_answers_checked == 6
    assert serving.basis == "graph_replay" and serving.speedup == pytest.approx(0.030 / 0.011)
    assert serving.replay_ms["candidate"] == pytest.approx(0.011) and serving.eager_ms["candidate"] == pytest.approx(0.042)
    # host share: the part of the eager wall time the GPU is not working (GPU time = the replay)
    assert serving.host_share["candidate"] == pytest.approx(1 - 0.011 / 0.042)
    assert serving.host_share["baseline"] == pytest.approx(1 - 0.030 / 0.090)
    assert serving.not_graph_capturable == {}


def test_a_candidate_that_cannot_be_captured_is_rejected_where_the_contract_requires_it():
    checked: list[Path] = []
    serving, flags, review = judge_serving(
        [_result("candidate", ITEM, "a0")], [_reference(BASELINE)], EVENTS, "require", _checks(checked)
    )
    assert review == [] and checked == []  # nothing replayed, nothing to check
    assert len(flags) == 1 and flags[0].startswith(
        "not_graph_capturable: the candidate's call cannot be captured in a CUDA graph: host_read: RuntimeError: CUDA "
        "error: operation not permitted when stream is capturing (at cand.py:12: longest = int(lens.max().item()))"
    )
    # its speed is compared eagerly, and the host share uses its event time
    assert serving is not None and serving.basis == "eager" and serving.speedup == pytest.approx(0.090 / 0.050)
    assert serving.host_share["candidate"] == pytest.approx(1 - 0.012 / 0.050)
    assert set(serving.not_graph_capturable) == {"candidate"}


def test_where_the_contract_only_warns_it_is_a_review_line():
    serving, flags, review = judge_serving([_result("candidate", ITEM)], [_reference(BASELINE)], EVENTS, "warn", _checks([]))
    assert flags == [] and len(review) == 1 and review[0].startswith("not_graph_capturable: ")
    assert serving is not None and serving.basis == "eager"


def test_a_baseline_that_cannot_be_captured_makes_the_comparison_eager():
    baseline = wire.ServingTimes(eager_ms=0.2, not_capturable="RuntimeError: x", capture_site="b.py:3: n = int(t.max())")
    serving, flags, _ = judge_serving(
        [_result("candidate", CAPTURED, "a")], [_reference(baseline)], EVENTS, "require", _checks([])
    )
    assert flags == [] and serving is not None
    assert serving.basis == "eager" and serving.speedup == pytest.approx(0.2 / 0.040)
    assert "baseline" in serving.not_graph_capturable and "candidate" not in serving.not_graph_capturable


def test_a_process_that_reports_no_capture_counts_as_not_capturable():
    """The candidate's timer shares its memory with the candidate: a capture it does not report is not one."""
    silent = _result("candidate", None, "a1")
    _, flags, _ = judge_serving(
        [_result("candidate", CAPTURED, "a0"), silent], [_reference(BASELINE)], EVENTS, "require", _checks([])
    )
    assert flags == [
        "not_graph_capturable: the candidate's call cannot be captured in a CUDA graph: its timing process reported no capture"
    ]


def _case(speedup: float, serving: ServingTiming | None) -> CaseTiming:
    return CaseTiming(case="c", candidate_ms=0.01, baseline_ms=0.01 * speedup, speedup=speedup, serving=serving)


def test_the_target_is_held_to_the_serving_speedups_and_the_verdict_says_which():
    replay = ServingTiming(basis="graph_replay", speedup=1.3)
    eager = ServingTiming(basis="eager", speedup=2.5)
    assert serving_speedups([_case(2.0, replay), _case(3.0, replay)]) == ([1.3, 1.3], "graph_replay")
    assert serving_speedups([_case(2.0, replay), _case(3.0, eager)]) == ([1.3, 2.5], "mixed")
    assert serving_speedups([_case(2.0, eager)]) == ([2.5], "eager")
    assert serving_speedups([_case(2.0, replay), _case(3.0, None)]) == ([2.0, 3.0], "gpu_events")


def test_measured_results_take_their_target_from_the_replay(monkeypatch):
    from ferret.gate import timing

    task = Task.load(MLA)
    cases = [_case(2.0, ServingTiming(basis="graph_replay", speedup=1.1))]  # events say 2.0x, replay 1.1x: under 1.2
    result = timing._measured_result(task, "H100", "m", cases, [])
    assert result.speed_basis == "graph_replay" and result.serving_measured
    assert result.geomean_speedup == pytest.approx(1.1) and result.target_met is False


# --- the contract and the CPU profile -------------------------------------------------------------------


def test_the_mla_contracts_require_capture_and_the_others_warn():
    assert load_contract(MLA).speed.graph_capture == "require"
    assert load_contract(REPO / "contracts" / "mla_attention_paged.yaml").speed.graph_capture == "require"
    for op in ("rmsnorm", "softmax", "rope"):
        assert load_contract(REPO / "contracts" / f"{op}.yaml").speed.graph_capture == "warn"


def test_graph_capture_takes_only_its_two_values():
    from ferret.contract.model import Speed

    assert Speed(min_speedup=1.0, graph_capture="require").graph_capture == "require"
    with pytest.raises(ValidationError, match="graph_capture"):
        Speed.model_validate({"min_speedup": 1.0, "graph_capture": "maybe"})


def test_the_cpu_profile_says_serving_timing_was_not_measured():
    from ferret.gate.judge import Judge

    judge = Judge.__new__(Judge)
    judge.device = "cpu"
    result = judge._timing(None, lambda m: None, True, True, 0.0, None)  # type: ignore[arg-type]
    assert isinstance(result, TimingResult) and not result.measured and not result.serving_measured
    assert result.serving_reason == NOT_MEASURED_ON_CPU
    assert "CUDA-graph replay" in NOT_MEASURED_ON_CPU and "not measured" in NOT_MEASURED_ON_CPU


def test_the_speed_lines_say_the_serving_speed_and_what_it_compared():
    from ferret.gate.timing import speed_lines

    serving = ServingTiming(
        basis="graph_replay",
        speedup=2.5,
        replay_ms={"candidate": 0.0121, "baseline": 0.03},
        eager_ms={"candidate": 0.0484},
        host_share={"candidate": 0.75},
    )
    case = CaseTiming(case="decode", candidate_ms=0.0125, baseline_ms=0.031, speedup=2.48, serving=serving)
    result = TimingResult(
        measured=True, cases=[case], min_speedup_required=1.5, target_met=True, geomean_speedup=2.5, speed_basis="graph_replay"
    )
    assert speed_lines(result) == [
        "  speed decode: 12.5 us, 2.48x baseline, serving 2.50x (graph replay), replay 12.1 us, eager 48.4 us, host 75% of it",
        "speed: geomean 2.50x (graph replay) over the baseline, target 1.5x met",
    ]
    eager = serving.model_copy(update={"basis": "eager", "replay_ms": {}})
    assert (
        "serving 2.50x (eager), not graph capturable"
        in speed_lines(result.model_copy(update={"cases": [case.model_copy(update={"serving": eager})]}))[0]
    )
    cpu = TimingResult(measured=False, reason="no GPU", serving_reason=NOT_MEASURED_ON_CPU)
    assert speed_lines(cpu) == ["speed not measured: no GPU", f"serving timing not measured: {NOT_MEASURED_ON_CPU}"]


def test_the_reference_runs_once_per_set_however_many_processes_replayed(replayed, tmp_path, monkeypatch):
    from ferret.gate import answers as answers_module
    from ferret.gate.serving import replay_checker

    task, pool, fresh, honest = replayed
    path = tmp_path / "answers.safetensors"
    save_file(honest, str(path))
    runs = []
    real = answers_module.reference_outputs
    monkeypatch.setattr(answers_module, "reference_outputs", lambda *args: runs.append(1) or real(*args))
    check = replay_checker(task, pool, fresh)
    assert check(path) == (3, []) and check(path) == (3, [])
    assert len(runs) == 3
