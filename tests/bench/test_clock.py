"""The GPU clock's spin before each timed call (`ferret.bench.process.spin_before_call_ms`): long enough
that the call's launches are all queued before its start event, counting the flush already queued."""

from __future__ import annotations

import pytest

from ferret.bench.process import spin_before_call_ms


@pytest.mark.parametrize(
    ("host_ms", "flush_ms", "expected"),
    [
        (0.2, 0.06, 1.5 * 0.2 + 0.02 - 0.06),  # the flush already holds the GPU for part of the launch time
        (0.01, 0.1, 0.0),  # a flush longer than the launch time needs no spin
        (100.0, 0.06, 10.0),  # capped
        (None, 0.06, 0.0),  # a call that synchronizes: nothing can be queued ahead of it
    ],
)
def test_the_flush_and_the_spin_outlast_the_host_launch_time(host_ms, flush_ms, expected):
    assert spin_before_call_ms(host_ms, flush_ms, max_ms=10.0) == pytest.approx(expected)


def test_late_calls_are_dropped_from_the_median_unless_every_call_was_late():
    from ferret.bench.process import TimedCalls

    calls = TimedCalls(ms=[0.005, 0.030, 0.005, 0.006], queued_ahead=[True, False, True, True],
                       enqueue_ms=[0.05, 0.08, 0.05, 0.05])
    assert calls.late == 1 and calls.kept_ms() == [0.005, 0.005, 0.006]
    all_late = TimedCalls(ms=[0.03, 0.031], queued_ahead=[False, False], enqueue_ms=[0.08, 0.08])
    assert all_late.kept_ms() == [0.03, 0.031]  # kept for the record: the judge marks such a round


@pytest.mark.parametrize(
    ("spin_ms", "slowest_enqueue_ms", "expected"),
    [
        (0.01, 0.1, 1.5 * 0.1 + 0.02 - 0.06),  # the slowest enqueue seen needs more than twice the spin
        (0.2, 0.1, 0.4),  # twice the spin is longer
        (0.0, 0.01, 0.05),  # a spin of nothing grows to at least 50 us
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
