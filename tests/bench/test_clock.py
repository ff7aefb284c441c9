"""The GPU clock's spin before each timed call (`ferret.bench.process.spin_before_call_ms`): long enough
that the call's launches are all queued before its start event, counting the flush already queued, and then the
settling time (`SETTLE_MS`, 0.1 ms) more."""

from __future__ import annotations

import sys

import pytest

from ferret.bench.process import SETTLE_MS, spin_before_call_ms


@pytest.mark.parametrize(
    ("host_ms", "flush_ms", "expected"),
    [
        (0.2, 0.06, 1.5 * 0.2 + 0.02 - 0.06 + 0.1),  # the flush already holds the GPU for part of the launch time
        (0.01, 0.1, 0.1),  # a flush longer than the launch time: the settling time alone, never a call right behind it
        (100.0, 0.06, 10.0),  # capped
        (None, 0.06, 0.0),  # a call that synchronizes: nothing can be queued ahead of it
    ],
)
def test_the_flush_and_the_spin_outlast_the_host_launch_time(host_ms, flush_ms, expected):
    assert SETTLE_MS == 0.1  # the literals above count it
    assert spin_before_call_ms(host_ms, flush_ms, max_ms=10.0) == pytest.approx(expected)


@pytest.mark.quick
def test_late_calls_are_dropped_from_the_median_unless_every_call_was_late():
    from ferret.bench.process import TimedCalls

    calls = TimedCalls(
        ms=[0.005, 0.030, 0.005, 0.006], queued_ahead=[True, False, True, True], enqueue_ms=[0.05, 0.08, 0.05, 0.05]
    )
    assert calls.late == 1 and calls.kept_ms() == [0.005, 0.005, 0.006]
    all_late = TimedCalls(ms=[0.03, 0.031], queued_ahead=[False, False], enqueue_ms=[0.08, 0.08])
    assert all_late.kept_ms() == [0.03, 0.031]  # kept for the record: the judge marks such a round


@pytest.mark.parametrize(
    ("spin_ms", "slowest_enqueue_ms", "expected"),
    [
        (0.01, 0.1, 1.5 * 0.1 + 0.02 - 0.06 + 0.1),  # the slowest enqueue seen needs more than twice the spin
        (0.2, 0.1, 0.4),  # twice the spin is longer
        (0.0, 0.01, 0.1),  # a spin of nothing grows to at least the settling time
        (8.0, 2.0, 10.0),  # capped
    ],
)
def test_a_round_with_late_calls_is_timed_again_with_a_longer_spin(spin_ms, slowest_enqueue_ms, expected):
    from ferret.bench.process import TimedCalls, longer_spin_ms

    calls = TimedCalls(ms=[0.01, 0.01], queued_ahead=[False, True], enqueue_ms=[0.02, slowest_enqueue_ms])
    assert longer_spin_ms(spin_ms, calls, flush_ms=0.06, max_ms=10.0) == pytest.approx(expected)


def test_a_slow_first_call_does_not_set_the_launch_time():
    """Host launch time is measured in a case's first step, after the process sat waiting for the judge. Taken as
    the mean of three calls there, it read 0.124 ms on the H200 for a call whose whole synchronized wall time was
    0.117 ms, which loosened the wall-clock guard enough to miss a side stream. The median of the calls is taken,
    so one slow call does not set it; calls that waited for the GPU give None."""
    from ferret.bench.process import launch_time_ms

    assert launch_time_ms([0.124 * 5, 0.021, 0.019, 0.020, 0.022, 0.020, 0.021], hold_ms=40.0) == pytest.approx(0.021)
    assert launch_time_ms([40.0, 0.02, 0.02], hold_ms=40.0) is None  # the first call waited out the hold
    assert launch_time_ms([3.0] * 7, hold_ms=40.0) is None  # together half the hold: they waited for the GPU


def test_a_round_is_the_mean_over_loaded_copies_of_each_copys_median():
    """Rope decode's candidate read 5.76 or 6.30 us per loaded copy of its code (H200, 2026-12-01): with two copies
    called in turn the median of all calls sits on whichever level has one call more, so the round takes each
    copy's median, late calls left out, and their mean."""
    from ferret.bench.process import TimedCalls

    calls = TimedCalls(
        ms=[5.76, 6.30, 5.77, 6.31, 5.75, 6.29, 9.0],
        queued_ahead=[True] * 6 + [False],
        enqueue_ms=[0.01] * 7,
        copies=[0, 1, 0, 1, 0, 1, 0],
    )
    assert calls.round_ms() == pytest.approx((5.76 + 6.30) / 2)
    one_more_slow = TimedCalls(ms=[5.76, 6.30, 6.30], queued_ahead=[True] * 3, enqueue_ms=[0.01] * 3, copies=[0, 1, 1])
    assert one_more_slow.round_ms() == pytest.approx((5.76 + 6.30) / 2), "the slow copy's extra call does not win"
    assert TimedCalls(ms=[1.0, 3.0, 2.0], queued_ahead=[True] * 3, enqueue_ms=[0.0] * 3).round_ms() == 2.0


def test_slots_call_the_loaded_copies_in_turn_and_say_which_ran():
    from ferret.bench.process import Slots, warm_up

    ran: list[str] = []
    copies = [lambda i, o, p, k=k: ran.append(f"copy{k}") for k in range(3)]
    slots = Slots(copies, [{"x": 0}, {"x": 1}], dict, {})
    assert [slots.call() for _ in range(4)] == [0, 1, 2, 0] and ran == ["copy0", "copy1", "copy2", "copy0"]
    ran.clear()
    assert warm_up({"candidate": Slots(copies, [{"x": 0}], dict, {})}) is None
    assert sorted(ran) == ["copy0", "copy1", "copy2"], "every copy warmed up (each compiles or loads its kernels)"


def test_the_candidate_timer_loads_separate_copies_of_the_candidate(tmp_path, monkeypatch):
    from ferret import wire
    from ferret.bench import process

    source = tmp_path / "candidate.py"
    source.write_text("STATE = []\n\ndef run(inputs, outputs, params, trace=None):\n    STATE.append(1)\n")
    job = wire.TimingJob(
        role=wire.CANDIDATE_TIMER,
        source=str(source),
        entry="run",
        compile=False,
        device="cpu",
        params={},
        read_only=[],
        repeats=1,
        cases=[],
        result=str(tmp_path / "result.json"),
    )
    monkeypatch.delitem(sys.modules, "candidate", raising=False)  # another test's candidate, loaded in this process
    loaded = process.load_implementations(job)["candidate"]
    copies = loaded.entries
    assert len(copies) == process.CODE_COPIES >= 2
    assert len({id(fn.__globals__) for fn in copies}) == process.CODE_COPIES, "one module per copy"
    # each under the name `import` gives the file, and `sys.modules` names the copy about to run
    assert {fn.__globals__["__name__"] for fn in copies} == {"candidate"}
    loaded.enter(1)
    assert sys.modules["candidate"] is loaded.modules[1]
    copies[0]({}, {}, {})
    assert copies[0].__globals__["STATE"] == [1] and copies[1].__globals__["STATE"] == []
    monkeypatch.delitem(sys.modules, "candidate")


@pytest.mark.parametrize("calls", range(1, 13))
def test_every_slot_ends_on_an_input_other_than_its_first_whatever_the_count_of_calls(calls):
    """A candidate that writes each output slot once and never again leaves the answer to the slot's first input
    set there; the judge's checks of the slots see it only if the slot's last input differs from its first."""
    from ferret.bench.process import Slots

    slots = Slots([lambda i, o, p: None, lambda i, o, p: None], [{"x": 0}, {"x": 1}], dict, {})
    for _ in range(calls):
        slots.call()
    slots.end_away_from_first_inputs()
    used = [j for j, first in enumerate(slots.first_input) if first is not None]
    assert used and all(slots.last_input[j] != slots.first_input[j] for j in used)
