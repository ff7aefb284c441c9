"""What the judge does at once: the timing processes started in a thread beside the fresh draw and the candidate's
run (`_TimingStart`), and the variants compared a few at a time (`Judge._judge_variants`)."""

from __future__ import annotations

import threading
import types
from pathlib import Path

import pytest

from ferret import wire
from ferret.errors import ContractError
from ferret.gate import judge as judge_module
from ferret.gate.judge import Judge, _TimingStart
from ferret.gate.phases import PhaseClock


class _Started:
    """Stands for `StartedTiming`: all the judge's thread asks of it is `stop()`."""

    def __init__(self):
        self.stopped = 0

    def stop(self):
        self.stopped += 1


def test_the_timing_start_runs_in_a_thread_beside_the_caller():
    release, started = threading.Event(), _Started()

    def start():
        assert release.wait(timeout=30), "the caller never got past the constructor"
        return started

    starting = _TimingStart(start, wanted=True)  # returns while start() is still blocked
    release.set()
    clock = PhaseClock()
    assert starting.result(clock) is started
    assert [p.name for p in clock.phases()] == ["timing_start_wait"]
    starting.stop()
    assert started.stopped == 1


def test_stop_stops_what_was_started_when_the_check_ended_before_asking_for_it():
    started = _Started()
    starting = _TimingStart(lambda: started, wanted=True)
    starting.stop()  # the candidate's run raised: the result was never asked for
    assert started.stopped == 1


def test_what_the_start_raised_is_raised_by_result_and_stop_is_quiet():
    def start():
        raise ContractError("contracts/x.yaml: roofline.bytes: the eager baseline timed under its floor")

    starting = _TimingStart(start, wanted=True)
    with pytest.raises(ContractError, match="roofline.bytes"):
        starting.result(PhaseClock())
    starting.stop()


def test_nothing_is_started_where_timing_is_not_wanted():
    calls = []
    starting = _TimingStart(lambda: calls.append(1), wanted=False)
    clock = PhaseClock()
    assert starting.result(clock) is None
    starting.stop()
    assert calls == [] and clock.phases() == []


def test_variants_are_compared_at_once_and_returned_in_their_order(monkeypatch, tmp_path: Path):
    both_in = threading.Barrier(2, timeout=30)  # broken (an error) unless two comparisons run at the same time
    order = []

    def fake_judge_variant(contract, ids, golden, status, tensors_file, input_digests):
        if ids[0] in ("a", "b"):
            both_in.wait()
        order.append(ids[0])
        assert tensors_file == tmp_path / wire.tensors_file(ids[0]) and golden == {"g": ids[0]}
        return types.SimpleNamespace(id=ids[0])

    monkeypatch.setattr(judge_module, "judge_variant", fake_judge_variant)
    to_judge = [((vid, "case", "float32", part), lambda vid=vid: {"g": vid}, {})
                for vid, part in (("a", "correctness"), ("b", "correctness"), ("c", "fresh_cases"))]
    judge = types.SimpleNamespace(contract=None)
    run = types.SimpleNamespace(statuses={})
    clock = PhaseClock()
    results = Judge._judge_variants(judge, run, to_judge, tmp_path, clock)  # type: ignore[arg-type]
    assert [r.id for r in results] == ["a", "b", "c"]
    assert sorted(order) == ["a", "b", "c"]
    assert [p.name for p in clock.phases()] == ["compare:correctness", "compare:fresh_cases"]
