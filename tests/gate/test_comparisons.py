"""`VariantComparisons`: variants judged a few at a time, each as soon as the candidate's process has moved past
it, and judged again after the run when its status changed since."""
# The comparisons are driven with stand-ins for the contract, the cases and the judge.
# pyright: reportArgumentType=false

from __future__ import annotations

import threading
import types
from pathlib import Path

from ferret import wire
from ferret.gate import comparisons as comparisons_module
from ferret.gate.comparisons import VariantComparisons
from ferret.gate.phases import PhaseClock


def _to_judge(*variants: tuple[str, str]):
    return [((vid, "case", "float32", part), lambda vid=vid: {"g": vid}, {}, None) for vid, part in variants]


class _Recorder:
    """Stands for `judge_variant`: records each call's variant and status, and says which status it judged (in a
    result's `judged`, which a `VariantResult` does not have: the type checker is told so where it is read)."""

    def __init__(self):
        self.calls: list[tuple[str, str | None]] = []
        self.lock = threading.Lock()
        self.called = threading.Event()

    def __call__(self, contract, ids, golden, status, tensors_file, input_digests, moved):
        assert golden == {"g": ids[0]} and tensors_file.name == wire.tensors_file(ids[0])
        with self.lock:
            self.calls.append((ids[0], None if status is None else status.message))
        self.called.set()
        return types.SimpleNamespace(id=ids[0], judged=None if status is None else status.message)


def _write_status(out: Path, vid: str, message: str) -> wire.VariantStatus:
    status = wire.VariantStatus(ok=True, message=message)
    (out / wire.status_file(vid)).write_text(status.to_json())
    return status


def test_variants_are_compared_at_once_and_returned_in_their_order(tmp_path: Path):
    both_in = threading.Barrier(2, timeout=30)  # broken (an error) unless two comparisons run at the same time
    recorder = _Recorder()

    def judge(*args):
        if args[1][0] in ("a", "b"):
            both_in.wait()
        return recorder(*args)

    clock = PhaseClock()
    with VariantComparisons(
        None,
        _to_judge(("a", "correctness"), ("b", "correctness"), ("c", "fresh_cases")),  # type: ignore[arg-type]
        tmp_path,
        judge,
        workers=4,
    ) as comparisons:  # pyright: ignore[reportArgumentType]
        results = comparisons.results({}, clock)
    assert [r.id for r in results] == ["a", "b", "c"]
    assert sorted(vid for vid, _ in recorder.calls) == ["a", "b", "c"]
    assert [p.name for p in clock.phases()] == ["compare:correctness", "compare:fresh_cases"]


def test_a_variant_the_process_moved_past_is_judged_during_the_run_and_not_again(tmp_path: Path):
    recorder = _Recorder()
    a = _write_status(tmp_path, "a", "a's result")
    with VariantComparisons(
        None,
        _to_judge(("a", "correctness"), ("b", "correctness")),
        tmp_path,
        recorder,  # type: ignore[arg-type]
        workers=2,
    ) as comparisons:
        comparisons.candidate_moved_to(1)  # the process started b: a is finished
        comparisons.candidate_moved_to(1)  # said again (a poll): nothing judged twice
        recorder.called.wait(timeout=30)
        assert recorder.calls == [("a", "a's result")], "a was not judged while the candidate still ran"
        b = _write_status(tmp_path, "b", "b's result")
        results = comparisons.results({"a": a, "b": b}, PhaseClock())
    assert recorder.calls == [("a", "a's result"), ("b", "b's result")]
    assert [r.judged for r in results] == ["a's result", "b's result"]  # pyright: ignore[reportAttributeAccessIssue]


def test_a_status_changed_after_its_early_judgment_is_judged_again_from_the_final_one(tmp_path: Path):
    """The candidate rewrote a's status after moving on, and b's was missing when a forged position (past the end)
    had it judged early: each result is the final status's."""
    recorder = _Recorder()
    _write_status(tmp_path, "a", "first")
    with VariantComparisons(
        None,
        _to_judge(("a", "correctness"), ("b", "dtypes")),
        tmp_path,
        recorder,  # type: ignore[arg-type]
        workers=1,
    ) as comparisons:
        comparisons.candidate_moved_to(10**6)
        final: dict[str, wire.VariantStatus | None] = {
            "a": _write_status(tmp_path, "a", "rewritten"),
            "b": _write_status(tmp_path, "b", "written late"),
        }
        results = comparisons.results(final, PhaseClock())
    assert [r.judged for r in results] == ["rewritten", "written late"]  # pyright: ignore[reportAttributeAccessIssue]
    assert sorted(recorder.calls, key=str) == sorted(
        [("a", "first"), ("b", None), ("a", "rewritten"), ("b", "written late")], key=str
    )


def test_a_variant_missing_after_the_run_is_judged_missing_even_if_it_was_there_early(tmp_path: Path):
    recorder = _Recorder()
    _write_status(tmp_path, "a", "there early")
    with VariantComparisons(None, _to_judge(("a", "correctness")), tmp_path, recorder, workers=1) as comparisons:  # type: ignore[arg-type]
        comparisons.candidate_moved_to(1)
        results = comparisons.results({}, PhaseClock())
    assert results[0].judged is None  # pyright: ignore[reportAttributeAccessIssue]


def test_judging_done_during_the_run_adds_no_compare_seconds_and_overlapping_parts_are_each_said_once(
    monkeypatch, tmp_path: Path
):
    """a was judged during the run (0-2 s, the run ended at 5 s); after it, b 5-7 s and c (next part) 6-8 s: the
    phases say 2 s for b's part and 1 s for c's (CI, 2026-12-01: overlapping parts once said more seconds than the
    check had)."""
    ticks = iter([0.0, 2.0, 5.0, 5.0, 7.0, 6.0, 8.0])
    monkeypatch.setattr(comparisons_module.time, "perf_counter", lambda: next(ticks))
    status = _write_status(tmp_path, "a", "a")
    with VariantComparisons(
        None,
        _to_judge(("a", "correctness"), ("b", "dtypes"), ("c", "edge_cases")),  # type: ignore[arg-type]
        tmp_path,
        _Recorder(),
        workers=1,
    ) as comparisons:  # pyright: ignore[reportArgumentType]
        comparisons.candidate_moved_to(1)
        comparisons._early[0][1].result()  # a's judging is done before the run ends
        clock = PhaseClock()
        comparisons.results({"a": status, "b": None, "c": None}, clock)
    assert {p.name: p.seconds for p in clock.phases()} == {
        "compare:correctness": 0.0,
        "compare:dtypes": 2.0,
        "compare:edge_cases": 1.0,
    }
