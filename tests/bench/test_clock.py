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
